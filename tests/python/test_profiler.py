"""kiln.profiler from Python: the event tree of real runs (every step once under its run, tasks
under their callers, annotations around what ran inside them), Chrome traces that pass the format
validator and read back into the same tree, schedules that act as PyTorch's, memory per run, and
errors that name what was wrong."""
import json
import subprocess

import numpy as np
import pytest

from chrome_trace_check import load_tree, validate
from conftest import REPO

DEMO = REPO / "models" / "demo.onnx"


@pytest.fixture
def kiln(kiln_module):
    return kiln_module


def demo_inputs(seed=0):
    return {"input": np.random.default_rng(seed).standard_normal((1, 3, 64, 64)).astype(np.float32)}


def children(events, parent_id):
    return [e for e in events if e["parent_id"] == parent_id]


def test_every_step_of_every_run_once_under_its_run(kiln):
    session = kiln.Session(DEMO, threads=1)
    inputs = demo_inputs()
    plan = session.explain(inputs)
    session.run(inputs)
    with kiln.profiler.profile() as prof:
        for _ in range(3):
            session.run(inputs)
    events = prof.events()
    runs = [e for e in events if e["kind"] == "run"]
    assert len(runs) == 3
    for run in runs:
        assert run["parent_id"] == 0 and run["threads"] == 1 and run["plan_steps"] == len(plan)
        steps = [e for e in children(events, run["id"]) if e["kind"] in ("step", "reorder")]
        # Views of fixed storage are made once per run context, so they are not executed per run.
        executed = sorted(e["step"] for e in steps)
        assert len(set(executed)) == len(executed)
        skipped = set(range(len(plan))) - set(executed)
        assert skipped and all(plan[s]["kernel"].endswith("view") for s in skipped)
        for step in steps:
            record = plan[step["step"]]
            assert (step["name"], step["node"], step["kernel"]) == (record["op"], record["node"], record["kernel"])
            assert step["kind"] == ("reorder" if record["op"] == "Reorder" else "step")
            assert run["start_ns"] <= step["start_ns"] <= step["end_ns"] <= run["end_ns"]
            assert step["tid"] == run["tid"]
            assert [list(s) for s in step["input_shapes"]] == record["input_shapes"]
            assert step["input_layouts"] == record["input_layouts"]
    conv = next(e for e in events if e["name"] == "Conv")
    assert conv["flops"] > 0 and conv["bytes"] > 0 and conv["input_dtypes"][0] == "float32"


def test_explain_and_trace_steps_have_the_same_fields_and_values(kiln, kiln_bin, tmp_path):
    """One field table writes `kiln explain --json`, Session.explain and a kiln trace's step events:
    the same fields, except where an event sits in the tree and the measurements `explain --profile`
    adds (a trace holds those as its events' times); a step event read back has the plan's values."""
    cli = subprocess.run([kiln_bin, "explain", DEMO, "--json", "--threads", "1"], capture_output=True,
                         text=True, check=True)
    cli_steps = json.loads(cli.stdout)["steps"]
    session = kiln.Session(DEMO, threads=1)
    inputs = demo_inputs()
    plan = session.explain(inputs)
    assert [sorted(step) for step in plan] == [sorted(step) for step in cli_steps]
    # The same plan in another process: equal but for the time creating each kernel took.
    assert [{**step, "creation_ms": 0} for step in plan] == [{**step, "creation_ms": 0} for step in cli_steps]

    session.run(inputs)
    with kiln.profiler.profile() as prof:
        session.run(inputs)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    events = kiln.profiler.load_trace(path).events()
    steps = [e for e in events if e["kind"] in ("step", "reorder")]
    assert steps
    placement = {"id", "parent_id", "kind", "name", "tid", "thread_name", "start_ns", "end_ns"}
    source = {"category", "file", "line", "attributes"}  # what any loaded trace's source said
    measured = {"ms", "gflops_per_s", "flops_per_byte", "bound", "bound_ms", "fraction_of_bound"}
    record_fields = set(plan[0]) - measured
    for step in steps:
        assert set(step) - placement - source == record_fields
        assert {k: step[k] for k in record_fields} == {k: plan[step["step"]][k] for k in record_fields}


def test_chrome_trace_is_valid_and_reads_back_into_the_same_tree(kiln, tmp_path):
    # A set count: at the default one a run may adapt to other processes' load and plan again inside
    # the async task (the task's children would be "plan" and "run").
    session = kiln.Session(DEMO, threads=1)
    inputs = demo_inputs()
    session.run(inputs)
    with kiln.profiler.profile() as prof:
        with kiln.profiler.record_function("outer"):
            session.run(inputs)
            session.run_async(inputs).wait()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    assert validate(trace) == []
    assert trace["kiln"]["cpu"] and trace["kiln"]["kiln_version"] == kiln.__version__
    expected = {e["id"]: (e["parent_id"], e["name"], e["kind"], e["tid"], e["start_ns"], e["end_ns"])
                for e in prof.events()}
    assert load_tree(path) == expected
    names = {e["ph"]: e for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names, "thread names are metadata events"
    # The async run's task is on a pool thread, under the annotation, with an arrow from it.
    events = prof.events()
    outer = next(e for e in events if e["name"] == "outer")
    task = next(e for e in events if e["kind"] == "interop_task")
    assert task["name"] == "run_async" and task["parent_id"] == outer["id"] and task["tid"] != outer["tid"]
    assert task["thread_name"].startswith("kiln-interop-")
    assert [e["kind"] for e in children(events, task["id"])] == ["run"]
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "s") >= 1


def test_parallel_runs_put_pool_steps_under_their_tasks(kiln, tmp_path):
    torch = pytest.importorskip("torch")

    class Branches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(8, 16, 3, padding=1)
            self.branches = torch.nn.ModuleList(torch.nn.Conv2d(16, 16, 3, padding=1) for _ in range(3))

        def forward(self, x):
            x = self.stem(x)
            return torch.cat([torch.relu(b(x)) for b in self.branches], 1)

    model = tmp_path / "branches.onnx"
    torch.onnx.export(Branches().eval(), torch.zeros(1, 8, 32, 32), str(model), opset_version=13,
                      input_names=["x"])
    session = kiln.Session(model, execution_mode="parallel", threads=1)
    inputs = {"x": np.ones((1, 8, 32, 32), np.float32)}
    session.run(inputs)
    with kiln.profiler.profile() as prof:
        for _ in range(5):
            session.run(inputs)
    events = prof.events()
    by_id = {e["id"]: e for e in events}
    for event in events:
        if event["kind"] == "interop_task":
            assert event["name"] == "parallel step" and by_id[event["parent_id"]]["kind"] == "run"
            assert len([e for e in children(events, event["id"]) if e["kind"] != "memory"]) == 1
        if event["kind"] in ("step", "reorder"):
            parent = by_id[event["parent_id"]]
            assert parent["kind"] in ("run", "interop_task") and parent["tid"] == event["tid"]
    path = tmp_path / "parallel.json"
    prof.export_chrome_trace(path)
    assert validate(json.loads(path.read_text())) == []


@pytest.mark.parametrize("config", [
    dict(wait=1, warmup=1, active=2, repeat=2),
    dict(wait=0, warmup=0, active=1, repeat=3),
    dict(wait=2, warmup=0, active=3, repeat=0, skip_first=1),
    dict(wait=0, warmup=2, active=2, repeat=1),
])
def test_schedules_act_as_pytorchs(kiln, config):
    torch_profiler = pytest.importorskip("torch.profiler")
    ours = kiln.profiler.schedule(**config)
    theirs = torch_profiler.schedule(**config)
    assert [ours(step).name for step in range(24)] == [theirs(step).name for step in range(24)]


def test_each_cycle_keeps_only_its_active_steps(kiln):
    session = kiln.Session(DEMO, threads=1)
    inputs = demo_inputs()
    ready = []

    def on_ready(prof):
        events = prof.events()
        ready.append(([e["name"] for e in events if e["kind"] == "annotation"],
                      sum(1 for e in events if e["kind"] == "run"), prof.step_num))

    with kiln.profiler.profile(schedule=kiln.profiler.schedule(wait=1, warmup=1, active=2, repeat=2),
                               on_trace_ready=on_ready) as prof:
        for _ in range(10):
            session.run(inputs)
            prof.step()
    assert ready == [(["ProfilerStep#2", "ProfilerStep#3"], 2, 4), (["ProfilerStep#6", "ProfilerStep#7"], 2, 8)]
    runs = [e for e in prof.events() if e["kind"] == "run"]
    steps = {e["id"]: e["name"] for e in prof.events() if e["kind"] == "annotation"}
    assert all(steps[run["parent_id"]].startswith("ProfilerStep#") for run in runs)


def test_leaving_the_active_steps_ends_the_cycle_and_a_failing_handler_is_not_called_twice(kiln):
    session = kiln.Session(DEMO, threads=1)
    actions = [kiln.profiler.ProfilerAction.RECORD, kiln.profiler.ProfilerAction.WARMUP,
               kiln.profiler.ProfilerAction.RECORD, kiln.profiler.ProfilerAction.NONE]
    calls = []

    def on_ready(prof):
        calls.append(sum(1 for e in prof.events() if e["kind"] == "run"))
        if len(calls) == 1:
            raise ValueError("handler failed")

    prof = kiln.profiler.profile(schedule=lambda step: actions[min(step, 3)], on_trace_ready=on_ready)
    prof.start()
    session.run(demo_inputs())
    with pytest.raises(ValueError, match="handler failed"):
        prof.step()  # RECORD -> WARMUP: the first cycle's trace is ready
    session.run(demo_inputs())  # warm-up: dropped
    prof.step()
    session.run(demo_inputs())
    prof.step()  # RECORD -> NONE
    prof.stop()
    assert calls == [1, 1]


def test_record_function_refuses_reentry_and_other_threads(kiln):
    import threading
    annotation = kiln.profiler.record_function("once")
    with annotation:
        with pytest.raises(RuntimeError, match="already entered"):
            annotation.__enter__()
    other = kiln.profiler.record_function("here")
    other.__enter__()
    failures = []

    def exit_elsewhere():
        try:
            other.__exit__(None, None, None)
        except RuntimeError as error:
            failures.append(str(error))

    thread = threading.Thread(target=exit_elsewhere)
    thread.start()
    thread.join()
    assert failures and "thread that entered it" in failures[0]
    other.__exit__(None, None, None)


def test_trace_handler_writes_one_valid_trace_per_cycle(kiln, tmp_path):
    session = kiln.Session(DEMO, threads=1)
    with kiln.profiler.profile(schedule=kiln.profiler.schedule(wait=0, warmup=1, active=1, repeat=2),
                               on_trace_ready=kiln.profiler.trace_handler(tmp_path / "traces")) as prof:
        for _ in range(5):
            session.run(demo_inputs())
            prof.step()
    written = sorted((tmp_path / "traces").glob("kiln_*_step*.json"))
    assert len(written) == 2
    for path in written:
        assert validate(json.loads(path.read_text())) == []


def test_memory_per_run_and_without_memory(kiln):
    session = kiln.Session(DEMO, threads=1)
    inputs = demo_inputs()
    with kiln.profiler.profile(profile_memory=True) as prof:
        session.run(inputs)  # the first run: its context's arena is allocated inside it
        outputs = session.run(inputs)
    output_bytes = sum(array.nbytes for array in outputs.values())
    runs = [e for e in prof.events() if e["kind"] == "run"]
    arena = [e for e in prof.events() if e["kind"] == "memory" and e["tag"] == "arena"]
    assert len(arena) == 1 and arena[0]["bytes"] == runs[0]["arena_bytes"] > 0
    assert runs[1]["allocated_bytes"] == output_bytes
    assert runs[1]["peak_bytes"] == runs[1]["arena_bytes"] + output_bytes
    with kiln.profiler.profile(profile_memory=False, record_shapes=False) as prof:
        session.run(inputs)
    events = prof.events()
    assert not [e for e in events if e["kind"] == "memory"]
    assert "arena_bytes" not in next(e for e in events if e["kind"] == "run")
    assert "input_shapes" not in next(e for e in events if e["kind"] == "step")
    assert "Self mem" not in prof.key_averages().table()


def test_key_averages_tables_and_rows(kiln):
    session = kiln.Session(DEMO, threads=1)
    inputs = demo_inputs()
    session.run(inputs)
    with kiln.profiler.profile() as prof:
        for _ in range(4):
            session.run(inputs)
    rows = {row["key"]: row for row in prof.key_averages("op").rows()}
    assert rows["run"]["calls"] == 4
    steps = [e for e in prof.events() if e["kind"] in ("step", "reorder")]
    assert sum(r["calls"] for k, r in rows.items() if r["kind"] != "run") == len(steps)
    assert rows["Conv"]["gflops_per_s"] > 0
    table = prof.key_averages("kernel").table(sort_by="total_time", row_limit=3)
    lines = table.splitlines()
    assert lines[1].split()[:3] == ["Name", "Self", "%"] and len(lines) == 3 + 3 + 2
    by_shape = prof.key_averages("shape").rows()
    assert any(row["key"].startswith("Conv [1, 3, 64, 64]") for row in by_shape)
    summary = json.loads(prof.summary_json())
    assert summary["runs"]["count"] == 4 and summary["key_averages"]["rows"]
    # PyTorch's sort keys are accepted too.
    assert prof.key_averages().table(sort_by="self_cpu_time_total") == prof.key_averages().table(sort_by="self_time")


def test_record_function_as_decorator_and_nested(kiln):
    session = kiln.Session(DEMO, threads=1)

    @kiln.profiler.record_function("predict")
    def predict():
        with kiln.profiler.record_function("inner"):
            return session.run(demo_inputs())

    with kiln.profiler.profile() as prof:
        predict()
    events = prof.events()
    predict_event = next(e for e in events if e["name"] == "predict")
    inner = next(e for e in events if e["name"] == "inner")
    assert predict_event["parent_id"] == 0 and inner["parent_id"] == predict_event["id"]
    # The session's first run plans first: planning is an event of its own, before the run.
    assert [e["kind"] for e in children(events, inner["id"]) if e["kind"] != "memory"] == ["plan", "run"]


def test_errors_name_what_was_wrong(kiln):
    with kiln.profiler.profile() as prof:
        with pytest.raises(RuntimeError, match="already recording"):
            kiln.profiler.profile().start()
    with pytest.raises(ValueError, match="unknown group_by 'layer'"):
        prof.key_averages("layer")
    with pytest.raises(ValueError, match="unknown sort key 'fastest'"):
        prof.key_averages().table(sort_by="fastest")
    idle = kiln.profiler.profile(schedule=kiln.profiler.schedule(wait=5, warmup=0, active=1))
    with idle:
        pass
    with pytest.raises(RuntimeError, match="no trace yet"):
        idle.events()
    with pytest.raises(ValueError, match="active must be at least 1"):
        kiln.profiler.schedule(wait=1, warmup=1, active=0)
    with pytest.raises(TypeError, match="name must be a str"):
        kiln.profiler.record_function(3)
    with pytest.raises(RuntimeError, match="cannot write the trace"):
        prof.export_chrome_trace("/nonexistent-folder/trace.json")

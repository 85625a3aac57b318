"""`kiln profile`, `kiln bench --profile` and `kiln explain --json`: tables, Chrome traces that pass
the format validator, JSON for scripts, and errors naming the option; and the validator itself,
which must catch each kind of broken trace."""
import copy
import json

import pytest

from chrome_trace_check import validate
from kiln_cli import run


def profile_json(kiln_bin, demo_model, *args):
    result = run(kiln_bin, "profile", demo_model, "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_profile_prints_the_table_and_writes_a_valid_trace(kiln_bin, demo_model, tmp_path):
    trace_path = tmp_path / "trace.json"
    result = run(kiln_bin, "profile", demo_model, "--runs", 3, "--warmup", 1, "--trace", trace_path, "--threads", 1)
    assert result.returncode == 0, result.stderr
    assert "runs: 3, median" in result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("Name"))
    assert header.split()[:4] == ["Name", "Self", "%", "Self"]
    assert "Conv" in result.stdout and "Self time total:" in result.stdout
    trace = json.loads(trace_path.read_text())
    assert validate(trace) == []
    runs = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "run"]
    assert len(runs) == 3 and all(e["args"]["parent_id"] == 0 for e in runs)
    steps = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in ("step", "reorder")]
    run_ids = {e["args"]["id"] for e in runs}
    assert steps and all(e["args"]["parent_id"] in run_ids for e in steps)
    assert trace["kiln"]["threads"] and trace["kiln"]["cpu_capability"]


def test_profile_json_groups_as_asked(kiln_bin, demo_model):
    summary = profile_json(kiln_bin, demo_model, "--runs", 4, "--group-by", "backend")
    assert summary["runs"]["count"] == 4 and summary["runs"]["median_ms"] > 0
    assert summary["key_averages"]["group_by"] == "backend"
    keys = {row["key"] for row in summary["key_averages"]["rows"]}
    assert "onednn" in keys or "native" in keys
    assert summary["runs"]["arena_bytes"] > 0 and summary["runs"]["peak_bytes"] >= summary["runs"]["arena_bytes"]


def test_profile_errors_name_the_option(kiln_bin, demo_model, tmp_path):
    cases = [
        (("--group-by", "layer"), "unknown group_by 'layer'"),
        (("--sort-by", "fastest"), "unknown sort key 'fastest'"),
        (("--group-by", "shape", "--no-shapes"), "--group-by shape needs shapes"),
        (("--runs", 0), "--runs"),
        (("--trace", tmp_path / "missing" / "trace.json"), "cannot write the trace"),
    ]
    for args, message in cases:
        result = run(kiln_bin, "profile", demo_model, *args)
        assert result.returncode != 0, args
        assert message in result.stderr, (args, result.stderr)
    missing = run(kiln_bin, "profile", tmp_path / "nothing.onnx")
    assert missing.returncode != 0 and "nothing.onnx" in missing.stderr


def test_bench_profile_records_the_timed_runs(kiln_bin, demo_model, tmp_path):
    result = run(kiln_bin, "bench", demo_model, "--iters", 4, "--warmup", 1, "--profile", "--json")
    assert result.returncode == 0, result.stderr
    bench = json.loads(result.stdout)
    assert bench["profiled"] is True and bench["profile"]["runs"]["count"] == 4
    text = run(kiln_bin, "bench", demo_model, "--iters", 3, "--profile", "--trace", tmp_path / "b.json")
    assert text.returncode == 0 and "profile of the timed runs" in text.stdout
    assert validate(json.loads((tmp_path / "b.json").read_text())) == []
    plain = json.loads(run(kiln_bin, "bench", demo_model, "--iters", 2, "--json").stdout)
    assert plain["profiled"] is False and "profile" not in plain
    refused = run(kiln_bin, "bench", demo_model, "--trace", tmp_path / "c.json")
    assert refused.returncode != 0 and "--trace needs --profile" in refused.stderr


def test_explain_json_matches_the_text(kiln_bin, demo_model):
    result = run(kiln_bin, "explain", demo_model, "--json", "--profile", 2)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    text = run(kiln_bin, "explain", demo_model).stdout
    assert text.splitlines()[1].startswith(f"{len(plan['steps'])} steps;")
    assert plan["profiled_runs"] == 2 and all(step["ms"] is not None for step in plan["steps"])
    conv = next(step for step in plan["steps"] if step["op"] == "Conv")
    assert conv["flops"] > 0 and conv["kernel"] in text and conv["input_dtypes"][0] == "float32"
    assert all(step["ms"] is None for step in json.loads(run(kiln_bin, "explain", demo_model, "--json").stdout)["steps"])


def test_the_validator_catches_broken_traces(kiln_bin, demo_model, tmp_path):
    path = tmp_path / "trace.json"
    assert run(kiln_bin, "profile", demo_model, "--runs", 2, "--trace", path).returncode == 0
    good = json.loads(path.read_text())
    assert validate(good) == []
    complete = [i for i, e in enumerate(good["traceEvents"]) if e["ph"] == "X"]
    child = next(i for i in complete if good["traceEvents"][i]["args"]["parent_id"] != 0)

    def broken(change):
        trace = copy.deepcopy(good)
        change(trace)
        return validate(trace)

    def set_event(index, **fields):
        return lambda trace: trace["traceEvents"][index].update(fields)

    def set_args(index, **fields):
        return lambda trace: trace["traceEvents"][index]["args"].update(fields)

    first, second = complete[0], complete[1]
    event = good["traceEvents"][child]
    assert broken(lambda t: t.pop("schemaVersion"))
    assert broken(lambda t: t.update(displayTimeUnit="s"))
    assert broken(set_event(first, dur=-1))
    assert broken(set_event(first, tid="main"))
    assert broken(set_args(second, id=good["traceEvents"][first]["args"]["id"]))
    assert broken(set_args(first, id=0))
    assert broken(set_args(child, parent_id=10 ** 6))
    # A step that outlives its run on the same thread neither nests nor stays inside its parent.
    assert broken(set_event(child, dur=event["dur"] + 10 ** 6))
    assert broken(lambda t: t.update(traceEvents=[e for e in t["traceEvents"] if e.get("name") != "thread_name"]))
    assert broken(lambda t: t["traceEvents"].append({"ph": "Z", "name": "x", "pid": 1, "tid": 1, "ts": 0}))


SEEDS = __import__("pathlib").Path(__file__).resolve().parents[2] / "fuzz" / "trace_seeds"


def test_profile_load_reads_a_kineto_trace_and_says_what_it_lacks(kiln_bin):
    result = run(kiln_bin, "profile", "--load", SEEDS / "kineto.json", "--row-limit", 0)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("trace: ") and "(kineto_json, 5 events on 2 threads)" in lines[0]
    assert any(line.startswith("not in the trace: machine facts") for line in lines)
    assert any(line.startswith("read: parents found by nesting in time") for line in lines)
    assert "aten::addmm" in result.stdout and "ProfilerStep#0" in result.stdout

    summary = json.loads(run(kiln_bin, "profile", "--load", SEEDS / "legacy.json", "--json").stdout)
    assert summary["source"] == "torch_legacy_json" and summary["events"] == 2
    assert any("Python frames" in item for item in summary["unavailable"])
    rows = {row["key"]: row for row in summary["key_averages"]["rows"]}
    assert rows["aten::linear"]["total_ns"] == 306_000 and rows["aten::linear"]["self_ns"] == 306_000 - 74_000


@pytest.mark.parametrize("seed", ["kiln.json", "kiln_plan_dataflow.json"])
def test_kiln_fuzz_seeds_are_traces_this_kiln_reads(kiln_bin, seed):
    """The fuzzer starts from these; a seed the loader refuses (a format change) fuzzes only errors."""
    result = run(kiln_bin, "profile", "--load", SEEDS / seed, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["source"] == "kiln_json"


def test_profile_load_errors_name_the_option_and_the_cap(kiln_bin, tmp_path):
    result = run(kiln_bin, "profile", "--load", SEEDS / "kineto.json", "--runs", 3)
    assert result.returncode != 0 and "--runs applies to recording runs" in result.stderr
    result = run(kiln_bin, "profile", "--load", SEEDS / "kineto.json", "--max-trace-bytes", 100)
    assert result.returncode != 0 and "over the cap of 100 bytes" in result.stderr
    result = run(kiln_bin, "profile", "--load", SEEDS / "kineto.json", "--max-trace-bytes", "lots")
    assert result.returncode != 0 and "--max-trace-bytes expects a number of bytes" in result.stderr
    result = run(kiln_bin, "profile", "model.onnx", "--max-trace-bytes", 100)
    assert result.returncode != 0 and "--max-trace-bytes applies to --load" in result.stderr
    truncated = tmp_path / "truncated.json"
    truncated.write_text((SEEDS / "kineto.json").read_text()[:300])
    result = run(kiln_bin, "profile", "--load", truncated)
    assert result.returncode != 0 and "truncated" in result.stderr and str(truncated) in result.stderr

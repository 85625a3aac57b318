"""`kiln profile`, `kiln bench --profile` and `kiln explain --json`: tables, Chrome traces that pass
the format validator, JSON for scripts, and errors naming the option; the validator itself, which
must catch each kind of broken trace; and the roofline: `kiln info --roofline`, its cache file, and
each step's bound in explain and profile."""
import copy
import json
import os
import subprocess

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


def run_with_cache(kiln_bin, cache, *args):
    """`kiln ARGS...` keeping its roofline in `cache` (KILN_CACHE_DIR)."""
    env = dict(os.environ, KILN_CACHE_DIR=str(cache))
    return subprocess.run([str(kiln_bin), *map(str, args)], capture_output=True, text=True, timeout=600, env=env)


def roofline_rows(text):
    """{"avx512": (one thread, per thread all busy), "256 KiB": (one, all), ...} from `kiln info --roofline`."""
    rows = {}
    for line in text.split("roofline: ", 1)[1].splitlines()[1:]:
        if not line.startswith("    "):
            continue
        fields = line.split()
        name = " ".join(fields[:-2]).replace(" (memory)", "")
        rows[name] = (float(fields[-2]), float(fields[-1]))
    return rows


def test_info_roofline_is_measured_once_then_read_from_its_cache(kiln_bin, tmp_path):
    cache = tmp_path / "cache"
    first = run_with_cache(kiln_bin, cache, "info", "--roofline", "--threads", 1)
    assert first.returncode == 0, first.stderr
    files = list(cache.glob("roofline-*-1t.txt"))
    assert len(files) == 1 and f"roofline: measured now, kept in {files[0]}" in first.stdout
    rows = roofline_rows(first.stdout)
    assert rows["baseline"][0] > 0 and "256 MiB" in rows and "256 KiB" in rows
    assert all(one > 0 and all_busy > 0 for one, all_busy in rows.values())
    assert "ridge point" in first.stdout

    second = run_with_cache(kiln_bin, cache, "info", "--roofline", "--threads", 1)
    assert f"roofline: read from {files[0]}" in second.stdout
    assert roofline_rows(second.stdout) == rows  # the same figures, not a new measurement

    as_json = json.loads(run_with_cache(kiln_bin, cache, "info", "--roofline", "--json", "--threads", 1).stdout)
    assert as_json["threads"] == 1 and as_json["source"] == f"read from {files[0]}"
    for tier in as_json["tiers"]:
        assert abs(tier["gflops_per_s_one"] - rows[tier["tier"]][0]) <= 0.051
    assert as_json["peak_gflops_per_s_one"] == as_json["peak_gflops_per_s_all"] > 0
    assert [level["bytes"] for level in as_json["bandwidth"]][-1] == 256 << 20

    files[0].write_text("kiln roofline 1\ncpu another machine\n")
    third = run_with_cache(kiln_bin, cache, "info", "--roofline", "--threads", 1)
    assert third.returncode == 0, third.stderr
    assert f"kept in {files[0]} ({files[0]} did not hold a roofline of this CPU and thread count)" in third.stdout
    assert "read from" in run_with_cache(kiln_bin, cache, "info", "--roofline", "--threads", 1).stdout
    remeasured = run_with_cache(kiln_bin, cache, "info", "--roofline", "--remeasure", "--threads", 1)
    assert "measured now, kept in" in remeasured.stdout

    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    unwritable = run_with_cache(kiln_bin, not_a_directory, "info", "--roofline", "--threads", 1)
    assert unwritable.returncode == 0 and "measured now (not kept: cannot write" in unwritable.stdout

    for option in ("--remeasure", "--json"):
        refused = run(kiln_bin, "info", option)
        assert refused.returncode != 0 and f"{option} applies to --roofline" in refused.stderr


@pytest.fixture(scope="module")
def roofline_cache(tmp_path_factory):
    """One cache for the explain and profile tests: the roofline is measured once."""
    return tmp_path_factory.mktemp("roofline")


def test_explain_profile_places_every_step_against_the_roofline(kiln_bin, demo_model, roofline_cache):
    cache = roofline_cache
    result = run_with_cache(kiln_bin, cache, "explain", demo_model, "--json", "--profile", 3, "--threads", 1)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    steps = plan["steps"]
    for step in steps:
        assert step["bound"] in ("compute", "memory")
        if step["flops"] == 0:
            assert step["bound"] == "memory" and step["flops_per_byte"] == 0
        else:
            assert step["flops_per_byte"] == pytest.approx(step["flops"] / step["bytes"], rel=1e-3)
        if step["ms"] > 1e-3:  # JSON times have 6 decimals
            assert step["fraction_of_bound"] == pytest.approx(step["bound_ms"] / step["ms"], rel=1e-2, abs=1e-3)
    totals = plan["roofline"]
    assert totals["measured_ms"] == pytest.approx(sum(step["ms"] for step in steps), rel=1e-6)
    assert totals["bound_ms"] == pytest.approx(sum(step["bound_ms"] for step in steps), rel=1e-5)
    assert totals["compute_steps"] + totals["memory_steps"] == len(steps) and totals["unbounded_steps"] == 0
    for side in ("compute", "memory"):
        saving = sum(max(0.0, step["ms"] - step["bound_ms"]) for step in steps if step["bound"] == side)
        assert totals[f"{side}_saving_ms"] == pytest.approx(saving, rel=1e-5, abs=1e-6)
    assert totals["threads"] == 1 and totals["peak_gflops_per_s"] > 0 and totals["memory_gb_per_s"] > 0
    assert totals["source"].startswith(("measured now, kept in ", "read from "))

    unprofiled = json.loads(run(kiln_bin, "explain", demo_model, "--json").stdout)
    assert unprofiled["roofline"] is None and all(step["bound"] is None for step in unprofiled["steps"])

    text = run_with_cache(kiln_bin, cache, "explain", demo_model, "--profile", 2, "--threads", 1).stdout
    assert "of the compute bound" in text or "of the memory bound" in text
    assert "roofline: at their bounds the steps would take" in text and "read from" in text


def test_profile_shows_each_rows_bound_unless_asked_not_to(kiln_bin, demo_model, roofline_cache):
    cache = roofline_cache
    result = run_with_cache(kiln_bin, cache, "profile", demo_model, "--runs", 3, "--threads", 1)
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if line.startswith("Name"))
    assert "Bound" in header and "Of bound" in header
    conv = next(line for line in result.stdout.splitlines() if line.startswith("Conv "))
    assert " C " in conv or " M " in conv or " C+M " in conv
    assert "roofline: at their bounds the steps would take" in result.stdout

    summary = json.loads(run_with_cache(kiln_bin, cache, "profile", demo_model, "--runs", 3, "--json").stdout)
    rows = {row["key"]: row for row in summary["key_averages"]["rows"]}
    assert 0 <= rows["Conv"]["compute_bound_calls"] <= rows["Conv"]["calls"] and rows["Conv"]["bound_ns"] > 0
    steps_per_run = sum(row["calls"] for row in rows.values() if row["kind"] in ("step", "reorder")) / 3
    assert summary["roofline"]["compute_steps"] + summary["roofline"]["memory_steps"] == steps_per_run
    assert summary["roofline"]["measured_ms"] > summary["roofline"]["compute_saving_ms"]

    plain = run_with_cache(kiln_bin, cache, "profile", demo_model, "--runs", 2, "--no-roofline")
    assert "Bound" not in plain.stdout and "roofline:" not in plain.stdout
    plain_json = json.loads(run_with_cache(kiln_bin, cache, "profile", demo_model, "--runs", 2, "--json",
                                           "--no-roofline").stdout)
    assert "roofline" not in plain_json and "bound_ns" not in plain_json["key_averages"]["rows"][0]

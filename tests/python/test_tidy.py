"""kiln.tidy against TorchTidy (torch.profiler._pattern_matcher in Debian's PyTorch 1.13).

Each workload of tidy_workloads.py is profiled once per session; for every TorchTidy pattern, kiln
must match exactly the events P(prof).matched_events() matches (per pattern: report_all_anti_patterns
raises where a match has no Python location, and its benchmark mode asserts CUDA), read through
from_torch and through the Kineto-format file of the same run, with TorchTidy's source locations
where the live profiler records them. Also: the clean run matches nothing, the legacy export names
what it cannot evaluate, torchtidy_report.json as TorchTidy writes it, the CLI and its errors.
"""
import collections
import json
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import _pattern_matcher as torchtidy  # noqa: E402 (after the skip)

import tidy_workloads  # noqa: E402
import torch_profiles  # noqa: E402

TORCHTIDY_PATTERNS = [
    torchtidy.ExtraCUDACopyPattern, torchtidy.ForLoopIndexingPattern, torchtidy.FP32MatMulPattern,
    torchtidy.OptimizerSingleTensorPattern, torchtidy.SynchronizedDataLoaderPattern,
    torchtidy.GradNotSetToNonePattern, torchtidy.Conv2dBiasFollowedByBatchNorm2dPattern,
    torchtidy.MatMulDimInFP16Pattern,
]
CORRECTED = ["FP32 MatMul On TF32 GPU Pattern", "Extra Host To Device Copy Pattern"]
KILN_PATTERNS = ["ReorderBetweenStepsPattern", "NativeFallbackPattern", "FP32OnBF16CPUPattern",
                 "UnfusedElementwisePattern", "TinyOpMultithreadedPattern", "OversubscriptionPattern",
                 "PlanCacheMissPattern", "IdleGapPattern"]
WORKLOADS = {workload.__name__: workload for workload in
             list(tidy_workloads.WORKLOADS) + [tidy_workloads.clean, tidy_workloads.mixed]}
# The mixed run again with memory events, which TorchTidy's sibling rules see as calls: kiln must
# agree with whatever TorchTidy finds there (what it shows is not asserted).
WORKLOADS["with_memory"] = tidy_workloads.mixed


@pytest.fixture(scope="session")
def kiln(kiln_module):
    return kiln_module


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """name -> (prof, Kineto-format file of it, {pattern name: TorchTidy's matched events})."""
    directory = tmp_path_factory.mktemp("tidy")
    out = {}
    for name, workload in WORKLOADS.items():
        # PyTorch 1.13 now and then records a run without some of its calls (seen: a Sequential's first
        # Conv2d module call and every aten::conv2d of the run gone; three times in a row for the mixed
        # workload once, under the default tier's parallel load): profile again, up to 5 times, until
        # TorchTidy finds what the workload is made for.
        for _ in range(5):
            prof = tidy_workloads.profiled(workload, profile_memory=name == "with_memory")
            matched = {}
            for pattern_class in TORCHTIDY_PATTERNS:
                pattern = pattern_class(prof)
                matched[pattern.name] = pattern.matched_events()
            if expected_shown(name) <= {pattern for pattern, events in matched.items() if events}:
                break
        path = directory / f"{name}.json"
        torch_profiles.write_kineto(prof, path)
        out[name] = (prof, path, matched)
    return out


def expected_shown(name):
    if name == "mixed":
        return set(tidy_workloads.WORKLOADS.values())
    if name in ("clean", "with_memory"):
        return set()
    return {tidy_workloads.WORKLOADS[WORKLOADS[name]]}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_the_workload_shows_what_it_is_made_for(runs, name):
    _, _, matched = runs[name]
    shown = {pattern for pattern, events in matched.items() if events}
    assert expected_shown(name) <= shown, matched
    if name == "clean":
        assert shown == set()
    if name == "with_memory":
        assert "FP32 MatMul Pattern" in shown  # no memory event can hide it


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_from_torch_matches_the_events_torchtidy_matches(kiln, runs, name):
    prof, _, matched = runs[name]
    report = kiln.tidy.report(prof)
    trace = kiln.profiler.load_trace(prof)
    events = {event["id"]: event for event in trace.events()}
    for pattern, torch_events in matched.items():
        assert report.counts[pattern] == len(torch_events), pattern
        ours = collections.Counter(
            (events[m["event_id"]]["name"], events[m["event_id"]]["start_ns"] + trace.origin_ns)
            for m in report.matches if m["pattern"] == pattern)
        theirs = collections.Counter((event.name, event.start_time_ns) for event in torch_events)
        assert ours == theirs, pattern
        # The live profiler records each call's caller: TorchTidy's locations, in its order.
        locations = [f"{m['file']}:{m['line']}" if m["file"] else "No source code location found"
                     for m in report.matches if m["pattern"] == pattern]
        assert locations == [torchtidy.source_code_location(event) for event in torch_events], pattern
    assert report.exact_locations
    assert report.counts.keys() == set(matched) | set(CORRECTED) | set(KILN_PATTERNS)
    # A CPU-only run: the corrected checks are not evaluated, and say why; kiln's runtime patterns
    # read kiln's steps, which a PyTorch trace does not have.
    reasons = {note["pattern"]: note["reason"] for note in report.not_evaluated}
    assert all("no GPU work" in reasons[pattern] for pattern in CORRECTED)
    assert all(report.counts[pattern] == 0 for pattern in CORRECTED)
    assert all("a PyTorch trace" in reasons[pattern] for pattern in KILN_PATTERNS)
    assert all(report.counts[pattern] == 0 for pattern in KILN_PATTERNS)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_the_kineto_file_matches_the_same_events(kiln, runs, name):
    prof, path, matched = runs[name]
    report = kiln.tidy.report(path)
    trace = kiln.profiler.load_trace(path)
    position = {event["id"]: int(event["attributes"]["Ev Idx"]) for event in trace.events()
                if "Ev Idx" in event["attributes"]}
    index_of = {event.id: index for index, (event, _) in enumerate(torch_profiles.preorder(prof))}
    for pattern, torch_events in matched.items():
        assert report.counts[pattern] == len(torch_events), pattern
        assert [position[m["event_id"]] for m in report.matches if m["pattern"] == pattern] == \
            [index_of[event.id] for event in torch_events], pattern
    # The format has no TF32 flag: PyTorch's default, said; no caller frames: enclosing functions.
    assert any("allow_tf32_cublas" in flag and "False since 1.12" in flag for flag in report.assumed)
    assert not report.exact_locations or not report.matches


def test_file_locations_are_the_enclosing_user_function(kiln, runs):
    _, path, _ = runs["fp32_matmul"]
    report = kiln.tidy.report(path)
    lines = {(m["file"], m["line"]) for m in report.matches if m["pattern"] == "FP32 MatMul Pattern"}
    assert lines == {("tidy_workloads.py", tidy_workloads.fp32_matmul.__code__.co_firstlineno)}


def test_caveats_flag_torchtidys_rules_where_they_are_wrong(kiln, runs):
    report = kiln.tidy.report(runs["mixed"][0])
    caveats = {note["pattern"]: note["caveat"] for note in report.caveats}
    assert "empty architecture list" in caveats["FP32 MatMul Pattern"]
    assert "never checks where the copy goes" in caveats["Extra CUDA Copy Pattern"]
    assert "report_all_anti_patterns leaves this pattern out" in caveats["For Loop Indexing Pattern"]
    text = report.text(per_event=True)
    assert "Matched Events:" in text and "Summary:" in text and "caveat: FP32 MatMul Pattern" in text
    assert "Findings (" in report.text() and "Matched Events:" not in report.text()
    for summary in report.summaries:
        assert summary in text


def test_torchtidy_json_is_what_torchtidy_writes(kiln, runs, tmp_path):
    prof, _, _ = runs["mixed"]
    theirs_dir, ours_dir = tmp_path / "torchtidy", tmp_path / "kiln"
    theirs_dir.mkdir()
    ours_dir.mkdir()
    torchtidy.report_all_anti_patterns(prof, json_report_dir=str(theirs_dir), print_enable=False)
    # report_all_anti_patterns leaves ForLoopIndexingPattern out; kiln's corrected patterns are its own.
    kiln.tidy.report(prof, corrected=False).write_torchtidy_json(ours_dir)
    theirs = json.loads((theirs_dir / "torchtidy_report.json").read_text())
    ours = json.loads((ours_dir / "torchtidy_report.json").read_text())
    ours = {file: [entry for entry in entries if entry["name"] != "For Loop Indexing Pattern"]
            for file, entries in ours.items()}
    assert ours == {file: entries for file, entries in theirs.items()}
    # Written again, it merges as TorchTidy's does: other files kept, this run's replaced.
    (ours_dir / "torchtidy_report.json").write_text(json.dumps({"other.py": [{"line_number": 1}]}))
    kiln.tidy.report(prof).write_torchtidy_json(str(ours_dir))
    merged = json.loads((ours_dir / "torchtidy_report.json").read_text())
    assert merged["other.py"] == [{"line_number": 1}] and "tidy_workloads.py" in merged


def test_name_patterns_are_regular_expressions(kiln, runs):
    prof, _, _ = runs["fp32_matmul"]
    report = kiln.tidy.report(prof, names=["^aten::m+$", "aten::(randn|normal_)"])
    assert report.counts["^aten::m+$"] == torchtidy.NamePattern(prof, "^aten::m+$").matched_events().__len__()
    assert report.counts["aten::(randn|normal_)"] == len(
        torchtidy.NamePattern(prof, "aten::(randn|normal_)").matched_events())
    with pytest.raises(ValueError, match=r"'\(unclosed' is not a regular expression"):
        kiln.tidy.report(prof, names=["(unclosed"])
    with pytest.raises(TypeError, match="names must be a list"):
        kiln.tidy.report(prof, names="aten::mm")


def test_the_legacy_export_names_what_it_cannot_evaluate(kiln, runs, tmp_path):
    prof, _, _ = runs["mixed"]
    path = tmp_path / "legacy.json"
    prof.export_chrome_trace(str(path))  # Debian's PyTorch has no Kineto: the legacy array
    report = kiln.tidy.report(path)
    assert report.source == "torch_legacy_json"
    reasons = {note["pattern"]: note["reason"] for note in report.not_evaluated}
    for pattern in ["Extra CUDA Copy Pattern", "Matrix Multiplication Dimension Not Aligned Pattern"]:
        assert "recorded without with_stack" in reasons[pattern]
    for pattern in ["FP32 MatMul Pattern", "Enabling Bias in Conv2d Followed By BatchNorm Pattern"]:
        assert "recorded without record_shapes" in reasons[pattern]
    for pattern in ["Optimizer Single Tensor Pattern", "Synchronized DataLoader Pattern",
                    "Gradient Set To Zero Instead of None Pattern"]:
        assert "no Python events" in reasons[pattern]
        assert report.counts[pattern] == 0
    # TorchTidy on a profile recorded like the export (no stack, no shapes) agrees where it runs.
    bare = torch_profiles.training_run(with_stack=False, record_shapes=False)
    assert kiln.tidy.report(bare).counts["For Loop Indexing Pattern"] == len(
        torchtidy.ForLoopIndexingPattern(bare).matched_events())


def test_benchmark_times_pytorchs_fixes_with_pytorch_on_this_cpu(kiln, runs):
    prof, path, _ = runs["mixed"]
    report = kiln.tidy.report(prof, benchmark=True)
    estimates = {estimate["pattern"]: estimate for estimate in report.estimates}
    assert set(estimates) == {"FP32 MatMul Pattern", "Extra CUDA Copy Pattern",
                              "Matrix Multiplication Dimension Not Aligned Pattern"}
    extensions = kiln.profiler.machine_facts()["cpu_extensions"].split()
    if "AVX512_BF16" in extensions or "AMX_BF16" in extensions:
        assert estimates["FP32 MatMul Pattern"]["estimated_saving_ms"] is not None
        assert "torch.autocast('cpu', torch.bfloat16)" in estimates["FP32 MatMul Pattern"]["basis"]
    else:
        assert "no bf16 arithmetic" in estimates["FP32 MatMul Pattern"]["basis"]
    # A copy takes time: removing it saves some.
    assert estimates["Extra CUDA Copy Pattern"]["estimated_saving_ms"] > 0
    copies = [m for m in report.matches if m["pattern"] == "Extra CUDA Copy Pattern"]
    assert copies and all(m["estimated_saving_ms"] > 0 for m in copies)
    # bfloat16 products run on a CPU: padded and unpadded are both timed.
    assert estimates["Matrix Multiplication Dimension Not Aligned Pattern"]["estimated_saving_ms"] is not None
    # A trace file names no CPU: nothing is measured on a machine it may not have run on.
    report = kiln.tidy.report(path, benchmark=True)
    assert report.estimates and all(e["estimated_saving_ms"] is None for e in report.estimates)
    assert all("does not name its CPU" in e["basis"] for e in report.estimates)


def test_a_kiln_trace_is_evaluated_by_kilns_patterns_only(kiln, demo_model):
    import numpy as np

    session = kiln.Session(str(demo_model))
    inputs = {"input": np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    with kiln.profiler.profile() as prof:
        session.run(inputs)
    report = kiln.tidy.report(prof)
    assert report.source == "kiln"
    # What is evaluated are kiln's runtime patterns (test_tidy_kiln.py), and only they match; on a CPU
    # without bf16 arithmetic FP32OnBF16CPUPattern is not evaluated either, and says why.
    extensions = kiln.profiler.machine_facts()["cpu_extensions"].split()
    without_bf16 = set() if {"AVX512_BF16", "AMX_BF16"} & set(extensions) else {"FP32OnBF16CPUPattern"}
    reasons = {note["pattern"]: note["reason"] for note in report.not_evaluated}
    assert set(reasons) == set(report.counts) - set(KILN_PATTERNS) | without_bf16
    for pattern, reason in reasons.items():
        assert ("no bf16 arithmetic" if pattern in without_bf16 else "a kiln trace") in reason, (pattern, reason)
    assert all(match["pattern"] in KILN_PATTERNS for match in report.matches)


def run_cli(kiln_bin, *args):
    return subprocess.run([str(kiln_bin), *map(str, args)], capture_output=True, text=True)


TORCH_BENCHMARKED = {"FP32 MatMul Pattern", "Extra CUDA Copy Pattern",
                     "Matrix Multiplication Dimension Not Aligned Pattern"}


def test_cli_tidy_text_json_and_torchtidy_json(kiln_bin, runs, tmp_path):
    _, path, matched = runs["mixed"]
    result = run_cli(kiln_bin, "tidy", path)
    assert result.returncode == 0, result.stderr
    assert "Findings (" in result.stdout and "kineto_json" in result.stdout
    result = run_cli(kiln_bin, "tidy", path, "--per-event")
    assert result.returncode == 0, result.stderr
    assert "Matched Events:" in result.stdout
    result = run_cli(kiln_bin, "tidy", path, "--json", "--torchtidy-json", tmp_path, "--name", "aten::select")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= {"counts", "matches", "not_evaluated"}
    for pattern, events in matched.items():
        assert report["counts"][pattern] == len(events), pattern
    assert report["counts"]["aten::select"] > 0
    assert sum(report["counts"].values()) == len(report["matches"])
    for match in report["matches"]:
        assert set(match) == {"pattern", "message", "file", "line", "event_id", "time_ms", "fix", "node", "reason",
                              "run_id"}
        # The fix each pattern declares: PyTorch's three benchmarked ones, nothing kiln measures else.
        expected = "torch_benchmark" if match["pattern"] in TORCH_BENCHMARKED else "none"
        assert match["fix"]["kind"] == expected and match["fix"]["what"], match
    for note in report["not_evaluated"]:
        assert set(note) == {"pattern", "reason"}
    assert "tidy_workloads.py" in json.loads((tmp_path / "torchtidy_report.json").read_text())


@pytest.mark.parametrize("args, message", [
    ([], "kiln tidy expects one TRACE file, got 0"),
    (["/nonexistent/trace.json"], "cannot open trace '/nonexistent/trace.json'"),
    (["{trace}", "--name", "(bad"], "'(bad' is not a regular expression"),
    (["{trace}", "--bogus"], "--bogus"),
    (["{trace}", "--torchtidy-json", "/nonexistent/dir"], "cannot write /nonexistent/dir/torchtidy_report.json"),
    (["{trace}", "--max-trace-bytes", "10"], "over the cap of 10 bytes"),
    (["{trace}", "{trace}"], "kiln tidy expects one TRACE file, got 2"),
])
def test_cli_tidy_errors_name_what_is_wrong(kiln_bin, runs, args, message):
    _, path, _ = runs["clean"]
    result = run_cli(kiln_bin, "tidy", *[str(path) if arg == "{trace}" else arg for arg in args])
    assert result.returncode != 0
    assert result.stderr.startswith("kiln: error:") and message in result.stderr, result.stderr

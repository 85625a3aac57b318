"""kiln.tidy's Pattern API. TorchTidy's patterns written as kiln user patterns
(examples/tidy/torchtidy_patterns.py) against kiln's built-in versions (kiln.tidy's classes of the
same names): on every run test_tidy.py profiles, read live and from its Kineto file, plus a legacy
export and a training loop with and without stack and shapes, each user pattern matches exactly the
events the built-in matches, in the same order, and finds what the workload is made for. Then user
patterns on kiln's traces (events, navigation, reporting, failures, fixes measured), the command
line's --patterns, --benchmark under the trace's own settings, --diff, and docs/tidy.md's example.
"""
import importlib.util
import json
import pathlib
import subprocess

import pytest

pytest.importorskip("torch")
import test_tidy  # noqa: E402 (after the skip): its fixtures and workloads
import torch_profiles  # noqa: E402

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "tidy" / "torchtidy_patterns.py"

PATTERN_CLASSES = [
    "ExtraCUDACopyPattern", "ForLoopIndexingPattern", "FP32MatMulPattern", "OptimizerSingleTensorPattern",
    "SynchronizedDataLoaderPattern", "GradNotSetToNonePattern", "Conv2dBiasFollowedByBatchNorm2dPattern",
    "MatMulDimInFP16Pattern",
]
# NamePattern's regular expressions, and the workloads each must match something in.
NAME_REGEXES = {
    "aten::mm": {"fp32_matmul", "unaligned_bf16_matmul", "mixed", "with_memory"},
    "aten::add": {"optimizer_single_tensor", "mixed", "with_memory"},
    "^aten::(fill|zero)_$": {"extra_copy", "mixed", "with_memory"},
}
# "workload/source": each of test_tidy's runs live and as its Kineto file, and a few more.
TRACES = [f"{name}/{source}" for name in test_tidy.WORKLOADS for source in ("live", "kineto")] + [
    "mixed/legacy", "training/live", "training/kineto", "training_bare/live"]

kiln = test_tidy.kiln  # fixtures: the kiln module, and each workload profiled once
runs = test_tidy.runs


@pytest.fixture(scope="module")
def user_patterns(kiln):
    """The example file, imported by path (after `kiln` put the kiln package on sys.path)."""
    spec = importlib.util.spec_from_file_location("torchtidy_patterns", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def traces(kiln, runs, tmp_path_factory):
    """TRACES' names -> the kiln Trace, each loaded once for every pattern."""
    directory = tmp_path_factory.mktemp("tidy_patterns")
    out = {}
    for name, (prof, path, _) in runs.items():
        out[f"{name}/live"] = kiln.profiler.load_trace(prof)
        out[f"{name}/kineto"] = kiln.profiler.load_trace(path)
    legacy = directory / "legacy.json"
    runs["mixed"][0].export_chrome_trace(str(legacy))  # no stack, no shapes: the skips
    out["mixed/legacy"] = kiln.profiler.load_trace(legacy)
    training = torch_profiles.training_run()  # memory events between the calls
    torch_profiles.write_kineto(training, directory / "training.json")
    out["training/live"] = kiln.profiler.load_trace(training)
    out["training/kineto"] = kiln.profiler.load_trace(directory / "training.json")
    out["training_bare/live"] = kiln.profiler.load_trace(
        torch_profiles.training_run(with_stack=False, record_shapes=False))
    return out


def expected_shown(trace_name):
    """The patterns (TorchTidy's names) the trace's workload is made to show."""
    name, source = trace_name.split("/")
    if name not in test_tidy.WORKLOADS or source not in ("live", "kineto"):
        return set()
    return test_tidy.expected_shown(name)


def assert_same_matches(ours, builtin):
    assert (ours.name, ours.description, ours.url) == (builtin.name, builtin.description, builtin.url)
    assert bool(ours.skip) == bool(builtin.skip), (ours.skip, builtin.skip)
    matched = [event.id for event in ours.matched_events()]
    assert matched == [event.id for event in builtin.matched_events()]
    # Again: a pattern's state (ForLoopIndexingPattern's visited selects) starts afresh each time.
    assert [event.id for event in ours.matched_events()] == matched
    return matched


def test_the_example_lists_every_pattern(user_patterns):
    assert [pattern.__name__ for pattern in user_patterns.PATTERNS] == PATTERN_CLASSES
    for pattern in user_patterns.PATTERNS + [user_patterns.NamePattern]:
        assert pattern.__doc__, pattern


@pytest.mark.parametrize("class_name", PATTERN_CLASSES)
@pytest.mark.parametrize("trace_name", TRACES)
def test_each_user_pattern_matches_what_the_builtin_matches(kiln, user_patterns, traces, trace_name,
                                                            class_name):
    trace = traces[trace_name]
    ours = getattr(user_patterns, class_name)(trace)
    matched = assert_same_matches(ours, getattr(kiln.tidy, class_name)(trace))
    if ours.name in expected_shown(trace_name):
        assert matched, f"{class_name} matched nothing in {trace_name}"


@pytest.mark.parametrize("regex", list(NAME_REGEXES))
@pytest.mark.parametrize("trace_name", TRACES)
def test_name_pattern_matches_what_the_builtin_matches(kiln, user_patterns, traces, trace_name, regex):
    trace = traces[trace_name]
    matched = assert_same_matches(user_patterns.NamePattern(trace, regex), kiln.tidy.NamePattern(trace, regex))
    name, source = trace_name.split("/")
    if source in ("live", "kineto") and name in NAME_REGEXES[regex]:
        assert matched, f"{regex!r} matched nothing in {trace_name}"


# The Pattern API on kiln's own traces, the command line's --patterns, --benchmark on a trace's own
# settings, --diff, and docs/tidy.md's example.

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tidy.md"


def kiln_trace(kiln_bin, model, path, *options):
    subprocess.run([str(kiln_bin), "profile", str(model), "--runs", "3", "--threads", "2", "--trace", str(path),
                    *options], check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def deterministic_trace(kiln_bin, demo_model, tmp_path_factory):
    """The demo model run in deterministic mode: oneDNN refuses its Convs, native runs them."""
    return kiln_trace(kiln_bin, demo_model, tmp_path_factory.mktemp("det") / "trace.json", "--deterministic")


def test_events_navigate_in_constant_time_as_the_children_lists_say(kiln, deterministic_trace):
    tree = kiln.tidy.event_tree(deterministic_trace)
    assert kiln.tidy.event_tree(deterministic_trace) is tree  # one load for every pattern over it

    class Everything(kiln.tidy.Pattern):
        def match(self, event):
            return True

    pattern = Everything(tree)
    events = pattern.matched_events()
    assert len(events) == len(tree) == len(tree.trace)
    for event in events:
        siblings = event.parent.children if event.parent is not None else pattern.tid_root[event.start_tid]
        at = siblings.index(event)
        assert pattern.siblings_of(event) == (siblings[:at], siblings[at + 1:])
        assert pattern.next_of(event) == (siblings[at + 1] if at + 1 < len(siblings) else None)
        assert pattern.prev_of(event) == (siblings[at - 1] if at > 0 else None)
        top = event
        while top.parent is not None:
            top = top.parent
        assert pattern.root_of(event) == top
        # Up to the first run (itself if it is one), else to the root.
        run = event
        while run.kind != "run" and run.parent is not None:
            run = run.parent
        assert pattern.go_up_until(event, lambda e: e.kind == "run") == run
    steps = [event for event in events if event.kind == "step"]
    conv = next(event for event in steps if event.name == "Conv")
    assert conv.tag == "step" and conv.backend == "native" and conv.node and conv.kernel.startswith("native:")
    assert conv.input_shapes[0] == (1, 3, 64, 64) and conv.input_dtypes[0] == "float32"
    assert conv.input_layouts and conv.threads >= 1 and conv.duration_time_ns == conv.end_time_ns - conv.start_time_ns
    assert any(refusal["backend"] == "onednn" and refusal["kind"] == "deterministic" and refusal["text"]
               for refusal in conv.refusals)
    assert conv.parent.kind == "run" and conv in conv.parent.children
    assert hash(conv) == hash(tree.event(conv.index)) and conv == tree.event(conv.index)
    assert not tree.from_pytorch and tree.source == "kiln_json"


def native_convs(kiln, trace, longer_than_ns=0):
    return sum(1 for event in kiln.tidy.event_tree(trace).depth_first()
               if event.kind == "step" and event.name == "Conv" and event.backend == "native"
               and event.duration_time_ns > longer_than_ns)


def user_patterns_over(kiln):
    """A pattern with a reason and a fix, one that raises, one that skips."""

    class NativeConv(kiln.tidy.Pattern):
        name = "Native Conv"
        description = "A Conv on native kernels"

        def match(self, event):
            return event.kind == "step" and event.name == "Conv" and event.backend == "native"

        def reason(self, event):
            return event.kernel

        def fix(self, event):
            return kiln.tidy.Fix("settings", settings={"deterministic": "0"}, what="deterministic off")

    class Raises(kiln.tidy.Pattern):
        name = "Raises"

        def match(self, event):
            return 1 / 0

    class Skips(kiln.tidy.Pattern):
        name = "Skips"

        @property
        def skip(self):
            return "no GPU here"

        def match(self, event):
            raise AssertionError("skipped patterns are not run")

    return [NativeConv, Raises, Skips]


def test_user_patterns_are_reported_and_measured_as_builtins_are(kiln, deterministic_trace, demo_model):
    report = kiln.tidy.report(deterministic_trace, patterns=user_patterns_over(kiln), benchmark=True, runs=3,
                              model=str(demo_model))
    # The strided Convs (Winograd refuses them) at least, in each of the 3 runs.
    assert report.counts["Native Conv"] == native_convs(kiln, deterministic_trace) >= 2 * 3
    groups = [group for group in report.groups if group["pattern"] == "Native Conv"]
    assert {group["runs"] for group in groups} == {3} and all(group["reason"].startswith("native:") for group in groups)
    estimate = next(e for e in report.estimates if e["pattern"] == "Native Conv")
    assert estimate["estimated_saving_ms"] is not None and "deterministic off (deterministic=0)" in estimate["basis"]
    failed = {note["pattern"]: note["traceback"] for note in report.failed}
    assert list(failed) == ["Raises"] and "ZeroDivisionError" in failed["Raises"]
    assert {"pattern": "Skips", "reason": "no GPU here"} in report.not_evaluated
    assert "failed: Raises raised:" in report.text()
    with pytest.raises(TypeError, match="a list of Pattern classes"):
        kiln.tidy.report(deterministic_trace, patterns=user_patterns_over(kiln)[0])
    with pytest.raises(ValueError, match="Fix: kind must be one of none, settings"):
        kiln.tidy.Fix("faster")


def test_cli_patterns_appear_in_every_output(kiln, kiln_bin, deterministic_trace, tmp_path):
    patterns = tmp_path / "mine.py"
    patterns.write_text(
        "from kiln.tidy import Pattern\n\n"
        "class NativeConv(Pattern):\n"
        "    name = 'Native Conv'\n"
        "    description = 'A Conv on native kernels'\n\n"
        "    def match(self, event):\n"
        "        return event.kind == 'step' and event.name == 'Conv' and event.backend == 'native'\n\n"
        "class Raises(Pattern):\n"
        "    name = 'Raises'\n\n"
        "    def match(self, event):\n"
        "        raise RuntimeError('a bug in the pattern')\n")
    html = tmp_path / "report.html"
    result = test_tidy.run_cli(kiln_bin, "tidy", deterministic_trace, "--patterns", patterns, "--json", "--html", html)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    native = native_convs(kiln, deterministic_trace)
    assert report["counts"]["Native Conv"] == native
    assert [f["pattern"] for f in report["failed"]] == ["Raises"]
    assert "RuntimeError: a bug in the pattern" in report["failed"][0]["traceback"]
    page = html.read_text()
    assert "Native Conv" in page and "a bug in the pattern" in page
    text = test_tidy.run_cli(kiln_bin, "tidy", deterministic_trace, "--patterns", patterns)
    assert f"Native Conv: {native} matches at {native // 3} places" in text.stdout
    assert "failed: Raises raised:" in text.stdout
    missing = test_tidy.run_cli(kiln_bin, "tidy", deterministic_trace, "--patterns", tmp_path / "none.py")
    assert missing.returncode != 0 and "none.py is not a file" in missing.stderr
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    result = test_tidy.run_cli(kiln_bin, "tidy", deterministic_trace, "--patterns", empty)
    assert result.returncode != 0 and "defines no kiln.tidy.Pattern subclass" in result.stderr


def test_cli_torchtidy_patterns_as_user_patterns_match_the_builtins(kiln_bin, runs, tmp_path):
    _, path, _ = runs["mixed"]
    result = test_tidy.run_cli(kiln_bin, "tidy", path, "--json", "--patterns", EXAMPLE, "--torchtidy-json", tmp_path)
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)["counts"]
    for name in test_tidy.expected_shown("mixed"):
        assert counts[f"{name} (user)"] == counts[name] > 0, name
    # TorchTidy reports each message once: the user patterns' (the built-ins' own) are not repeated.
    # A user pattern with its own message is there, at its events' lines.
    mine = tmp_path / "mine.py"
    mine.write_text("from kiln.tidy import Pattern\n\n"
                    "class EveryProduct(Pattern):\n"
                    "    name = 'Every Product'\n"
                    "    description = 'An aten::mm'\n\n"
                    "    def match(self, event):\n"
                    "        return event.name == 'aten::mm'\n")
    result = test_tidy.run_cli(kiln_bin, "tidy", path, "--patterns", mine, "--torchtidy-json", tmp_path)
    assert result.returncode == 0, result.stderr
    written = json.loads((tmp_path / "torchtidy_report.json").read_text())
    entries = [entry for entries in written.values() for entry in entries if entry["name"] == "Every Product"]
    assert entries and all(entry["message"] == "An aten::mm" and entry["line_number"] > 0 for entry in entries)


def test_the_docs_example_runs(kiln, deterministic_trace, tmp_path, monkeypatch, capsys):
    text = DOCS.read_text()
    start = text.index("```python\n", text.index("## Write your own pattern")) + len("```python\n")
    block = text[start:text.index("```", start)]
    assert len(block.strip().splitlines()) <= 20, "the example is meant to stay short"
    (tmp_path / "trace.json").write_bytes(pathlib.Path(deterministic_trace).read_bytes())
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/tidy.md", "exec"), {})
    assert int(capsys.readouterr().out.strip()) == native_convs(kiln, deterministic_trace, 10_000)


def test_benchmark_reads_the_settings_the_trace_records(kiln_bin, deterministic_trace):
    """Recorded with --deterministic; the options not repeated: the fallback fix is estimated."""
    result = test_tidy.run_cli(kiln_bin, "tidy", deterministic_trace, "--benchmark", "--runs", "3", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    estimate = next(e for e in report["estimates"] if e["pattern"] == "NativeFallbackPattern")
    assert estimate["estimated_saving_ms"] is not None, estimate["basis"]
    assert "deterministic=0" in estimate["basis"]
    assert report["total_estimated_saving_ms"] is not None


def test_diff_of_kiln_traces_names_the_switched_steps_largest_first(kiln, kiln_bin, demo_model, tmp_path):
    before = kiln_trace(kiln_bin, demo_model, tmp_path / "before.json")
    after = kiln_trace(kiln_bin, demo_model, tmp_path / "after.json", "--disable", "onednn")
    result = test_tidy.run_cli(kiln_bin, "tidy", "--diff", before, after, "--json")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    deltas = [abs(row["delta_ms"]) for row in diff["rows"]]
    assert deltas == sorted(deltas, reverse=True)
    switched = [row for row in diff["rows"] if row["change"] == "backend switched"]
    assert switched and all(row["before"]["backend"] == "onednn" and row["after"]["backend"] != "onednn"
                            for row in switched)
    assert any(change.startswith("settings: onednn,") for change in diff["plan_changes"])
    assert diff == kiln.tidy.diff(before, after)
    text = test_tidy.run_cli(kiln_bin, "tidy", "--diff", before, after)
    assert "[backend switched: onednn -> " in text.stdout
    bad = test_tidy.run_cli(kiln_bin, "tidy", "--diff", before)
    assert bad.returncode != 0 and "expects two traces" in bad.stderr


def test_diff_of_pytorch_traces_shows_what_torchtidys_fix_saved(kiln, tmp_path):
    """The For Loop Indexing workload against its fix (one vectorized assignment): the per-row calls
    disappear, their time shown as saved."""
    import torch
    import tidy_workloads

    def vectorized():
        rows = torch.empty(20, 8)
        rows[:] = torch.arange(20.0).unsqueeze(1)

    before = tidy_workloads.profiled(tidy_workloads.for_loop_indexing)
    after = tidy_workloads.profiled(vectorized)
    torch_profiles.write_kineto(before, tmp_path / "before.json")
    torch_profiles.write_kineto(after, tmp_path / "after.json")
    diff = kiln.tidy.diff(tmp_path / "before.json", tmp_path / "after.json")
    assert diff["before"]["source"] == diff["after"]["source"] == "kineto_json"
    gone = [row for row in diff["rows"] if row["change"] == "disappeared" or (
        row["before"] and row["after"] and row["after"]["calls"] < row["before"]["calls"])]
    assert any(row["op"] == "aten::select" for row in gone)
    # What the gone calls took is the saving the diff shows (a structural check, not a timing one).
    disappeared = [row for row in diff["rows"] if row["change"] == "disappeared"]
    assert disappeared and all(row["delta_ms"] == -row["before"]["ms"] for row in disappeared)
    assert sum(row["delta_ms"] for row in disappeared) < 0

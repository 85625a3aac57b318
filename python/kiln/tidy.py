"""kiln.tidy: anti-patterns in a profile, with the line of your code each comes from.

    import kiln
    with torch.profiler.profile(with_stack=True, record_shapes=True) as prof:
        train()
    report = kiln.tidy.report(prof)           # or a trace file: kiln.tidy.report("trace.json")
    print(report)                             # findings grouped per pattern, cause and place
    report.counts                             # {pattern name: matches}
    report.groups                             # [{"pattern", "reason", "node", "matches", "runs", ...}]
    report.matches                            # every match: {"pattern", "message", "file", "line", ...}
    report.not_evaluated, report.caveats      # what the trace could not tell; where a rule is wrong
    report.time                               # where the time went: per thread, critical path, overlap
    report.write_torchtidy_json("out")        # out/torchtidy_report.json, as TorchTidy writes it

    with kiln.profiler.profile() as prof:     # kiln's own runs: kiln's runtime patterns
        for x in inputs: session.run({"input": x})
    report = kiln.tidy.report(prof, benchmark=True, model="model.onnx")
    report.estimates                          # [{"pattern", "matched_ms", "estimated_saving_ms", "basis"}]
    kiln.tidy.report(prof, html="report.html")  # also as one self-contained HTML page

    class SlowConv(kiln.tidy.Pattern):        # your own pattern, TorchTidy's interface
        name = "Slow Conv"
        description = "A convolution over 1 ms"
        def match(self, event):
            return event.name == "Conv" and event.duration_time_ns > 1_000_000
    kiln.tidy.report(prof, patterns=[SlowConv])  # or `kiln tidy TRACE --patterns FILE.py`
    kiln.tidy.diff("before.json", "after.json")  # what changed between two traces

The patterns are TorchTidy's (torch.profiler._pattern_matcher in PyTorch 1.13), rule for rule and
count for count, kiln's corrections of the rules that are wrong for a trace, under their own names,
kiln's runtime patterns over kiln's own traces, whose fixes `benchmark=True` measures on this
machine, and yours. The built-ins are classes here too (kiln.tidy.ExtraCUDACopyPattern(prof)
.matched_events()). docs/tidy.md has the list and "Write your own pattern".
"""
import importlib.util as _importlib_util
import operator as _operator
import os as _os
import re as _re
import sys as _sys
import traceback as _traceback
import weakref as _weakref

from kiln import _kiln
from kiln import profiler as _profiler

__all__ = ["report", "options", "diff", "Report", "Pattern", "Fix", "Event", "EventTree", "event_tree",
           "input_shapes", "input_dtypes", "source_code_location", "report_all_anti_patterns"]

Event = _kiln.tidy.Event
EventTree = _kiln.tidy.EventTree
_OPTIONS = {row["name"]: row for row in _kiln.tidy.option_rows()}

Report = _kiln.tidy.Report


def options():
    """tidy's options, one table for kiln tidy's command line and this module: [{"name", "cli", "type",
    "default", "min", "max", "measures", "help"}] ("measures": it applies with benchmark=True only)."""
    return [dict(row) for row in _OPTIONS.values()]


def _integer(name, value):
    """An integer option's value checked against its row (None: the row's default)."""
    row = _OPTIONS[name]
    if value is None:
        return row["default"]
    try:
        if isinstance(value, bool):
            raise TypeError
        value = _operator.index(value)  # int, numpy integers
    except TypeError:
        raise TypeError(f"report: {name} must be an integer, got {value!r}") from None
    if not row["min"] <= value <= row["max"]:
        raise ValueError(f"report: {name} must be {row['min']}..{row['max']}, got {value}")
    return value


def _trace_of(prof_or_path, max_bytes=_profiler.DEFAULT_MAX_TRACE_BYTES):
    """The Trace and a name for it, from what report() accepts."""
    if isinstance(prof_or_path, EventTree):
        return prof_or_path.trace, "trace"
    if isinstance(prof_or_path, _kiln.profiler.Trace):
        return prof_or_path, "trace"
    if isinstance(prof_or_path, _profiler.profile):
        return prof_or_path.trace, "kiln.profiler.profile"
    if isinstance(prof_or_path, (str, bytes, _os.PathLike)):
        return _profiler.load_trace(prof_or_path, max_bytes=max_bytes), _os.fsdecode(prof_or_path)
    trace = _profiler.load_trace(prof_or_path)
    return trace, f"{type(prof_or_path).__module__}.{type(prof_or_path).__name__}"


# Each tree's traversals as Event lists, made once and shared by the patterns over it (dropped with
# the tree: the events hold the C++ tree, not its Python object, so no cycle keeps either alive).
_TRAVERSALS = _weakref.WeakKeyDictionary()


def _traversal(tree, order):
    cached = _TRAVERSALS.setdefault(tree, {})
    if order not in cached:
        cached[order] = tuple(getattr(tree, order)())
    return cached[order]


_FILE_TREES = []  # the last few ((path, mtime, size), EventTree): patterns over one file load it once
_FILE_TREES_KEPT = 4
_OBJECT_TREES = _weakref.WeakKeyDictionary()  # a PyTorch profile: its EventTree, while the profile lives


def event_tree(prof_or_path, *, max_bytes=_profiler.DEFAULT_MAX_TRACE_BYTES):
    """The EventTree patterns walk, for anything report() accepts; a file (the last few) or a PyTorch
    profile (while it lives) is read once for every pattern over it."""
    if isinstance(prof_or_path, EventTree):
        return prof_or_path
    if isinstance(prof_or_path, (str, bytes, _os.PathLike)):
        path = _os.fsdecode(prof_or_path)
        try:
            stat = _os.stat(path)
        except OSError:
            return EventTree(_trace_of(prof_or_path, max_bytes)[0])  # load_trace names the problem
        key = (_os.path.realpath(path), stat.st_mtime_ns, stat.st_size)
        for cached_key, tree in _FILE_TREES:
            if cached_key == key:
                return tree
        tree = EventTree(_trace_of(prof_or_path, max_bytes)[0])
        _FILE_TREES.insert(0, (key, tree))
        del _FILE_TREES[_FILE_TREES_KEPT:]
        return tree
    if isinstance(prof_or_path, (_kiln.profiler.Trace, _profiler.profile)):
        # Already a Trace (a kiln profile's is its current recording): the tree is quick to build,
        # and a cache keyed by the Trace would keep it alive (the tree holds it).
        return EventTree(_trace_of(prof_or_path, max_bytes)[0])
    try:  # PyTorch's profile: reading its tree is the slow part, done once per profile
        return _OBJECT_TREES[prof_or_path]
    except (KeyError, TypeError):  # TypeError: an object without weak references is not kept
        pass
    tree = EventTree(_trace_of(prof_or_path, max_bytes)[0])
    try:
        _OBJECT_TREES[prof_or_path] = tree
    except TypeError:
        pass
    return tree


def input_shapes(event):
    """TorchTidy's input_shapes(event): the event's input shapes, a tuple of tuples."""
    return event.input_shapes


def input_dtypes(event):
    """TorchTidy's input_dtypes(event): the event's input element types ("float", "" for none)."""
    return event.input_dtypes


def source_code_location(event):
    """TorchTidy's source_code_location(event): "file:line" of the first Python frame outside
    PyTorch above the event, or "No source code location found"."""
    return event.location


_FIX_KINDS = tuple(_kiln.tidy.fix_kinds())


class Fix:
    """What fixing a match changes, so benchmark=True can measure it (docs/tidy.md, "Write your own
    pattern"):
    Fix("settings", settings={"deterministic": "0"}): the model planned again with settings changed;
    Fix("step_removed", steps=[event, ...]): the cheapest of those steps no longer runs;
    Fix("planning_ahead"), Fix("thread_budget"); Fix("torch_benchmark", torch_fix=NAME): PyTorch
    times the call as recorded and fixed (NAME: a fix tidy_runner/torch_benchmark.py knows);
    Fix("none", what=WHY): not measurable. `what` says the fix in words, for the report."""

    def __init__(self, kind, *, settings=None, steps=(), torch_fix="", what=""):
        if kind not in _FIX_KINDS:
            raise ValueError(f"Fix: kind must be one of {', '.join(_FIX_KINDS)}, got {kind!r}")
        self.kind = kind
        self.settings = {str(name): str(value) for name, value in (settings or {}).items()}
        self.steps = list(steps)
        for step in self.steps:
            if not isinstance(step, Event):
                raise TypeError(f"Fix: steps must be kiln.tidy.Event objects, got {step!r}")
        self.torch_fix = str(torch_fix)
        self.what = str(what)

    def __repr__(self):
        return f"Fix({self.kind!r}, what={self.what!r})"

    def _as_dict(self, tree):
        if self.kind not in _FIX_KINDS:
            raise ValueError(f"Fix: kind must be one of {', '.join(_FIX_KINDS)}, got {self.kind!r}")
        for step in self.steps:
            if not isinstance(step, Event) or step != tree.event(step.index):
                raise ValueError(f"Fix: step {step!r} is not an event of the trace reported on")
        return {"kind": self.kind, "what": self.what, "settings": self.settings,
                "steps": [step.index for step in self.steps], "torch_fix": self.torch_fix}


class Pattern:
    """An anti-pattern, as TorchTidy writes one (torch.profiler._pattern_matcher.Pattern): set `name`,
    `description` and `url` (as class attributes, or in __init__ after super().__init__), implement
    match(event); optionally skip (a property: True or a reason), report(event), summary(events),
    benchmark(events). kiln adds detail(event) and reason(event) (the report groups matches by reason
    and place) and fix(event) (a Fix: what benchmark=True measures).

    `prof` is anything kiln.tidy.report takes: a trace file, a torch.profiler.profile, a
    kiln.profiler.profile, a Trace or an EventTree. Events (kiln.tidy.Event) have TorchTidy's fields
    (name, children, parent, start_time_ns, end_time_ns, duration_time_ns, start_tid, tag,
    input_shapes, input_dtypes, file, line) and kiln's (kind, category, node, backend, kernel,
    refusals, input_layouts, output_layouts, threads, attributes, ...); next/previous/root are O(1)."""

    name = "Please specify a name for pattern"
    description = "Please specify a description for pattern"
    url = ""

    def __init__(self, prof, should_benchmark=False):
        self.prof = prof
        self.should_benchmark = should_benchmark
        self.context = event_tree(prof)  # the trace's facts: from_pytorch, with_stack, cuda_arches ...
        self._roots = None
        self._tid_root = None

    @property
    def event_tree(self):
        """The roots of every thread, in start order (PyTorch's experimental_event_tree())."""
        if self._roots is None:
            self._roots = self.context.roots()
        return self._roots

    @property
    def tid_root(self):
        """{start_tid: that thread's roots}."""
        if self._tid_root is None:
            self._tid_root = {}
            for event in self.event_tree:
                self._tid_root.setdefault(event.start_tid, []).append(event)
        return self._tid_root

    @property
    def skip(self):
        return False

    def report(self, event):
        return f"{self.description}\n[Source Code Location] {source_code_location(event)}"

    def eventTreeTraversal(self):  # noqa: N802 (TorchTidy's name)
        """Every event, depth-first from each root in start order (TorchTidy's traverse_dfs)."""
        yield from _traversal(self.context, "depth_first")

    def breadth_first(self):
        """Every event level by level (TorchTidy's traverse_bfs)."""
        yield from _traversal(self.context, "breadth_first")

    def summary(self, events):
        default = f"{self.name}: {len(events)} events matched."
        if self.should_benchmark and hasattr(self, "benchmark"):
            return self.benchmark_summary(events)
        return default

    def benchmark_summary(self, events):
        """TorchTidy's: benchmark(events) gives {input shapes: time after / time before}."""
        factors = self.benchmark(events)
        before = sum(event.duration_time_ns for event in events)
        after = sum(factors[input_shapes(event)] * event.duration_time_ns for event in events)
        saved_ms = (before - after) / 1e6
        speedup = f"{before / after:.2f}X" if after > 0 else "all of it"
        return f"{self.name}: {len(events)} events matched. Total Estimated Speedup: {saved_ms:.3f} ms ({speedup})"

    def match(self, event):
        raise NotImplementedError(f"{type(self).__name__}.match(event) is not written")

    def matched_events(self):
        if self.skip:
            return []
        match = self.match
        return [event for event in self.eventTreeTraversal() if match(event)]

    def root_of(self, event):
        return event.root

    def siblings_of(self, event):
        """(the siblings before it, those after it): its parent's children, or its thread's roots."""
        return event.siblings()

    def next_of(self, event):
        return event.next

    def prev_of(self, event):
        return event.previous

    def go_up_until(self, event, predicate):
        if not event:
            return None
        while event.parent is not None and not predicate(event):
            event = event.parent
        return event

    def detail(self, event):
        return ""

    def reason(self, event):
        return ""

    def fix(self, event):
        return None


# The built-ins as Pattern classes: TorchTidy's under TorchTidy's class names, the others named after
# their report names ("FP32 MatMul On TF32 GPU Pattern": FP32MatMulOnTF32GPUPattern).
_TORCHTIDY_CLASSES = {
    "Extra CUDA Copy Pattern": "ExtraCUDACopyPattern",
    "For Loop Indexing Pattern": "ForLoopIndexingPattern",
    "FP32 MatMul Pattern": "FP32MatMulPattern",
    "Optimizer Single Tensor Pattern": "OptimizerSingleTensorPattern",
    "Synchronized DataLoader Pattern": "SynchronizedDataLoaderPattern",
    "Gradient Set To Zero Instead of None Pattern": "GradNotSetToNonePattern",
    "Enabling Bias in Conv2d Followed By BatchNorm Pattern": "Conv2dBiasFollowedByBatchNorm2dPattern",
    "Matrix Multiplication Dimension Not Aligned Pattern": "MatMulDimInFP16Pattern",
}


class _Builtin(Pattern):
    """A built-in C++ pattern behind Pattern's interface: its matches computed once, in C++."""

    _regex = ""

    def __init__(self, prof, should_benchmark=False, *, tiny_step_us=None):
        super().__init__(prof, should_benchmark)
        self._tiny_step_us = _integer("tiny_step_us", tiny_step_us)
        self._skip = None
        self._matched = None
        self._matched_set = None

    def _run(self):
        if self._matched is None:
            self._skip, self._matched = self.context.builtin_matches(self.name, self._regex, self._tiny_step_us)
        return self._skip, self._matched

    @property
    def skip(self):
        """Why the built-in matches nothing here (a str), or False."""
        return self._run()[0] or False

    def matched_events(self):
        return list(self._run()[1])

    def match(self, event):
        if self._matched_set is None:
            self._matched_set = set(self.matched_events())
        return event in self._matched_set


class NamePattern(_Builtin):
    """TorchTidy's NamePattern(prof, name): events whose name contains a match of the regex `name`."""

    def __init__(self, prof, name, should_benchmark=False):
        self._regex = name
        self.name = name
        self.description = _kiln.tidy.name_pattern_description(name)
        super().__init__(prof, should_benchmark)


def _class_name(pattern_name):
    if pattern_name in _TORCHTIDY_CLASSES:
        return _TORCHTIDY_CLASSES[pattern_name]
    return "".join(word[:1].upper() + word[1:] for word in _re.split(r"[^A-Za-z0-9]+", pattern_name))


BUILTIN_PATTERNS = [NamePattern]
for _row in _kiln.tidy.builtin_patterns():
    _cls = type(_class_name(_row["name"]), (_Builtin,), {
        "name": _row["name"], "description": _row["description"], "url": _row["url"],
        "__doc__": f"The built-in {_row['name']} ({'kiln traces' if _row['reads'] == 'kiln' else 'PyTorch traces'}).",
        "__module__": __name__,
    })
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)
    BUILTIN_PATTERNS.append(_cls)
__all__ += ["NamePattern", "BUILTIN_PATTERNS"]
del _row, _cls


def _failed(name, failure):
    return {"name": name, "description": "", "url": "", "skip": None, "failure": failure, "matched": [],
            "messages": [], "details": [], "reasons": [], "fixes": [], "summary": ""}


def _overrides(instance, method):
    return getattr(type(instance), method) is not getattr(Pattern, method)


def _run_user_pattern(pattern, tree, should_benchmark):
    """One user pattern (a Pattern subclass, a callable making one from (prof, should_benchmark), or
    an instance over `tree`) over `tree`, as the report takes it; what it raised, as its failure."""
    label = getattr(pattern, "__name__", type(pattern).__name__)
    try:
        instance = pattern if isinstance(pattern, Pattern) else pattern(tree, should_benchmark)
        if not isinstance(instance, Pattern):
            raise TypeError(f"{label} made {type(instance).__name__}, not a kiln.tidy.Pattern")
        if instance.context is not tree:
            raise ValueError(f"{label} was made over another trace than the one reported on: pass the class")
        result = _failed(str(instance.name), "")
        result["description"] = str(instance.description)
        result["url"] = str(instance.url or "")
        skip = instance.skip
        if skip:
            result["skip"] = skip if isinstance(skip, str) else "its skip says so"
            return result
        events = list(instance.matched_events())
        for event in events:
            if not isinstance(event, Event) or event != tree.event(event.index):
                raise TypeError(f"{label}.matched_events() returned {event!r}, not an event of this trace")
        result["matched"] = [event.index for event in events]
        result["messages"] = [str(instance.report(event)) for event in events]
        if _overrides(instance, "detail"):
            result["details"] = [str(instance.detail(event)) for event in events]
        if _overrides(instance, "reason"):
            result["reasons"] = [str(instance.reason(event)) for event in events]
        if _overrides(instance, "fix"):
            fixes = []
            for event in events:
                fix = instance.fix(event)
                if fix is not None and not isinstance(fix, Fix):
                    raise TypeError(f"{label}.fix(event) returned {fix!r}: a kiln.tidy.Fix or None")
                fixes.append(None if fix is None else fix._as_dict(tree))
            result["fixes"] = fixes
        result["summary"] = str(instance.summary(events))
        return result
    except Exception:  # noqa: BLE001: a user's pattern may raise anything; the others still run
        return _failed(label, _traceback.format_exc())


def _unique_names(results):
    """User patterns named like a built-in (or each other) get their own names in the report."""
    taken = {row["name"] for row in _kiln.tidy.builtin_patterns()}
    for result in results:
        name = result["name"]
        if name in taken:
            number = 1
            while f"{name} (user{'' if number == 1 else f' {number}'})" in taken:
                number += 1
            result["name"] = f"{name} (user{'' if number == 1 else f' {number}'})"
        taken.add(result["name"])
    return results


def _patterns_in(path):
    """The patterns a file defines: its PATTERNS list, else every Pattern subclass it defines whose
    name does not start with "_" (a base class of its own patterns: name it _Base)."""
    name = "kiln_user_patterns_" + _re.sub(r"\W", "_", _os.path.abspath(path))
    spec = _importlib_util.spec_from_file_location(name, path)
    module = _importlib_util.module_from_spec(spec)
    _sys.modules[name] = module  # as an import would: dataclasses and pickling look it up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del _sys.modules[name]
        raise
    if hasattr(module, "PATTERNS"):
        return list(module.PATTERNS)
    return [value for key, value in vars(module).items()
            if isinstance(value, type) and issubclass(value, Pattern) and value.__module__ == name
            and not key.startswith("_")]


def _run_pattern_files(files, trace):
    """`kiln tidy --patterns FILE.py`'s runner: every pattern in each file over `trace`. A file that
    does not load is reported as failed, as a pattern that raises is; the others still run."""
    tree = EventTree(trace)
    results = []
    for path in files:
        if not _os.path.isfile(path):
            raise ValueError(f"kiln tidy --patterns: {path} is not a file (expected a Python file defining "
                             "kiln.tidy.Pattern classes)")
        try:
            patterns = _patterns_in(path)
        except Exception:  # noqa: BLE001
            results.append(_failed(path, _traceback.format_exc()))
            continue
        if not patterns:
            raise ValueError(f"kiln tidy --patterns: {path} defines no kiln.tidy.Pattern subclass (and no PATTERNS)")
        results.extend(_run_user_pattern(pattern, tree, False) for pattern in patterns)
    return _unique_names(results)


def report(prof_or_path, *, names=(), corrected=True, max_bytes=_profiler.DEFAULT_MAX_TRACE_BYTES,
           benchmark=False, model=None, runs=None, html=None, tiny_step_us=None, patterns=()):
    """Analyses a profile: a trace file (str or os.PathLike; see kiln.profiler.load_trace), a stopped
    torch.profiler.profile, a kiln.profiler.profile or a kiln Trace. `names`: regular expressions,
    each reported as TorchTidy's NamePattern; corrected=False leaves kiln's corrected patterns out.
    `patterns`: your kiln.tidy.Pattern subclasses, run after the built-ins and reported as they are
    (one that raises is listed in report.failed with its traceback). benchmark=True measures what
    fixing the matches saves, on this machine, with `model` (the ONNX file a kiln trace ran; default:
    the one the trace names) planned again under the settings the trace records and under each fix,
    `runs` timed runs per measurement. tiny_step_us: TinyOpMultithreadedPattern counts steps
    shorter than this as tiny. html: a path to also write the report to as one self-contained HTML
    page (grouped findings, where the time went, estimates). options() lists the options with their
    defaults and ranges (None takes the default)."""
    if isinstance(names, (str, bytes)) or not all(isinstance(name, str) for name in names):
        raise TypeError(f"report: names must be a list of regular expressions (str), got {names!r}")
    if isinstance(patterns, type) or isinstance(patterns, Pattern):
        raise TypeError("report: patterns must be a list of Pattern classes, got one pattern: pass [it]")
    for name, value in (("model", model), ("runs", runs)):
        if not benchmark and value is not None:
            raise ValueError(f"report: {name}= applies to benchmark=True (it says how the fixes are measured)")
    trace, name = _trace_of(prof_or_path, max_bytes)
    tiny_step_us = _integer("tiny_step_us", tiny_step_us)
    runs = _integer("runs", runs)
    results = []
    if patterns:
        tree = prof_or_path if isinstance(prof_or_path, EventTree) else EventTree(trace)
        results = _unique_names([_run_user_pattern(pattern, tree, benchmark) for pattern in patterns])
    analysed = _kiln.tidy.analyse(trace, name, list(names), bool(corrected), tiny_step_us, results)
    if benchmark:
        if model is None:
            model = trace.facts.get("model", "")
        _kiln.tidy.estimate_savings(analysed, trace, _os.fspath(model), runs)
    if html is not None:
        _kiln.tidy.write_html(analysed, trace, _os.fspath(html))
    return analysed


def report_all_anti_patterns(prof, should_benchmark=False, print_enable=True, json_report_dir=None, *,
                             patterns=()):
    """TorchTidy's report_all_anti_patterns(prof, ...): every built-in pattern (and `patterns`) over
    `prof`; prints the report (TorchTidy's per-event form), writes json_report_dir/torchtidy_report.json;
    returns the report."""
    analysed = report(prof, benchmark=should_benchmark, patterns=patterns)
    if json_report_dir is not None:
        analysed.write_torchtidy_json(json_report_dir)
    if print_enable:
        print(analysed.text(per_event=True))
    return analysed


def diff(before, after, *, max_bytes=_profiler.DEFAULT_MAX_TRACE_BYTES, text=False):
    """What changed between two traces (anything report() takes; both kiln's or both PyTorch's): per
    op, kernel, backend and shape the self time and calls before and after, what appeared and
    disappeared, kernel and backend switches, plan changes; largest change first. A dict as
    `kiln tidy --diff --json` prints it, or with text=True its text."""
    a, a_name = _trace_of(before, max_bytes)
    b, b_name = _trace_of(after, max_bytes)
    return (_kiln.tidy.diff_text if text else _kiln.tidy.diff)(a, a_name, b, b_name)

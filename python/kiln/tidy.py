"""kiln.tidy: anti-patterns in a profile, with the line of your code each comes from.

    import kiln
    with torch.profiler.profile(with_stack=True, record_shapes=True) as prof:
        train()
    report = kiln.tidy.report(prof)           # or a trace file: kiln.tidy.report("trace.json")
    print(report)                             # TorchTidy's report, plus what kiln adds
    report.counts                             # {pattern name: matches}
    report.matches                            # [{"pattern", "message", "file", "line", "event_id"}]
    report.not_evaluated, report.caveats      # what the trace could not tell; where a rule is wrong
    report.write_torchtidy_json("out")        # out/torchtidy_report.json, as TorchTidy writes it

    with kiln.profiler.profile() as prof:     # kiln's own runs: kiln's runtime patterns
        for x in inputs: session.run({"input": x})
    report = kiln.tidy.report(prof, benchmark=True, model="model.onnx")
    report.estimates                          # [{"pattern", "matched_ms", "estimated_saving_ms", "basis"}]
    kiln.tidy.report(prof, html="report.html")  # also as one self-contained HTML page

The patterns are TorchTidy's (torch.profiler._pattern_matcher in PyTorch 1.13), rule for rule and
count for count, kiln's corrections of the rules that are wrong for a trace, under their own names,
and kiln's runtime patterns over kiln's own traces, whose fixes `benchmark=True` measures on this
machine. docs/tidy.md has the list.
"""
import operator as _operator
import os as _os

from kiln import _kiln
from kiln import profiler as _profiler

__all__ = ["report", "options", "Report"]

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


def report(prof_or_path, *, names=(), corrected=True, max_bytes=_profiler.DEFAULT_MAX_TRACE_BYTES,
           benchmark=False, model=None, runs=None, html=None, tiny_step_us=None):
    """Analyses a profile: a trace file (str or os.PathLike; see kiln.profiler.load_trace), a stopped
    torch.profiler.profile, a kiln.profiler.profile or a kiln Trace. `names`: regular expressions,
    each reported as TorchTidy's NamePattern; corrected=False leaves kiln's corrected patterns out.
    benchmark=True measures what fixing each of kiln's runtime patterns saves, on this machine, with
    `model` (the ONNX file a kiln trace ran; default: the one the trace names) planned again under
    the settings in force now (they must plan as the trace's runs did) and under each fix, `runs`
    timed runs per measurement. tiny_step_us: TinyOpMultithreadedPattern counts steps shorter than
    this as tiny. html: a path to also write the report to as one self-contained HTML
    page (time by op and backend, findings, estimates). options() lists the options with their
    defaults and ranges (None takes the default)."""
    if isinstance(names, (str, bytes)) or not all(isinstance(name, str) for name in names):
        raise TypeError(f"report: names must be a list of regular expressions (str), got {names!r}")
    for name, value in (("model", model), ("runs", runs)):
        if not benchmark and value is not None:
            raise ValueError(f"report: {name}= applies to benchmark=True (it says how the fixes are measured)")
    if isinstance(prof_or_path, _kiln.profiler.Trace):
        trace, name = prof_or_path, "trace"
    elif isinstance(prof_or_path, _profiler.profile):
        trace, name = prof_or_path.trace, "kiln.profiler.profile"
    elif isinstance(prof_or_path, (str, bytes, _os.PathLike)):
        name = _os.fsdecode(prof_or_path)
        trace = _profiler.load_trace(prof_or_path, max_bytes=max_bytes)
    else:
        trace = _profiler.load_trace(prof_or_path)
        name = f"{type(prof_or_path).__module__}.{type(prof_or_path).__name__}"
    tiny_step_us = _integer("tiny_step_us", tiny_step_us)
    runs = _integer("runs", runs)
    analysed = _kiln.tidy.analyse(trace, name, list(names), bool(corrected), tiny_step_us)
    if benchmark:
        if model is None:
            model = trace.facts.get("model", "")
        _kiln.tidy.estimate_savings(analysed, trace, _os.fspath(model), runs)
    if html is not None:
        _kiln.tidy.write_html(analysed, trace, _os.fspath(html))
    return analysed

"""kiln.profiler: where a run's time and memory went, as an exact event tree.

    import kiln
    with kiln.profiler.profile(record_shapes=True, profile_memory=True) as prof:
        session.run(inputs)
    print(prof.key_averages(group_by="op").table(sort_by="self_time", row_limit=10))
    prof.export_chrome_trace("trace.json")    # open in https://ui.perfetto.dev or chrome://tracing

With a schedule, prof.step() marks the end of each step; only the active steps of each cycle are
kept, and on_trace_ready(prof) sees each cycle's trace:

    with kiln.profiler.profile(schedule=kiln.profiler.schedule(wait=1, warmup=1, active=3, repeat=2),
                               on_trace_ready=kiln.profiler.trace_handler("traces")) as prof:
        for batch in batches:
            session.run(batch)
            prof.step()

Recording is process-wide (every thread's runs, steps, reorders, inter-op tasks, annotations and,
with profile_memory, allocations through kiln's allocators), one profile at a time. Shapes, dtypes,
layouts, kernels and FLOPs come from the plan, so record_shapes costs nothing at run time; it only
decides whether they are kept.

load_trace reads profiles made elsewhere into the same model: PyTorch's live profiler, Kineto JSON
files (PyTorch 2.x), PyTorch 1.x's legacy JSON array, kiln's own and other Chrome traces:

    trace = kiln.profiler.load_trace("trace.json")     # or load_trace(torch_prof)
    trace.source, trace.unavailable                     # where it came from, what it could not tell
    for event in trace.events(): ...                    # id, parent_id, kind, name, tid, ns times ...
"""
import enum as _enum
import os as _os
import threading as _threading

from kiln import _kiln

__all__ = [
    "profile",
    "schedule",
    "ProfilerAction",
    "record_function",
    "trace_handler",
    "load_trace",
    "machine_facts",
    "DEFAULT_MAX_TRACE_BYTES",
]

_profiler = _kiln.profiler
DEFAULT_MAX_TRACE_BYTES = _profiler.DEFAULT_MAX_TRACE_BYTES


def machine_facts():
    """This machine as kiln's traces record it: {"cpu", "cpu_capability", "cpu_extensions", "isa",
    "threads", "cores", ...}, what kiln tidy compares before it measures a fix here."""
    return dict(_profiler.machine_facts())


def load_trace(path_or_profiler, *, max_bytes=DEFAULT_MAX_TRACE_BYTES):
    """A Trace from a trace file (str or os.PathLike: Kineto JSON, PyTorch's legacy array, kiln's or
    any Chrome trace; files over max_bytes are refused, 0 for no cap) or from a stopped
    torch.profiler.profile (see kiln.torch_trace.from_torch). Malformed files raise ValueError naming
    the file, the event and what was expected."""
    if isinstance(path_or_profiler, (str, bytes, _os.PathLike)):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"load_trace: max_bytes must be a non-negative int, got {max_bytes!r}")
        return _profiler.load_trace(_os.fsdecode(path_or_profiler), max_bytes)
    from kiln import torch_trace

    return torch_trace.from_torch(path_or_profiler)



class ProfilerAction(_enum.Enum):
    """What a schedule asks for at a step (PyTorch's names)."""

    NONE = 0  # not recording
    WARMUP = 1  # recording, to be dropped (first-use costs stay out of the trace)
    RECORD = 2  # recording, kept
    RECORD_AND_SAVE = 3  # recording, kept; the trace is handed to on_trace_ready after this step


def schedule(*, wait, warmup, active, repeat=0, skip_first=0):
    """A schedule as PyTorch's: skip `skip_first` steps, then cycles of `wait` steps not recorded,
    `warmup` steps recorded and dropped, `active` steps recorded; after each cycle's last active
    step the trace is ready. `repeat` cycles (0: until the profile stops)."""
    for name, value in (("wait", wait), ("warmup", warmup), ("active", active), ("repeat", repeat),
                        ("skip_first", skip_first)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"schedule: {name} must be a non-negative int, got {value!r}")
    if active < 1:
        raise ValueError(f"schedule: active must be at least 1, got {active}")

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if position < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def trace_handler(dir_name, prefix="kiln"):
    """An on_trace_ready that writes each cycle's Chrome trace to
    dir_name/<prefix>_<pid>_step<N>.json (N: the step the cycle ended at)."""

    def handler(prof):
        _os.makedirs(dir_name, exist_ok=True)
        prof.export_chrome_trace(_os.path.join(dir_name, f"{prefix}_{_os.getpid()}_step{prof.step_num}.json"))

    return handler


class record_function:
    """An annotation around a block (PyTorch's record_function): an event with this name, whose
    children are the runs and annotations the block started on this thread. Free when no profile
    records. Also usable as a decorator."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError(f"record_function: name must be a str, got {type(name).__name__}")
        self.name = name
        self._scope = None
        self._thread = None

    def __enter__(self):
        if self._scope is not None:
            raise RuntimeError(f"record_function({self.name!r}) is already entered; use a new one per block")
        self._scope = _profiler.RecordFunction(self.name)
        self._thread = _threading.get_ident()
        self._scope.enter()
        return self

    def __exit__(self, *exc):
        if self._thread != _threading.get_ident():
            raise RuntimeError(f"record_function({self.name!r}) must be exited on the thread that entered it")
        self._scope.exit()
        self._scope = None
        return False

    def __call__(self, function):
        def wrapped(*args, **kwargs):
            with record_function(self.name):
                return function(*args, **kwargs)

        wrapped.__name__ = getattr(function, "__name__", "wrapped")
        wrapped.__doc__ = getattr(function, "__doc__", None)
        return wrapped


class profile:
    """Records what kiln does between start() and stop() (or inside a with-block).

    record_shapes: keep each step's input/output shapes, dtypes and layouts.
    profile_memory: record allocations and frees through kiln's allocators, and per run its arena,
        what it allocated and its peak.
    schedule: a function from step number to ProfilerAction (see schedule()); without one,
        everything from start to stop is recorded.
    on_trace_ready: called with this profile whenever a trace is complete (each cycle's end with a
        schedule, else at stop()).
    """

    def __init__(self, *, record_shapes=True, profile_memory=True, schedule=None, on_trace_ready=None):
        if schedule is not None and not callable(schedule):
            raise TypeError("profile: schedule must be callable (see kiln.profiler.schedule)")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError("profile: on_trace_ready must be callable")
        self._profile = _profiler.Profile(record_shapes=bool(record_shapes), profile_memory=bool(profile_memory))
        self._schedule = schedule
        self._on_trace_ready = on_trace_ready
        self._action = ProfilerAction.NONE
        self._step_annotation = None
        self._trace = None
        self.step_num = 0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _scheduled(self):
        return self._schedule(self.step_num) if self._schedule is not None else ProfilerAction.RECORD

    def start(self):
        self.step_num = 0
        self._trace = None
        self._transition(ProfilerAction.NONE, self._scheduled())
        self._open_step_annotation()

    def step(self):
        """Marks the end of a step: the schedule decides what the next one records."""
        self._close_step_annotation()
        previous = self._action
        self.step_num += 1
        self._transition(previous, self._scheduled())
        self._open_step_annotation()

    def stop(self):
        self._close_step_annotation()
        self._transition(self._action, ProfilerAction.NONE)

    def _open_step_annotation(self):
        if self._schedule is not None and self._action != ProfilerAction.NONE:
            self._step_annotation = record_function(f"ProfilerStep#{self.step_num}")
            self._step_annotation.__enter__()

    def _close_step_annotation(self):
        if self._step_annotation is not None:
            self._step_annotation.__exit__(None, None, None)
            self._step_annotation = None

    def _transition(self, previous, action):
        recording = (ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        kept = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        # Set first: if on_trace_ready raises, the next step() does not hand the same trace again.
        self._action = action
        # A cycle ends after its last active step, or where a schedule leaves the active steps for
        # warm-up or for nothing: its trace is ready, and the next cycle may start recording at once.
        if previous == ProfilerAction.RECORD_AND_SAVE or (previous in kept and action not in kept):
            self._trace = self._profile.take() if action in recording else self._profile.stop()
            if self._on_trace_ready is not None:
                self._on_trace_ready(self)
        elif previous == ProfilerAction.NONE and action in recording:
            self._profile.start()
        elif previous == ProfilerAction.WARMUP and action in kept:
            self._profile.discard()
        elif previous == ProfilerAction.WARMUP and action == ProfilerAction.NONE:
            self._profile.stop()

    # What the last complete trace holds.
    def _require_trace(self):
        if self._trace is None:
            raise RuntimeError("no trace yet: the profile has not finished recording a cycle (stop it, or step "
                               "past the schedule's active steps)")
        return self._trace

    @property
    def trace(self):
        """The last complete trace (a _kiln.profiler.Trace)."""
        return self._require_trace()

    def events(self):
        """Every event as a dict: id, parent_id (0: a root), kind (run, step, reorder, interop_task,
        memory, annotation), name, tid, thread_name, start_ns, end_ns (from the first event), and
        the fields of its kind as docs/record_schema.md lists them: a step's whole plan record (the
        fields Session.explain gives), a run's or plan's settings and memory, a memory event's
        bytes/tag/total_bytes."""
        return self._require_trace().events()

    def key_averages(self, group_by="op"):
        """Events grouped by op, node, backend, kernel or shape: .table(sort_by=..., row_limit=...),
        .rows(), .json()."""
        return self._require_trace().key_averages(group_by)

    def export_chrome_trace(self, path):
        """Writes the trace in Chrome's Trace Event Format (Perfetto and chrome://tracing open it)."""
        self._require_trace().export_chrome_trace(_os.fspath(path))

    def summary_json(self, group_by="op"):
        """The run times, memory and key averages as one JSON text."""
        return self._require_trace().summary_json(group_by)

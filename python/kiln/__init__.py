"""kiln: an inference runtime for ONNX models with explicit, switchable and observable backends.

    import kiln, numpy as np
    session = kiln.Session("model.onnx")              # settings: see kiln.backends.table()
    outputs = session.run({"input": np.zeros((1, 3, 224, 224), np.float32)})
    with kiln.backends.onednn.verbose(1):             # one line per executed step, this scope only
        session.run(...)
    with kiln.profiler.profile() as prof:             # an exact event tree of what ran
        session.run(...)
    print(prof.key_averages().table(row_limit=10))

C-contiguous input arrays are read without a copy (others are copied into contiguous ones); outputs
are arrays over the storage kiln computed them into, cloned first only when that storage is shared
(a constant, an input, reused run buffers). kiln errors raise ValueError (bad input or model),
TypeError (wrong dtype), NotImplementedError (unsupported op or dtype) or RuntimeError; a run
stopped through a kiln.RunControl (control.cancel() from any thread, control.set_timeout(seconds))
raises kiln.CancelledError (a RuntimeError) or TimeoutError at its next step boundary.
"""
import atexit as _atexit
import os as _os

from kiln import _kiln
from kiln import backends
from kiln import functional
from kiln import profiler
from kiln import quantization
from kiln import torch_trace  # imports torch only when a torch profile is read
from kiln import tidy
from kiln._kiln import (
    get_num_interop_threads,
    get_num_threads,
    get_thread_budget,
    num_interop_threads_source,
    num_threads_source,
    CancelledError,
    RunControl,
    parallel_info,
    set_num_interop_threads,
    set_num_threads,
    set_thread_budget,
    thread_budget_source,
)

__version__ = _kiln.version()
# Runs started with run_async drop their references to arrays and sessions under the GIL when they
# finish: the interpreter waits for them before it shuts down.
_atexit.register(_kiln.wait_for_async_runs)

__all__ = [
    "Session",
    "Future",
    "RunControl",
    "CancelledError",
    "backends",
    "profiler",
    "tidy",
    "set_num_threads",
    "get_num_threads",
    "num_threads_source",
    "set_num_interop_threads",
    "get_num_interop_threads",
    "num_interop_threads_source",
    "set_thread_budget",
    "get_thread_budget",
    "thread_budget_source",
    "parallel_info",
]


def _control(control):
    if control is not None and not isinstance(control, RunControl):
        raise TypeError(f"control must be a kiln.RunControl, got {type(control).__name__}")
    return control


class Future:
    """A run in flight (Session.run_async). It keeps the session and the input arrays alive until
    the run has finished; wait() releases the GIL while it blocks."""

    def __init__(self, future):
        self._future = future

    def wait(self):
        """Blocks until the run has finished; returns {output name: numpy array} or raises what the
        run raised. May be called again."""
        return self._future.wait()

    def result(self):
        """The same as wait() (concurrent.futures' name)."""
        return self._future.wait()

    def done(self):
        """True once the run has finished (never blocks)."""
        return self._future.done()


def compare(model_a, model_b=None, inputs=None, a_settings=None, b_settings=None):
    """Where two runs part, value by value: runs model_a and model_b (default: model_a again, to
    compare one model under a_settings and b_settings, e.g. {"conv_precision": "bf16"}) on the same
    inputs ({name: array}; missing ones seeded random) and returns, per value both compute, a dict
    {name, b_name, shape, output, sqnr_db, max_abs_error, mean_abs_error}, worst (lowest SQNR) first.
    A value model_b quantizes (DequantizeLinear(QuantizeLinear(v)), a QDQ model) matches model_a's v,
    as `b_name` says. What `kiln compare` prints."""
    return _kiln.compare(_os.fspath(model_a), "" if model_b is None else _os.fspath(model_b), inputs,
                         dict(a_settings or {}), dict(b_settings or {}))


class Session:
    """A loaded model. Keyword arguments are settings for this session's runs (the names of
    kiln.backends.table()); they override the global settings and are overridden by scoped ones."""

    def __init__(self, path, **settings):
        self._session = _kiln.Session(_os.fspath(path), settings)

    def run(self, inputs, control=None):
        """Runs the model on {name: numpy array}; returns {output name: numpy array}. A RunControl
        given as `control` stops the run (CancelledError, TimeoutError) at its next step boundary."""
        if not isinstance(inputs, dict):
            raise TypeError(f"inputs must be a dict of name -> numpy array, got {type(inputs).__name__}")
        return self._session.run(inputs, _control(control))

    def run_async(self, inputs, control=None):
        """Starts a run on kiln's inter-op pool with the settings in force now; returns a Future.
        Errors, bad inputs and cancellation included, are raised by Future.wait()."""
        if not isinstance(inputs, dict):
            raise TypeError(f"inputs must be a dict of name -> numpy array, got {type(inputs).__name__}")
        return Future(self._session.run_async(inputs, _control(control)))

    @property
    def inputs(self):
        """[{"name", "dtype", "shape"}] per graph input; symbolic dims are their names (or None)."""
        return self._session.inputs

    @property
    def outputs(self):
        return self._session.outputs

    def explain(self, inputs, profile=0):
        """The plan for these inputs, one dict per step with exactly the fields of
        `kiln explain --json` (docs/record_schema.md lists them): op, node, backend, kernel, shapes,
        dtypes and layouts, fused nodes, notes, quantization, the rule that chose the kernel, every
        refusal ({backend, kernel, kind, detail}; `kind` one of kiln.backends.refusal_kinds()) and
        what autotune timed; with profile=N, "ms" (the median over N runs), "gflops_per_s" and the
        step's place on this machine's roofline ("flops_per_byte", "bound": "compute" or "memory",
        "bound_ms", "fraction_of_bound"; docs/profiler.md#the-roofline), else None."""
        return self._session.explain(inputs, profile)

    def explain_text(self, inputs, profile=0):
        """What `kiln explain` prints for these inputs (the same formatter), profiled over N runs."""
        return self._session.explain_text(inputs, profile)

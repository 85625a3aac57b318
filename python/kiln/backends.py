"""kiln.backends: what each backend is and how kiln uses it, in the shape of torch.backends.

Every setting is global (an attribute or set_* call) or scoped to a `with` block on the calling
thread (a context manager); scopes nest and restore exactly, also when an exception leaves them.

    kiln.backends.onednn.enabled = False              # global
    with kiln.backends.flags(onednn=False):            # this thread, this block
    with kiln.backends.onednn.verbose(1):              # kiln's lines for oneDNN steps + oneDNN's own
    with kiln.backends.verbose(1, sink=lines.append):  # every step, to a callback
    with kiln.backends.flags(precision="bf16"):        # conv and matmul in bf16 (AMX here)

docs/backends.md lists every setting, its default and its environment variable.
"""
import sys as _sys
import types as _types

from kiln import _kiln

_b = _kiln.backends


def flags(**options):
    """A context manager overriding settings on this thread: onednn, blas (enabled), precision,
    conv_precision, matmul_precision ('fp32'/'bf16'), deterministic, autotune (candidates per node,
    0 = off), verbose, onednn_verbose, blas_verbose (0-2) and verbose_sink (None = stdout, a path,
    or a callable taking one line)."""
    return _b.flags(**options)


def set_flags(**options):
    """Changes the global settings (same names as flags())."""
    _b.set_flags(**options)


def verbose(level, sink=None):
    """Context manager: kiln's verbose lines for every backend at `level` (1: executed steps,
    2: planned steps too), to `sink` (None: standard output, a path, or a callable)."""
    options = {"verbose": level}
    if sink is not None:
        options["verbose_sink"] = sink
    return _b.flags(**options)


def set_verbose(level, sink=None):
    options = {"verbose": level}
    if sink is not None:
        options["verbose_sink"] = sink
    _b.set_flags(**options)


def current():
    """The settings this thread's runs would use now, as a dict."""
    return _b.current()


class _Backend:
    def __init__(self, name, version, available, can_disable=True):
        self._name = name
        self._version = version
        self._available = available
        self._can_disable = can_disable

    def is_built(self):
        return True

    def is_available(self):
        return self._available()

    def version(self):
        return self._version()

    @property
    def enabled(self):
        return _b.current()[self._name]

    @enabled.setter
    def enabled(self, value):
        _b.set_flags(**{self._name: value})

    def flags(self, enabled=True):
        """Context manager: this backend enabled or not in kernel selection, on this thread."""
        return _b.flags(**{self._name: enabled})

    def __repr__(self):
        return f"<kiln backend {self._name} {self.version()}>"


class _Onednn(_Backend):
    def __init__(self):
        super().__init__("onednn", _b.onednn_version, _b.onednn_available)
        self.primitive_cache = _PrimitiveCache()

    def isa(self):
        """The ISA oneDNN dispatches up to, in oneDNN's names ("avx2", "avx512_core_bf16"): the CPU's
        best, capped with kiln's tier (`kiln.backends.cpu.isa()`)."""
        return _b.onednn_isa()

    def verbose(self, level):
        """Context manager: kiln's lines for oneDNN steps and oneDNN's own verbose (`onednn_verbose,...`
        on stdout). oneDNN's is process-wide: other threads see it while the block runs."""
        return _b.flags(onednn_verbose=level)

    def set_verbose(self, level):
        _b.set_flags(onednn_verbose=level)


class _Blas(_Backend):
    def __init__(self):
        super().__init__("blas", _b.blas_version, _b.blas_available)

    def library(self):
        """The BLAS library and its build configuration."""
        return _b.blas_library()

    def verbose(self, level):
        """Context manager: a line per call kiln makes into BLAS."""
        return _b.flags(blas_verbose=level)

    def set_verbose(self, level):
        _b.set_flags(blas_verbose=level)


class _Native(_Backend):
    def __init__(self):
        super().__init__("native", _b.native_version, lambda: True)

    @property
    def enabled(self):
        return True

    @enabled.setter
    def enabled(self, value):
        _b.set_flags(native=value)  # raises ValueError for False


class _PrimitiveCache:
    """oneDNN's primitive cache (plans keep their own primitives; the cache speeds up creating
    identical ones)."""

    @property
    def size(self):
        return _b.primitive_cache_size()

    @property
    def capacity(self):
        return _b.primitive_cache_capacity()

    @capacity.setter
    def capacity(self, value):
        _b.set_primitive_cache_capacity(value)

    def clear(self):
        _b.clear_primitive_cache()


cpu = _types.SimpleNamespace(
    is_available=lambda: True,
    capability=_b.cpu_capability,
    best_isa=_b.cpu_best_isa,
    isa=_b.cpu_isa,
    isa_source=_b.cpu_isa_source,
    set_max_isa=_b.cpu_set_max_isa,
)
openmp = _types.SimpleNamespace(
    is_available=lambda: _b.openmp_version() != 0,
    version=_b.openmp_version,
)
cuda = _types.SimpleNamespace(is_built=lambda: False, is_available=lambda: False)
onednn = _Onednn()
blas = _Blas()
native = _Native()


class _BackendsModule(_types.ModuleType):
    """Module attributes that read and write global settings."""

    @property
    def deterministic(self):
        return _b.current()["deterministic"]

    @deterministic.setter
    def deterministic(self, value):
        _b.set_flags(deterministic=value)

    @property
    def autotune(self):
        return _b.current()["autotune"]

    @autotune.setter
    def autotune(self, value):
        _b.set_flags(autotune=value)

    @property
    def conv_precision(self):
        return _b.current()["conv_precision"]

    @conv_precision.setter
    def conv_precision(self, value):
        _b.set_flags(conv_precision=value)

    @property
    def matmul_precision(self):
        return _b.current()["matmul_precision"]

    @matmul_precision.setter
    def matmul_precision(self, value):
        _b.set_flags(matmul_precision=value)


_sys.modules[__name__].__class__ = _BackendsModule

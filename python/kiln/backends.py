"""kiln.backends: what each backend is and how kiln uses it, in the shape of torch.backends.

Every setting is a row of kiln's one settings table (`table()` lists them: name, type, default,
range or choices, whether it changes the plan, environment variable, help). Each is global (an
attribute or set_settings) or scoped to a `with` block on the calling thread (settings()); scopes
nest and restore exactly, also when an exception leaves them. Sessions take the same names:
kiln.Session(path, deterministic=True).

    kiln.backends.onednn.enabled = False              # global
    kiln.backends.deterministic = True                 # global
    with kiln.backends.settings(onednn_enabled=False): # this thread, this block
    with kiln.backends.settings(threads=1):            # runs started in the block use 1 thread
    with kiln.backends.onednn.verbose(1):              # kiln's lines for oneDNN steps + oneDNN's own
    with kiln.backends.verbose(1, sink=lines.append):  # every step, to a callback
    with kiln.backends.settings(precision="bf16"):     # conv and matmul in bf16 where the CPU has it
    with kiln.backends.sdpa_kernel([SDPBackend.FLASH, SDPBackend.MATH], set_priority=True):
    with kiln.backends.prefer(["blas", "onednn"], ops=["matmul"]):  # these, in this order, only

KILN_VERBOSE sets the verbose level at start-up. docs/backends.md lists every setting.
"""
import sys as _sys
import types as _types

from kiln import _kiln

_b = _kiln.backends
_ROWS = _b.setting_rows()
_GLOBAL_ROWS = [row for row in _ROWS if row["backend"] is None]
# Module attributes for global rows; verbose is a context manager instead, as in torch.backends.
_ATTRIBUTE_ROWS = {row["name"] for row in _GLOBAL_ROWS if row["name"] not in ("verbose", "verbose_sink")}


def table():
    """Every setting: [{"name", "type", "default", "min", "max", "choices", "changes_plan", "backend",
    "row", "env", "help", "cli"}], backends expanded ("onednn_enabled", "blas_enabled", ...). "type" is
    "bool", "int", "choice", "list" or "sink"; choice and list rows name their values in "choices" (a
    list row's value is a list of them in priority order: sdpa_kernels)."""
    return [dict(row) for row in _ROWS]


def clear_choice_cache():
    """Forgets every decision autotune timed in this process: plans built afterwards (of any session)
    time their candidates again. Plans already built keep their kernels."""
    _b.clear_choice_cache()


def choice_cache_size():
    """How many timed decisions the process keeps (one per distinct node and settings, bounded)."""
    return _b.choice_cache_size()


def refusal_kinds():
    """Every kind a refusal in explain or a trace may carry ("disabled", "unsupported_dtype", ...), in
    kiln's catalog order; docs/backends.md says what each means."""
    return list(_b.refusal_kinds())


def settings(**values):
    """A context manager overriding settings on this thread, by table name (see table()), plus
    `precision` for both conv_precision and matmul_precision. verbose_sink is None (stdout), a path
    or a callable taking one line."""
    return _b.settings(**values)


def set_settings(**values):
    """Changes the global settings (same names as settings())."""
    _b.set_settings(**values)


def aliases():
    """PyTorch's names for kiln settings, one table for C++, the C API, the CLI and Python:
    [{"name", "setting", "mirrors"}] ("mkldnn.enabled" is onednn_enabled, "quantized.engine" is
    prefer_quantized with its values named as PyTorch names engines). get_alias/set_alias read and set
    one by name; the attributes below (mha, rnn, opt_einsum, winograd.algorithm, quantized.engine)
    are those aliases."""
    return _b.aliases()


def get_alias(name):
    """An alias's value on this thread: a bool for switches, else its value's name."""
    return _b.get_alias(name)


def set_alias(name, value):
    """Sets an alias's setting globally (kiln.backends.settings(...) scopes the setting itself)."""
    _b.set_alias(name, value)


def current():
    """Every setting's value as this thread's runs would see it now, as a dict."""
    return _b.current()


def verbose(level, sink=None):
    """Context manager: kiln's verbose lines for every backend at `level` (1: executed steps and
    library calls, 2: planned steps too), to `sink` (None: standard output, a path, or a callable)."""
    values = {"verbose": level}
    if sink is not None:
        values["verbose_sink"] = sink
    return _b.settings(**values)


def set_verbose(level, sink=None):
    values = {"verbose": level}
    if sink is not None:
        values["verbose_sink"] = sink
    _b.set_settings(**values)


class _Backend:
    """One backend: its facts, and its per-backend settings (the table's per-backend rows) as
    attributes (`enabled`), plus verbose(level) as a context manager."""

    def __init__(self, info):
        self._name = info["name"]
        self._info = info
        self._rows = {row["row"] for row in _ROWS if row["backend"] == self._name}

    def is_built(self):
        return self._info["built"]

    def is_available(self):
        return self._info["available"]

    def version(self):
        return self._info["version"]

    def settings(self, **values):
        """Context manager: this backend's settings by row name, e.g. settings(enabled=False)."""
        return _b.settings(**{self._qualified(row): value for row, value in values.items()})

    def verbose(self, level):
        """Context manager: kiln's lines for this backend's steps and calls at `level`; for oneDNN also
        oneDNN's own verbose, which is process-wide: it runs at the highest level any open scope, the
        global setting or ONEDNN_VERBOSE asks for."""
        return _b.settings(**{self._qualified("verbose"): level})

    def set_verbose(self, level):
        _b.set_settings(**{self._qualified("verbose"): level})

    def _qualified(self, row):
        if row not in self._rows:
            raise ValueError(f"unknown setting '{row}' of backend {self._name} (known: {', '.join(sorted(self._rows))})")
        return f"{self._name}_{row}"

    def __getattr__(self, row):
        if row.startswith("_") or row not in self.__dict__.get("_rows", ()):
            raise AttributeError(row)
        return _b.current()[self._qualified(row)]

    def __setattr__(self, row, value):
        if row.startswith("_") or isinstance(getattr(type(self), row, None), property):
            object.__setattr__(self, row, value)
        else:
            _b.set_settings(**{self._qualified(row): value})

    def __repr__(self):
        return f"<kiln backend {self._name} {self.version()}>"


class _Onednn(_Backend):
    def __init__(self, info):
        super().__init__(info)
        self._primitive_cache = _PrimitiveCache()

    @property
    def primitive_cache(self):
        return self._primitive_cache

    def isa(self):
        """The ISA oneDNN dispatches up to, in oneDNN's names ("avx2", "avx512_core_bf16"): the CPU's
        best, capped with kiln's tier (`kiln.backends.cpu.isa()`)."""
        return _b.onednn_isa()


class _Blas(_Backend):
    def library(self):
        """The BLAS library and its build configuration."""
        return _b.blas_library()


class _Winograd(_Backend):
    """Winograd's F(4x4,3x3) and F(2x2,3x3) for stride-1 3x3 convolutions (torch.backends.nnpack's
    counterpart). Which layers use it is the global conv_algorithm setting ("auto", "direct",
    "winograd"); `enabled` takes the backend out of selection altogether."""

    algorithm = property(lambda self: _b.get_alias("winograd.algorithm"),
                         lambda self, value: _b.set_alias("winograd.algorithm", value))

    def flags(self, enabled=None, algorithm=None):
        """Context manager like torch.backends.nnpack.flags(enabled=...): the backend's `enabled`
        and conv_algorithm for plans built in the block on this thread (None: unchanged)."""
        values = {}
        if enabled is not None:
            values["winograd_enabled"] = bool(enabled)
        if algorithm is not None:
            values["conv_algorithm"] = algorithm
        return _b.settings(**values)


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


class _Allocator:
    """Where kiln's tensors, arenas and scratch buffers take memory from. "default" (aligned
    operator new) and "counting" (the default plus totals: counts()) are registered; C++ code can
    register and select others (kiln::backends::set_allocator)."""

    def name(self):
        return _b.allocator()

    def use(self, name):
        """Selects a registered allocator; memory already handed out goes back where it came from."""
        _b.set_allocator(name)

    def registered(self):
        return _b.registered_allocators()

    def counts(self):
        """The "counting" allocator's totals: allocations, bytes, live_bytes, peak_live_bytes."""
        return _b.allocation_counts()

    def reset_counts(self):
        _b.reset_allocation_counts()


_SPECIAL = {"onednn": _Onednn, "blas": _Blas, "winograd": _Winograd}
_BACKENDS = {info["name"]: _SPECIAL.get(info["name"], _Backend)(info) for info in _b.backend_list()}


def list_backends():
    """Every backend kiln knows, in its registry order (backends/registry.h), built or not:
    is_built() says which were configured in."""
    return list(_BACKENDS.values())


onednn = _BACKENDS["onednn"]
blas = _BACKENDS["blas"]
winograd = _BACKENDS["winograd"]
native = _BACKENDS["native"]
allocator = _Allocator()
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


# ---- choosing backends by name (positive choice; --disable and *_enabled are the negative one) ----


def op_families():
    """The op families a preference applies to: ["conv", "matmul", "attention", "quantized", "other"]
    (matmul: MatMul, Gemm and Einsum; attention: fused attention steps; quantized: the int8 ops;
    other: every other op)."""
    return _b.op_families()


def _names(names):
    if isinstance(names, str):
        return [names]
    return [str(name) for name in names]


def prefer(backends, ops=None):
    """Context manager: only `backends` (backend names "onednn", "blas", "winograd", "native", or attention's
    named kernels "math", "flash"), in this order, may run the op families `ops` (see op_families();
    None: every family) of plans built in the block on this thread. The native fallback may be left
    out: a node no listed backend takes is then a planning error listing every reason. An empty
    list restores the registry's order."""
    return _b.prefer_context(_names(backends), [] if ops is None else _names(ops))


def set_prefer(backends, ops=None):
    """prefer() for every thread, until changed."""
    _b.set_prefer(_names(backends), [] if ops is None else _names(ops))


def preferred(family):
    """This thread's list for an op family ([] when there is no preference)."""
    return _b.preferred(family)


def preferred_linalg_library(backend=None):
    """torch.backends.cuda.preferred_linalg_library's form, for products (MatMul and Gemm; Einsum nodes,
    in the same family, run on native only): with `backend` ("onednn", "blas", "winograd", "native" or "default"), asks it first globally
    (the others after it); returns the library asked first ("default" without a preference)."""
    if backend is not None:
        _b.set_preferred_linalg_library(str(backend))
    return _b.preferred_linalg_library()


# ---- the int8 engine (torch.backends.quantized) ----

_TIERS = ["baseline", "avx2", "avx512", "avx512_bf16", "amx"]


class _Quantized:
    """torch.backends.quantized's shape: which engine runs the int8 ops (the "quantized" op family:
    QLinearConv, QLinearMatMul, MatMulInteger, QuantizeLinear, ...). "onednn" (its VNNI kernels,
    exact only from the avx512_bf16 tier up, with native's kernels for what it refuses) or "native"
    (kiln's exact kernels on every CPU). Both give the same bits. `engine` is assigned globally
    (prefer_quantized); for a scope use kiln.backends.prefer([...], ops=["quantized"])."""

    @property
    def supported_engines(self):
        """The engines that run int8 exactly on this CPU at the tier in effect (KILN_ISA caps it)."""
        engines = ["native"]
        if onednn.is_built() and onednn.enabled and _TIERS.index(cpu.isa()) >= _TIERS.index("avx512_bf16"):
            engines.insert(0, "onednn")
        return engines

    @property
    def engine(self):
        """The engine asked first for int8 ops on this thread: the preference's first entry, or
        without one the first supported engine."""
        listed = preferred("quantized")
        return listed[0] if listed else self.supported_engines[0]

    @engine.setter
    def engine(self, name):
        name = str(name)
        if name != "default" and name not in self.supported_engines:
            raise RuntimeError(f"quantized engine {name!r} is not supported here; supported_engines: "
                               f"{self.supported_engines} (oneDNN's int8 kernels are exact only with VNNI, the "
                               "avx512_bf16 tier and above)")
        _b.set_alias("quantized.engine", name)


quantized = _Quantized()


# ---- the MHA fast path (torch.backends.mha) ----

mha = _types.SimpleNamespace(
    # On by default: a transformer block's residual Add (with the attention output's transposition
    # before it) and the LayerNorm after it run as one step. Global; for a scope use
    # kiln.backends.settings(mha_fastpath=False).
    get_fastpath_enabled=lambda: _b.get_alias("mha.fastpath_enabled"),
    set_fastpath_enabled=lambda enabled: _b.set_alias("mha.fastpath_enabled", bool(enabled)),
)


# ---- the fast RNN path (torch.backends.cudnn's rnn switch, on CPU) ----

rnn = _types.SimpleNamespace(
    # On by default: LSTM, GRU and RNN layers run on oneDNN's RNN primitives where those take them
    # (`kiln explain` gives each refusal), else on the native kernel. Global; for a scope use
    # kiln.backends.settings(rnn_fastpath=False).
    get_fastpath_enabled=lambda: _b.get_alias("rnn.fastpath_enabled"),
    set_fastpath_enabled=lambda enabled: _b.set_alias("rnn.fastpath_enabled", bool(enabled)),
)

# ---- Einsum's contraction order (torch.backends.opt_einsum) ----


class _OptEinsum:
    """torch.backends.opt_einsum's controls over kiln's own path search (numpy.einsum_path's cost model,
    built in, so always available): `enabled` (the einsum_optimize setting; off contracts left to right)
    and `strategy` ("auto", "greedy" or "optimal"; the einsum_strategy setting), both global; use
    kiln.backends.settings(einsum_strategy=...) for a scope."""

    def is_available(self):
        return True

    enabled = property(lambda self: _b.get_alias("opt_einsum.enabled"),
                       lambda self, value: _b.set_alias("opt_einsum.enabled", bool(value)))
    strategy = property(lambda self: _b.get_alias("opt_einsum.strategy"),
                        lambda self, value: _b.set_alias("opt_einsum.strategy", value))

    def contract_path(self, equation, *operands, strategy=None, optimize=None):
        """The path kiln would take for `equation` over arrays or shapes, as a dict: "path" (position
        tuples, numpy's convention), "strategy", "naive_flops", "optimized_flops" and
        "largest_intermediate" (numpy.einsum_path's counts) and "text". strategy/optimize default to
        this thread's settings."""
        shapes = [list(getattr(x, "shape", x)) for x in operands]
        current = _b.current()
        return _b.einsum_path(equation, shapes, current["einsum_strategy"] if strategy is None else strategy,
                              current["einsum_optimize"] if optimize is None else bool(optimize))


opt_einsum = _OptEinsum()


# ---- attention kernels (torch.nn.attention.sdpa_kernel and torch.backends.cuda's SDPA controls) ----


class SDPBackend:
    """The attention kernels, by the names the sdpa_kernels setting uses: MATH materializes the
    scores, FLASH never does (tiles with an online softmax: memory O(L)), ONEDNN runs oneDNN's
    matmul, softmax and matmul primitives."""
    MATH = "math"
    FLASH = "flash"
    ONEDNN = "onednn"


def sdpa_kernel(backends, set_priority=False):
    """Context manager: only `backends` (SDPBackend values or their names) may run the attention of
    plans built in the block on this thread, in their default order (onednn, flash, math), or in the
    order given with set_priority=True. The first that can take an attention step runs it; when none
    can, planning raises with each one's reason. An empty list leaves attention unfused."""
    if isinstance(backends, str):
        backends = [backends]
    return _b.sdpa_kernels_context(list(backends), set_priority)


class SDPAParams:
    """What an attention call would see: arrays, or shapes with dtype= and mask_dtype= (query
    [..., L, E], key [..., S, E], value [..., S, Ev], attn_mask broadcasting to [..., L, S]: float added
    to the scores, bool true where a key takes part). kiln.backends.sdpa_kernels is the thread's list
    of kernels (read), and the global one (assigned)."""

    def __init__(self, query, key, value, attn_mask=None, is_causal=False, scale=None, dtype="float32",
                 mask_dtype="float32"):
        def shape(x):
            return tuple(x.shape) if hasattr(x, "shape") else tuple(x)

        self.query, self.key, self.value = shape(query), shape(key), shape(value)
        self.dtype = str(query.dtype) if hasattr(query, "dtype") else dtype
        self.attn_mask = None if attn_mask is None else shape(attn_mask)
        self.mask_dtype = str(attn_mask.dtype) if hasattr(attn_mask, "dtype") else mask_dtype
        self.is_causal = bool(is_causal)
        self.scale = scale

    def __repr__(self):
        return (f"SDPAParams(query={self.query}, key={self.key}, value={self.value}, dtype={self.dtype}, "
                f"attn_mask={self.attn_mask} {self.mask_dtype if self.attn_mask else ''}, "
                f"is_causal={self.is_causal}, scale={self.scale})")


def why_not(backend, params):
    """Why kernel `backend` cannot take `params` under this thread's settings; [] when it can."""
    return _b.sdpa_why_not(backend, params.query, params.key, params.value, params.dtype, params.attn_mask,
                           params.mask_dtype, params.is_causal, params.scale)


def _can_use(backend, params, debug):
    reasons = why_not(backend, params)
    if debug:
        import warnings
        for reason in reasons:
            warnings.warn(f"{backend} attention cannot be used: {reason}", stacklevel=3)
    return not reasons


def can_use_flash(params, debug=False):
    """True when the flash kernel can take `params`; with debug, each reason it cannot is a warning."""
    return _can_use(SDPBackend.FLASH, params, debug)


def can_use_math(params, debug=False):
    return _can_use(SDPBackend.MATH, params, debug)


def can_use_onednn(params, debug=False):
    return _can_use(SDPBackend.ONEDNN, params, debug)


def enable_flash_sdp(enabled):
    """Adds flash to (at its default place) or removes it from the global sdpa_kernels list."""
    _b.sdpa_set_enabled(SDPBackend.FLASH, bool(enabled))


def flash_sdp_enabled():
    return _b.sdpa_enabled(SDPBackend.FLASH)


def enable_math_sdp(enabled):
    _b.sdpa_set_enabled(SDPBackend.MATH, bool(enabled))


def math_sdp_enabled():
    return _b.sdpa_enabled(SDPBackend.MATH)


def enable_onednn_sdp(enabled):
    _b.sdpa_set_enabled(SDPBackend.ONEDNN, bool(enabled))


def onednn_sdp_enabled():
    return _b.sdpa_enabled(SDPBackend.ONEDNN)


class _BackendsModule(_types.ModuleType):
    """Module attributes for the global settings (kiln.backends.deterministic = True)."""

    def __getattr__(self, name):
        if name in _ATTRIBUTE_ROWS:
            return _b.current()[name]
        raise AttributeError(f"module 'kiln.backends' has no attribute '{name}'")

    def __setattr__(self, name, value):
        if name in _ATTRIBUTE_ROWS:
            _b.set_settings(**{name: value})
        else:
            super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _BackendsModule

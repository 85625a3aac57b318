"""Scaled dot-product attention: the kernels against float64 numpy, the kernel-selection API
(kiln.backends.sdpa_kernel, enable_*_sdp, can_use_*), and the planner's fusion of attention as
PyTorch 1.13 exports it (opsets 13 and 17), against PyTorch's outputs.

Default tier: a fixed sample with L <= 256 plus one L = 2048 case. Slow tier (KILN_SLOW=1): the full
grid, and flash's memory against math's at L = 2048."""
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

KERNELS = ["math", "flash", "onednn"]
FP32_TOLERANCE = 1e-5  # x the output's scale
BF16_TOLERANCE = 1e-2


@pytest.fixture(scope="module")
def kiln(kiln_module):
    return kiln_module


def reference(q, k, v, mask=None, causal=False):
    """softmax(q k^T / sqrt(E) + mask) v in float64; a bool mask keeps the keys where it is True."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    scores -= scores.max(-1, keepdims=True)
    p = np.exp(scores)
    return (p / p.sum(-1, keepdims=True)) @ v


def make_case(leading, l, s, e, mask_kind, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*leading, l, e), dtype=np.float32)
    k = rng.standard_normal((*leading, s, e), dtype=np.float32)
    v = rng.standard_normal((*leading, s, e), dtype=np.float32)
    mask, causal = None, False
    if mask_kind == "additive":
        mask = rng.uniform(-4, 0, (l, s)).astype(np.float32)
    elif mask_kind == "bool":
        mask = rng.random((*leading[:-1], 1, 1, s)) > 0.3
        mask[..., 0] = True  # every query keeps a key
    elif mask_kind == "causal":
        causal = True
    return q, k, v, mask, causal


def relative_error(actual, expected):
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def check_case(kiln, leading, l, s, e, mask_kind, seed, kernels=KERNELS):
    q, k, v, mask, causal = make_case(leading, l, s, e, mask_kind, seed)
    expected = reference(q, k, v, mask, causal)
    params = kiln.backends.SDPAParams(q, k, v, attn_mask=mask, is_causal=causal)
    math_out = None
    for kernel in kernels:
        if not kiln.backends.why_not(kernel, params) == []:
            # Only oneDNN refuses, and only for what docs/attention.md lists.
            assert kernel == "onednn" and (mask_kind in ("bool", "causal")), kiln.backends.why_not(kernel, params)
            continue
        with kiln.backends.sdpa_kernel([kernel]):
            out, name = kiln.functional.scaled_dot_product_attention(q, k, v, mask, causal, return_kernel=True)
        assert kernel in name
        if kernel == "math":
            math_out = out
            assert relative_error(out, expected) <= FP32_TOLERANCE, (kernel, leading, l, s, e, mask_kind)
        else:
            assert relative_error(out, math_out) <= FP32_TOLERANCE, (kernel, leading, l, s, e, mask_kind)


# (leading dims, L, S, head dim, mask): the default tier's fixed sample.
SAMPLE = [
    ((1, 1), 1, 1, 32, "none"),
    ((1, 4), 128, 128, 64, "none"),
    ((2, 3), 97, 97, 32, "causal"),
    ((2, 2), 64, 256, 128, "additive"),
    ((3, 2), 200, 200, 64, "bool"),
    ((1, 2), 256, 256, 128, "causal"),
    ((2, 1), 33, 129, 64, "additive"),
]


@pytest.mark.parametrize("leading,l,s,e,mask_kind", SAMPLE)
def test_kernels_against_float64_sample(kiln, leading, l, s, e, mask_kind):
    check_case(kiln, leading, l, s, e, mask_kind, seed=l * 7 + e)


def test_one_sequence_of_2048(kiln):
    check_case(kiln, (1, 1), 2048, 2048, 64, "none", seed=3)


@pytest.mark.slow
@pytest.mark.parametrize("e", [32, 64, 128])
@pytest.mark.parametrize("mask_kind", ["none", "additive", "bool", "causal"])
def test_kernels_against_float64_full_grid(kiln, e, mask_kind):
    for (batch, heads), l in itertools.product([(1, 1), (2, 4), (8, 2)], [1, 17, 64, 128, 255, 512, 1024]):
        check_case(kiln, (batch, heads), l, l, e, mask_kind, seed=l + e + batch)


def test_bf16_within_1e_2_where_the_cpu_has_it(kiln):
    q, k, v, mask, _ = make_case((2, 4), 128, 128, 64, "additive", 5)
    expected = reference(q, k, v, mask)
    bf16 = "AVX512_BF16" in kiln.backends.cpu.capability() and kiln.backends.cpu.isa() in ("avx512_bf16", "amx")
    for kernel in ("flash", "onednn"):
        with kiln.backends.sdpa_kernel([kernel]), kiln.backends.settings(matmul_precision="bf16"):
            out, name = kiln.functional.scaled_dot_product_attention(q, k, v, mask, return_kernel=True)
        if bf16:
            assert "bf16" in name, name
            assert relative_error(out, expected) <= BF16_TOLERANCE, name
        else:  # the documented fallback: float32 where the ISA has no bf16 dot products
            assert "bf16" not in name, name
            assert relative_error(out, expected) <= FP32_TOLERANCE, name


@pytest.mark.slow
def test_flash_memory_is_o_of_l_math_is_o_of_l_squared(kiln):
    """Peak memory of each kernel at L = 2048 (one head, one thread), through the counting allocator.
    Each runs on a fresh thread: kernels keep per-thread scratch buffers, which an earlier call on the
    same thread would have grown already."""
    import threading
    q, k, v, _, _ = make_case((1, 1), 2048, 2048, 64, "none", 9)
    peaks = {}

    def measure(kernel):
        with kiln.backends.sdpa_kernel([kernel]), kiln.backends.settings(threads=1):
            kiln.backends.allocator.reset_counts()
            before = kiln.backends.allocator.counts()["live_bytes"]
            kiln.functional.scaled_dot_product_attention(q, k, v)
            peaks[kernel] = kiln.backends.allocator.counts()["peak_live_bytes"] - before

    previous = kiln.backends.allocator.name()
    kiln.backends.allocator.use("counting")
    try:
        for kernel in ("math", "flash"):
            thread = threading.Thread(target=measure, args=(kernel,))
            thread.start()
            thread.join()
    finally:
        kiln.backends.allocator.use(previous)
    scores = 2048 * 2048 * 4
    output = 2048 * 64 * 4
    assert peaks["math"] >= scores, peaks
    # A block of scores, K^T and V packed (O(L x E)) and the output: 1.9 MiB here, not L x L.
    assert output <= peaks["flash"] < scores / 4, peaks


# ---- selection API ---------------------------------------------------------------------------------


def test_sdpa_kernel_orders_filters_and_restores(kiln):
    b = kiln.backends
    assert b.sdpa_kernels == ["onednn", "flash", "math"]
    with b.sdpa_kernel([b.SDPBackend.MATH, b.SDPBackend.FLASH]):
        assert b.sdpa_kernels == ["flash", "math"]  # the default order among them
        with b.sdpa_kernel([b.SDPBackend.MATH, b.SDPBackend.FLASH], set_priority=True):
            assert b.sdpa_kernels == ["math", "flash"]
        assert b.sdpa_kernels == ["flash", "math"]
    assert b.sdpa_kernels == ["onednn", "flash", "math"]
    with pytest.raises(ValueError, match="unknown attention kernel 'fast'"):
        b.sdpa_kernel(["fast"])
    with pytest.raises(ValueError, match="listed twice"):
        b.sdpa_kernel(["math", "math"])
    with pytest.raises(TypeError, match="expects a list of"):
        b.settings(sdpa_kernels=[""])
    b.sdpa_kernels = ["math"]  # the global list, as every global row
    try:
        assert b.sdpa_kernels == ["math"]
    finally:
        b.sdpa_kernels = ["onednn", "flash", "math"]


def test_enable_flash_sdp_is_a_global_row_of_the_same_setting(kiln):
    b = kiln.backends
    try:
        b.enable_flash_sdp(False)
        assert not b.flash_sdp_enabled() and b.math_sdp_enabled() and b.onednn_sdp_enabled()
        assert b.current()["sdpa_kernels"] == ["onednn", "math"]
        b.enable_flash_sdp(True)
        assert b.current()["sdpa_kernels"] == ["onednn", "flash", "math"]
        b.enable_onednn_sdp(False)
        b.enable_onednn_sdp(True)  # back at its default place
        assert b.current()["sdpa_kernels"] == ["onednn", "flash", "math"]
    finally:
        b.set_settings(sdpa_kernels=["onednn", "flash", "math"])


def test_can_use_with_debug_gives_the_reasons(kiln):
    b = kiln.backends
    q = np.zeros((2, 16, 32), np.float32)
    causal = b.SDPAParams(q, q, q, is_causal=True)
    assert b.can_use_flash(causal) and b.can_use_math(causal)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not b.can_use_onednn(causal, debug=True)
    assert any("is_causal is not supported" in str(w.message) for w in caught)
    with b.settings(deterministic=True):
        assert "deterministic mode" in b.why_not("onednn", b.SDPAParams(q, q, q))[0]
    boolean = b.SDPAParams((2, 16, 32), (2, 16, 32), (2, 16, 32), attn_mask=(16, 16), mask_dtype="bool")
    assert "boolean masks are not supported" in b.why_not("onednn", boolean)[0]
    wrong = b.SDPAParams((2, 16, 32), (2, 16, 8), (2, 16, 32))
    assert "has width 8" in b.why_not("flash", wrong)[0]
    f64 = b.SDPAParams(q.astype(np.float64), q, q)
    assert "must be float32" in b.why_not("math", f64)[0]


def test_no_listed_kernel_can_is_an_error_naming_each_reason(kiln):
    q = np.zeros((2, 16, 32), np.float32)
    with kiln.backends.sdpa_kernel(["onednn"]):
        with pytest.raises(NotImplementedError, match="onednn: is_causal is not supported"):
            kiln.functional.scaled_dot_product_attention(q, q, q, is_causal=True)


# ---- fusion of exported models -----------------------------------------------------------------------

E, HEADS, L, BATCH = 32, 4, 12, 2


class Attention(nn.Module):
    """nn.MultiheadAttention self-attention in the forms PyTorch 1.13 exports differently."""

    def __init__(self, form):
        super().__init__()
        self.form = form
        self.mha = nn.MultiheadAttention(E, HEADS, batch_first=form != "sequence_first")
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(L))

    def forward(self, x, mask):
        if self.form == "float_mask":
            return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]
        if self.form == "bool_mask":
            return self.mha(x, x, x, attn_mask=mask > 0, need_weights=False)[0]
        if self.form == "causal":
            return self.mha(x, x, x, attn_mask=self.causal, need_weights=False)[0] + 0 * mask.sum()
        if self.form == "key_padding":
            return self.mha(x, x, x, key_padding_mask=mask[:, :L] > 0, need_weights=False)[0]
        return self.mha(x, x, x, need_weights=False)[0] + 0 * mask.sum()


class HandWritten(nn.Module):
    """Attention written out on [B, H, L, d]: the scale after the product, masked_fill with -inf."""

    def forward(self, q, mask):
        k, v = q.flip(-1), q * 0.5
        scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]))
        scores = scores.masked_fill(mask > 0, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def export(module, inputs, path, opset):
    with torch.enable_grad():
        torch.onnx.export(module.eval(), inputs, str(path), opset_version=opset, input_names=["x", "mask"],
                          output_names=["y"])


FORMS = ["no_mask", "sequence_first", "float_mask", "bool_mask", "causal", "key_padding"]


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("form", FORMS)
def test_exported_multihead_attention_is_one_step_per_layer(kiln, tmp_path, form, opset):
    torch.manual_seed(0)
    module = Attention(form)
    x = torch.randn((L, BATCH, E) if form == "sequence_first" else (BATCH, L, E))
    if form == "key_padding":
        mask = torch.zeros(BATCH, L + 1)
        mask[0, L - 3:L] = 1  # the last keys of the first sequence are padding
    elif form == "bool_mask":
        mask = torch.from_numpy(np.triu(np.ones((L, L), np.float32), 1) * (np.arange(L) % 2 == 0))
    else:
        mask = torch.randn(L, L) * 2
    path = tmp_path / f"{form}_{opset}.onnx"
    export(module, (x, mask), path, opset)
    with torch.no_grad():
        expected = module(x, mask).numpy()
    inputs = {"x": x.numpy(), "mask": mask.numpy()}
    for kernel in KERNELS:
        with kiln.backends.sdpa_kernel(list(dict.fromkeys([kernel, "math"])), set_priority=True):
            session = kiln.Session(str(path))
            steps = session.explain(inputs)
            attention = [s for s in steps if s["op"] == "ScaledDotProductAttention"]
            assert len(attention) == 1, [s["op"] for s in steps]
            assert not any(s["op"] == "Softmax" for s in steps)
            chosen = attention[0]["kernel"]
            if kernel == "onednn" and form == "causal":
                # The constant causal mask becomes is_causal, which oneDNN refuses: the next kernel runs
                # it and the plan says why. (MHA turns boolean masks into additive ones before the
                # product, so oneDNN takes those.)
                assert "math" in chosen and attention[0]["refusals"], attention[0]
            else:
                assert kernel in chosen, attention[0]
            actual = session.run(inputs)["y"]
        assert relative_error(actual, expected) <= 1e-5, (kernel, chosen)


@pytest.mark.parametrize("opset", [13, 17])
def test_hand_written_attention_with_scale_after_and_masked_fill(kiln, tmp_path, opset):
    module = HandWritten()
    q = torch.randn(BATCH, HEADS, L, 8)
    mask = torch.from_numpy(np.triu(np.ones((L, L), np.float32), 1))
    path = tmp_path / f"hand_{opset}.onnx"
    export(module, (q, mask), path, opset)
    inputs = {"x": q.numpy(), "mask": mask.numpy()}
    session = kiln.Session(str(path))
    attention = [s for s in session.explain(inputs) if s["op"] == "ScaledDotProductAttention"]
    assert len(attention) == 1
    assert relative_error(session.run(inputs)["y"], module(q, mask).numpy()) <= 1e-5


def test_the_encoder_model_fuses_every_layer_and_none_leaves_it_unfused(kiln, model_cache):
    import export_models
    path = export_models.cached_export("transformer", model_cache, opset=17)
    x = np.random.default_rng(0).standard_normal((1, 128, 256), dtype=np.float32)
    fused = kiln.Session(str(path))
    steps = fused.explain({"input": x})
    assert sum(s["op"] == "ScaledDotProductAttention" for s in steps) == 4
    with kiln.backends.sdpa_kernel([]):
        unfused = kiln.Session(str(path))
        unfused_steps = unfused.explain({"input": x})
        assert sum(s["op"] == "Softmax" for s in unfused_steps) == 4
        expected = unfused.run({"input": x})["output"]
    assert len(steps) < len(unfused_steps)
    assert relative_error(fused.run({"input": x})["output"], expected) <= 1e-5

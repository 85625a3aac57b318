"""kiln.functional: kiln's kernels called directly on numpy arrays, outside a model.

    out = kiln.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False)

The kernel is chosen as a plan chooses it: the first of this thread's sdpa_kernels setting that can
take the call (kiln.backends.sdpa_kernel(...) narrows it), on this thread's thread count.
"""
from kiln import _kiln


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None,
                                 return_kernel=False):
    """softmax(scale * query @ key^T + mask) @ value over the last two dims (leading dims equal):
    query [..., L, E], key [..., S, E], value [..., S, Ev] (float32). attn_mask broadcasts to
    [..., L, S]: float32 is added to the scores, bool keeps the keys where it is True. is_causal masks
    key j > query i. scale defaults to 1 / sqrt(E). With return_kernel, returns (output, the name of
    the kernel that ran)."""
    output, kernel = _kiln.backends.sdpa_attention(query, key, value, attn_mask, bool(is_causal), scale)
    return (output, kernel) if return_kernel else output

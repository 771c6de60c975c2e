"""Reference decode attention in plain torch and float64: what every kernel is checked against."""

from __future__ import annotations

import math

import torch

from kvtune.kernels.paged import PagedKVCache


def decode_reference(q: torch.Tensor, cache: PagedKVCache, *, sm_scale: float | None = None,
                     device=None) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v per request and query head, computed in float64.

    q: [B, num_qo_heads, head_dim] (any float dtype). sm_scale: defaults to 1/sqrt(head_dim).
    An fp8 cache is read dequantised (page element x k_scale / v_scale, exact in float64), so
    the reference is of the values the kernel is meant to compute on.
    device: where to compute (default: the cache's device). Query head h reads KV head
    h // (num_qo_heads / num_kv_heads). Returns float64 [B, num_qo_heads, head_dim] on `device`.
    """
    shape = cache.shape
    _check_queries(q, cache)
    scale = 1.0 / math.sqrt(shape.head_dim) if sm_scale is None else float(sm_scale)
    device = cache.device if device is None else torch.device(device)
    g = shape.group_size
    q64 = q.to(device=device, dtype=torch.float64)
    out = torch.empty_like(q64)
    for b in range(cache.batch_size):
        k, v = cache.request_kv(b, dtype=torch.float64)
        k = k.to(device=device)  # [L, H_kv, D]
        v = v.to(device=device)
        qb = q64[b].reshape(shape.num_kv_heads, g, shape.head_dim)  # [H_kv, G, D]
        scores = torch.einsum("kgd,lkd->kgl", qb, k) * scale
        weights = torch.softmax(scores, dim=-1)
        out[b] = torch.einsum("kgl,lkd->kgd", weights, v).reshape(-1, shape.head_dim)
    return out


def attention_reference(q: torch.Tensor, cache: PagedKVCache, q_lens, *,
                        sm_scale: float | None = None, device=None) -> torch.Tensor:
    """Hybrid-batch attention in float64: causal inside each request's new tokens.

    q: [sum(q_lens), num_qo_heads, head_dim], requests in batch order. q_lens: [B] new tokens per
    request (1..kv_len; the cache's kv_lens include them). Query i of a request with q_len Q and
    kv_len L attends keys 0 .. L - Q + i. Returns float64 like q on `device`.
    """
    import numpy as np

    shape = cache.shape
    q_lens = np.asarray(q_lens, dtype=np.int64)
    if q_lens.shape != (cache.batch_size,) or (q_lens < 1).any() or (q_lens > cache.kv_lens).any():
        raise ValueError("q_lens: need one q_len in 1..kv_len per request of the cache")
    want = (int(q_lens.sum()), shape.num_qo_heads, shape.head_dim)
    if tuple(q.shape) != want:
        raise ValueError(f"q: shape {tuple(q.shape)} != {want} (sum(q_lens), num_qo_heads, "
                         "head_dim)")
    scale = 1.0 / math.sqrt(shape.head_dim) if sm_scale is None else float(sm_scale)
    device = cache.device if device is None else torch.device(device)
    g = shape.group_size
    q64 = q.to(device=device, dtype=torch.float64)
    out = torch.empty_like(q64)
    row = 0
    for b in range(cache.batch_size):
        n, L = int(q_lens[b]), int(cache.kv_lens[b])
        k, v = cache.request_kv(b)
        k = k.to(device=device, dtype=torch.float64)
        v = v.to(device=device, dtype=torch.float64)
        # Query tokens in chunks so the float64 scores stay near 256 MB (a 16K chunk of a long
        # prefill would otherwise need tens of GB).
        step = max(1, (32 << 20) // (shape.num_qo_heads * L))
        keys = torch.arange(L, device=device)[None, None, None, :]
        for t0 in range(0, n, step):
            t1 = min(n, t0 + step)
            qb = q64[row + t0:row + t1].reshape(t1 - t0, shape.num_kv_heads, g, shape.head_dim)
            scores = torch.einsum("tkgd,lkd->tkgl", qb, k) * scale
            last = (L - n + torch.arange(t0, t1, device=device))[:, None, None, None]
            scores = scores.masked_fill(keys > last, float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            out[row + t0:row + t1] = torch.einsum("tkgl,lkd->tkgd", weights, v).reshape(
                t1 - t0, -1, shape.head_dim)
        row += n
    return out


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (Frobenius norms); NaN anywhere in `out` gives NaN."""
    diff = out.to(device=ref.device, dtype=torch.float64) - ref.to(torch.float64)
    return float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref.to(torch.float64)))


def judge_output(out: torch.Tensor, ref: torch.Tensor, bound: float) -> tuple[bool, float, str]:
    """(ok, relative error, one-line message) of a decode output against its reference.

    ok needs every element written (an output poisoned with NaN before the run shows unwritten
    elements as NaN) and the relative error (see relative_error) at most `bound`.
    """
    unwritten = int(torch.isnan(out).sum())
    err = relative_error(out, ref)
    ok = unwritten == 0 and math.isfinite(err) and err <= bound
    if unwritten:
        msg = f"{unwritten} output values NaN (unwritten or invalid)"
    elif not ok:
        msg = f"rel error {err:.3e} above bound {bound:g}"
    else:
        msg = f"rel error {err:.3e} <= {bound:g}"
    return ok, err, msg


def _check_queries(q: torch.Tensor, cache: PagedKVCache) -> None:
    s = cache.shape
    want = (cache.batch_size, s.num_qo_heads, s.head_dim)
    if tuple(q.shape) != want:
        raise ValueError(f"q: shape {tuple(q.shape)} != {want} (batch, num_qo_heads, head_dim)")


__all__ = ["attention_reference", "decode_reference", "judge_output", "relative_error"]

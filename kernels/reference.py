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


__all__ = ["decode_reference", "judge_output", "relative_error"]

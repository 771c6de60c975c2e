"""Helpers of the kernel tests: fresh inputs, poisoned outputs, error against the reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvtune.kernels import decode as decode_module
from kvtune.kernels.paged import PagedKVCache, make_queries
from kvtune.kernels.reference import decode_reference, relative_error

BOUNDS = {torch.bfloat16: 2e-2, torch.float16: 2e-2, torch.float32: 1e-5}

if not decode_module.INTERPRETED:  # pragma: no cover - only on a GPU machine with an early import
    pytest.skip("kvtune.kernels.decode was built without TRITON_INTERPRET=1", allow_module_level=True)

_seed_counter = iter(range(10_000, 1_000_000))


def fresh_seed() -> int:
    """A new seed per call: every test draws inputs it has not used before (deterministically)."""
    return next(_seed_counter)


def make_inputs(kv_lens, shape, dtype, seed=None):
    """Cache (unused tail slots set to NaN, so reading past kv_len shows up) and queries."""
    seed = fresh_seed() if seed is None else seed
    cache = PagedKVCache.from_lengths(np.asarray(kv_lens), shape, device="cpu", dtype=dtype,
                                      seed=seed)
    cache.fill_unused_slots(float("nan"))
    q = make_queries(len(kv_lens), shape, device="cpu", dtype=dtype, seed=seed)
    return cache, q


def run_poisoned(q, cache, plan, config=None):
    """Decode into an output filled with NaN, so any element left unwritten stays NaN."""
    launch = decode_module.prepare_decode(plan, cache, config=config)
    out = torch.full_like(q, float("nan"))
    decode_module.run_decode(launch, q, cache, out=out)
    return out, launch


def check_against_reference(q, cache, plan, config=None):
    """Assert the plan's output is fully written and within the dtype's error bound."""
    out, launch = run_poisoned(q, cache, plan, config)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert not torch.isnan(out).any(), "output has unwritten (NaN) elements"
    err = relative_error(out, decode_reference(q, cache))
    assert err <= BOUNDS[q.dtype], f"rel error {err:.3e} above {BOUNDS[q.dtype]:g}"
    return out, launch


def small_inside_large(kv_small, kv_large, shape, dtype):
    """The batch-invariance tests' pair: (small cache, its queries, large cache, its queries),
    the large batch's first len(kv_small) requests holding the small one's pages and queries."""
    cache_s, _ = make_inputs(kv_small, shape, dtype)
    cache_l, q_l = make_inputs(kv_large, shape, dtype)
    copy_shared_requests(cache_s, cache_l, len(kv_small))
    return cache_s, q_l[: len(kv_small)].clone(), cache_l, q_l


def copy_shared_requests(cache_small, cache_large, count: int) -> None:
    """Give the first `count` requests of cache_large the K/V pages of cache_small's (same
    values, other page ids): the batch-invariance tests' small batch inside a large one."""
    for b in range(count):
        pl, ps = cache_large.request_pages(b), cache_small.request_pages(b)
        cache_large.k_pages[pl] = cache_small.k_pages[ps]
        cache_large.v_pages[pl] = cache_small.v_pages[ps]

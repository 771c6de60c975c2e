"""FP8 (e4m3) KV caches: the cache, the Triton kernel in the interpreter, and bad input.

The kernel widens e4m3 to the query type exactly and applies the scales in float32, so against
the float64 reference of the *dequantised* cache its only rounding is that of the softmax weights
to the query type before the P.V product (and of the output). The bound below is derived from
that rounding: |p~ - p| <= u p per weight, hence |o~ - o| <= u (sum_j w_j |v_j| + |o|) per
element (w: the softmax weights, u: the query type's unit roundoff), which is far tighter than
e4m3's own rounding (u = 2^-4). The second test shows that difference: against the reference of
the values before quantisation the same output is off by the fp8 rounding.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from kvtune.kernels import policies
from kvtune.kernels.decode import decode, run_decode, prepare_decode
from kvtune.kernels.paged import PagedKVCache, make_queries, quantize_e4m3
from kvtune.kernels.plan import AttentionShape, DeviceSpec, build_plan
from kvtune.kernels.reference import decode_reference, relative_error
from tests.kernels.kernel_cases import fresh_seed, run_poisoned

FP8 = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4, kv_dtype="fp8_e4m3")
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-9, torch.float16: 2.0**-11}
E4M3_UNIT_ROUNDOFF = 2.0**-4
TINY_GPU = DeviceSpec("tiny", sm_count=4, l2_bytes=1 << 20, hbm_bytes_per_s=1e12, max_ctas_per_sm=2)


def rounding_bound(q, cache, ref, unit_roundoff: float) -> float:
    """||o~ - o|| / ||o|| allowed by rounding the softmax weights and the output to the query
    type: u (||W |V| || + ||O||) / ||O||, with W and |V| in float64 (see the module docstring).
    fp16's subnormal weights (below 2^-14) add at most 2^-25 absolute each, counted too."""
    shape = cache.shape
    g = shape.group_size
    spread = torch.empty_like(ref)
    tail = torch.empty_like(ref)
    for b in range(cache.batch_size):
        k, v = cache.request_kv(b, dtype=torch.float64)
        qb = q[b].to(torch.float64).reshape(shape.num_kv_heads, g, shape.head_dim)
        w = torch.softmax(torch.einsum("kgd,lkd->kgl", qb, k) / math.sqrt(shape.head_dim), -1)
        spread[b] = torch.einsum("kgl,lkd->kgd", w, v.abs()).reshape(-1, shape.head_dim)
        tail[b] = v.abs().sum(0).repeat_interleave(g, 0)
    norm = torch.linalg.vector_norm
    subnormal = 2.0**-25 * float(norm(tail)) if q.dtype == torch.float16 else 0.0
    return (unit_roundoff * (float(norm(spread)) + float(norm(ref))) + subnormal) / float(norm(ref))


def fp8_inputs(kv_lens, dtype, shape=FP8, **scales):
    seed = fresh_seed()
    cache = PagedKVCache.from_lengths(np.asarray(kv_lens), shape, dtype=dtype, seed=seed, **scales)
    cache.fill_unused_slots(float("nan"))  # e4m3fn has a NaN: reading past kv_len shows
    return cache, make_queries(len(kv_lens), shape, dtype=dtype, seed=seed)


def test_fp8_cache_holds_e4m3_pages_per_tensor_scales_and_dequantises():
    kv = [5, 9]
    cache = PagedKVCache.from_lengths(kv, FP8, dtype=torch.bfloat16, seed=3)
    assert cache.k_pages.dtype == torch.float8_e4m3fn and cache.is_fp8
    assert cache.dtype == torch.bfloat16  # the queries' type
    assert cache.nbytes == 2 * cache.k_pages.numel()  # one byte per element
    # Default scale: the largest magnitude lands on e4m3's largest value (448).
    assert float(cache.k_pages.float().abs().max()) == 448.0
    k, v = cache.request_kv(1, dtype=torch.float64)
    raw = cache.k_pages[cache.request_pages(1)].reshape(-1, 2, 64)[:9].to(torch.float64)
    assert torch.equal(k, raw * cache.k_scale)
    assert FP8.kv_bytes_per_token_per_head == 2 * 64
    given = PagedKVCache.from_lengths(kv, FP8, seed=3, k_scale=0.5, v_scale=0.25)
    assert (given.k_scale, given.v_scale) == (0.5, 0.25)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_kernel_on_fp8_matches_the_dequantised_reference_within_query_rounding(dtype):
    kv = [1, 13, 30]
    cache, q = fp8_inputs(kv, dtype)
    plan = build_plan(kv, 8, num_kv_heads=2, page_size=4)  # split and unsplit requests
    out, _ = run_poisoned(q, cache, plan)
    assert not torch.isnan(out).any()
    ref = decode_reference(q, cache)
    err = relative_error(out, ref)
    bound = 1e-5 if dtype == torch.float32 else rounding_bound(q, cache, ref, UNIT_ROUNDOFF[dtype])
    assert err <= bound, f"rel error {err:.3e} above the rounding bound {bound:.3e}"
    assert bound < E4M3_UNIT_ROUNDOFF / 4  # tighter than fp8's own rounding


def test_fp8_rounding_shows_against_the_values_before_quantisation():
    kv = [17, 6]
    shape32 = dataclasses.replace(FP8, kv_dtype="bf16")
    exact = PagedKVCache.from_lengths(kv, shape32, dtype=torch.float32, seed=fresh_seed())
    k8, ks = quantize_e4m3(exact.k_pages)
    v8, vs = quantize_e4m3(exact.v_pages)
    cache = dataclasses.replace(exact, shape=FP8, k_pages=k8, v_pages=v8,
                                query_dtype=torch.bfloat16, k_scale=ks, v_scale=vs)
    q = make_queries(2, FP8, seed=5)
    out = decode(q, cache, build_plan(kv, 8, num_kv_heads=2, page_size=4))
    to_dequantised = relative_error(out, decode_reference(q, cache))
    to_exact = relative_error(out, decode_reference(q, exact))
    # The quantisation error is e4m3-sized (a few percent, at most its unit roundoff), and the
    # kernel's own error is well below it: it computes on the e4m3 values, not on others.
    assert 4 * to_dequantised < to_exact < E4M3_UNIT_ROUNDOFF


def test_fixed_split_is_batch_invariant_with_fp8():
    policy = policies.get("fixed-split", chunk_tokens=8)
    scales = {"k_scale": 0.01, "v_scale": 0.02}  # fixed per layer, as a serving engine keeps them
    kv_small = [21, 3]
    kv_large = kv_small + [30, 9]
    cache_s, _ = fp8_inputs(kv_small, torch.bfloat16, **scales)
    cache_l, q_l = fp8_inputs(kv_large, torch.bfloat16, **scales)
    for b in range(len(kv_small)):
        pl, ps = cache_l.request_pages(b), cache_s.request_pages(b)
        cache_l.k_pages[pl] = cache_s.k_pages[ps]
        cache_l.v_pages[pl] = cache_s.v_pages[ps]
    q_s = q_l[: len(kv_small)].clone()
    out_s = decode(q_s, cache_s, policy.plan(np.array(kv_small), FP8, TINY_GPU))
    out_l = decode(q_l, cache_l, policy.plan(np.array(kv_large), FP8, TINY_GPU))
    assert torch.equal(out_s, out_l[: len(kv_small)])


def test_bad_fp8_input_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="kv_dtype: 'fp8_e5m2' not allowed"):
        AttentionShape(kv_dtype="fp8_e5m2")
    with pytest.raises(ValueError, match="dtype: 'fp8_e4m3' not allowed for queries"):
        AttentionShape(dtype="fp8_e4m3")
    with pytest.raises(ValueError, match="kv_dtype: 'fp16' with dtype 'bf16'"):
        AttentionShape(dtype="bf16", kv_dtype="fp16")
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="k_scale"):
            PagedKVCache.from_lengths([4], FP8, k_scale=bad)
    with pytest.raises(ValueError, match="v_scale"):
        PagedKVCache.from_lengths([4], FP8, v_scale=-0.5)
    with pytest.raises(ValueError, match="k_scale: given for a bf16 cache"):
        PagedKVCache.from_lengths([4], dataclasses.replace(FP8, kv_dtype="bf16"), k_scale=1.0)
    cache = PagedKVCache.from_lengths([4], FP8, seed=1)
    with pytest.raises(ValueError, match="k_scale"):
        dataclasses.replace(cache, k_scale=float("nan"))
    with pytest.raises(ValueError, match="query_dtype"):
        dataclasses.replace(cache, query_dtype=torch.float8_e4m3fn)
    fp8_q = make_queries(1, FP8, seed=1).to(torch.float8_e4m3fn)
    launch = prepare_decode(build_plan([4], 4, num_kv_heads=2, page_size=4), cache)
    with pytest.raises(ValueError, match="fp8 queries are not supported"):
        run_decode(launch, fp8_q, cache)

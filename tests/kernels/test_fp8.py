"""FP8 (e4m3) KV caches: the cache, the Triton kernel in the interpreter, and bad input.

With 16-bit queries the kernel runs both products in fp16: e4m3 -> fp16 is exact, bf16 queries
are scaled per row by a power of two into fp16's range (exact for these draws: every element is
within 2^31 of its row's largest), and the scales are applied in float32. Against the float64
reference of the *dequantised* cache the only roundings left are the softmax weights' to fp16
before the P.V product and the output's to the query type. The bound below is derived from them:
|p~ - p| <= u_p p + 2^-25 per weight (fp16: u_p = 2^-11, plus half its subnormal step 2^-24 for
weights below 2^-14), hence |o~ - o| <= u_p sum_j w_j |v_j| + 2^-25 sum_j |v_j| + u_o |o| per
element (w: the softmax weights, u_o: the query type's unit roundoff; the float32 accumulation
adds about 2^-24 relative, far below). It is far tighter than e4m3's own rounding (u = 2^-4). The
second test shows that difference: against the reference of the values before quantisation the
same output is off by the fp8 rounding.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from kvtune.kernels import decode_steps
from kvtune.kernels import policies
from kvtune.kernels.decode import decode, run_decode, prepare_decode
from kvtune.kernels.decode_config import KernelConfig
from kvtune.kernels.paged import PagedKVCache, make_queries, quantize_e4m3
from kvtune.kernels.plan import AttentionShape, DeviceSpec, build_plan
from kvtune.kernels.reference import decode_reference, relative_error
from tests.kernels.kernel_cases import copy_shared_requests, fresh_seed, run_poisoned

FP8 = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4, kv_dtype="fp8_e4m3")
# The output's rounding to the query type: fp16 rounds to nearest (u = 2^-11, 11 significant
# bits). bf16 has 8 significant bits (u = 2^-8 when rounding to nearest, as the GPU does), but
# Triton's interpreter (3.9) truncates float32 -> bf16 (seen: up to 2^-7 relative on randn), so
# under the interpreter one full ulp, 2^-7, is what the output rounding can cost.
from kvtune.kernels.decode import INTERPRETED  # noqa: E402
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-7 if INTERPRETED else 2.0**-8, torch.float16: 2.0**-11}
E4M3_UNIT_ROUNDOFF = 2.0**-4
TINY_GPU = DeviceSpec("tiny", sm_count=4, l2_bytes=1 << 20, hbm_bytes_per_s=1e12, max_ctas_per_sm=2)


def rounding_bound(q, cache, ref, out_roundoff: float, p_roundoff: float = 2.0**-11) -> float:
    """||o~ - o|| / ||o|| allowed by rounding the softmax weights to fp16 and the output to the
    query type: (u_p ||W |V| || + 2^-25 || sum |V| || + u_o ||O||) / ||O||, with W and |V| in
    float64 (see the module docstring); the 2^-25 term is fp16's subnormal weights (below
    2^-14)."""
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
    subnormal = 2.0**-25 * float(norm(tail))
    return (p_roundoff * float(norm(spread)) + subnormal
            + out_roundoff * float(norm(ref))) / float(norm(ref))


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


@pytest.mark.parametrize("factor", [2.0**20, 2.0**-30])
def test_bf16_queries_beyond_fp16_range_stay_exact_on_the_fp8_path(factor):
    # The fp16 products take bf16 queries through a per-row power-of-two scale: queries far above
    # fp16's largest value (65504: inf without the scale) or below its smallest subnormal (2^-24:
    # zero without it) give the same result. k_scale / factor keeps the scores themselves as in
    # an ordinary batch, so the bound is the usual one.
    kv = [11, 26]
    cache, q = fp8_inputs(kv, torch.bfloat16)
    cache = dataclasses.replace(cache, k_scale=cache.k_scale / factor)
    q = q * factor  # exact in bf16
    out = decode(q, cache, build_plan(kv, 8, num_kv_heads=2, page_size=4))
    ref = decode_reference(q, cache)
    assert torch.isfinite(out).all()
    assert relative_error(out, ref) <= rounding_bound(q, cache, ref, UNIT_ROUNDOFF[torch.bfloat16])


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


def _small_batch_inside_a_large_one(q_dtype):
    """Two e4m3 caches whose first two requests hold the same pages (scales fixed per layer, as
    a serving engine keeps them): (kv_small, kv_large, small cache, large cache, large queries)."""
    scales = {"k_scale": 0.01, "v_scale": 0.02}
    kv_small = [21, 3]
    kv_large = kv_small + [30, 9]
    cache_s, _ = fp8_inputs(kv_small, q_dtype, **scales)
    cache_l, q_l = fp8_inputs(kv_large, q_dtype, **scales)
    copy_shared_requests(cache_s, cache_l, len(kv_small))
    return kv_small, kv_large, cache_s, cache_l, q_l


def test_fixed_split_is_batch_invariant_with_fp8():
    policy = policies.get("fixed-split", chunk_tokens=8)
    kv_small, kv_large, cache_s, cache_l, q_l = _small_batch_inside_a_large_one(torch.bfloat16)
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


def assert_matches_reference_and_plain(head_dim, group, page_size, config, plain, q_dtype):
    """config's fp8 kernel within the rounding bound of the dequantised reference, and bit for
    bit the same as `plain` (the same fp16 values in the same sums) for 1-3 splits per request
    and none."""
    shape = AttentionShape(num_qo_heads=2 * group, num_kv_heads=2, head_dim=head_dim,
                           page_size=page_size, kv_dtype="fp8_e4m3")
    kv = [1, 19, 40]
    cache, q = fp8_inputs(kv, q_dtype, shape=shape)
    ref = decode_reference(q, cache)
    bound = rounding_bound(q, cache, ref, UNIT_ROUNDOFF[q_dtype])
    for chunk in (16, 32, 64):
        plan = build_plan(kv, chunk, num_kv_heads=2, page_size=page_size)
        out, _ = run_poisoned(q, cache, plan, config)
        assert not torch.isnan(out).any()
        err = relative_error(out, ref)
        assert err <= bound, f"chunk {chunk}: rel error {err:.3e} above {bound:.3e}"
        out_plain, _ = run_poisoned(q, cache, plan, plain)
        assert torch.equal(out, out_plain), f"chunk {chunk}: differs from {plain.label()}"


# --- fp8 V widened before the product (KernelConfig.v_widen, label -vw) ---------------------


@triton.jit
def _widen_tile_kernel(src, dst, n_valid, kv_head_off, stride_tok, HEAD_DIM: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    tok = tl.arange(0, BLOCK_N)
    row = tok.to(tl.int64) * stride_tok
    v = decode_steps.load_e4m3_as_f16(src, row, tok < n_valid, kv_head_off, HEAD_DIM, BLOCK_N,
                                      False)
    tl.store(dst + tok[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :], v)


def _f16_bits_or_nan(x: torch.Tensor) -> torch.Tensor:
    """fp16 bit patterns, every NaN mapped to one value (NaN payloads are not part of the
    contract: the hardware conversion gives a canonical NaN, torch keeps the sign)."""
    return torch.where(torch.isnan(x), torch.tensor(0x7E00, dtype=torch.int16),
                       x.view(torch.int16))


def assert_tile_kernel_widens_every_code(tile_kernel, head_dim):
    """tile_kernel (src, dst, n_valid, kv_head_off, stride_tok, HEAD_DIM, BLOCK_N) must write the
    [tokens, head_dim] fp16 tile that torch's widening of the same e4m3 bytes gives, element for
    element, including -0, subnormals, 448 and the NaN codes: all 256 codes twice (once
    reversed), two KV heads per token with the second one read (NaN planted in the first: any
    misaddressed byte shows). Masked tokens read +0.0, as the fp8 loads' other=0.0."""
    codes = torch.arange(256, dtype=torch.uint8)
    n_tok = 512 // head_dim
    head1 = torch.cat([codes, codes.flip(0)]).reshape(n_tok, head_dim)
    pool = torch.zeros(n_tok, 2, head_dim, dtype=torch.uint8)
    pool[:, 0] = 0x7F
    pool[:, 1] = head1
    pool = pool.view(torch.float8_e4m3fn)
    want = pool[:, 1].to(torch.float16)
    out = torch.full((n_tok, head_dim), 3.0, dtype=torch.float16)
    tile_kernel[(1,)](pool, out, n_tok, head_dim, 2 * head_dim, HEAD_DIM=head_dim, BLOCK_N=n_tok)
    assert torch.equal(_f16_bits_or_nan(out), _f16_bits_or_nan(want))
    assert int(torch.isnan(out).sum()) == 4  # 0x7F and 0xFF, each twice
    masked = torch.full_like(out, 3.0)
    tile_kernel[(1,)](pool, masked, 1, head_dim, 2 * head_dim, HEAD_DIM=head_dim, BLOCK_N=n_tok)
    assert torch.equal(_f16_bits_or_nan(masked[:1]), _f16_bits_or_nan(want[:1]))
    assert torch.equal(masked[1:].view(torch.int16), torch.zeros_like(masked[1:], dtype=torch.int16))


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_widened_v_tile_is_torchs_e4m3_to_fp16_on_all_256_codes(head_dim):
    # The interpreter branch of _load_e4m3_as_f16: int32 words of 4 codes, byte k of word j is
    # element 4j + k; the rebuilt [tokens, head_dim] fp16 tile must be torch's widening of the
    # same bytes, element for element, including -0, subnormals, 448 and the NaN codes. Two
    # KV heads per token and the second one read: the int32 offset arithmetic is checked too.
    assert_tile_kernel_widens_every_code(_widen_tile_kernel, head_dim)


# (head_dim, G, page size, config): every loop variant of _attend_kernel (plain, page ids ahead,
# register prefetch) with the widened V, G from 1 to 16, token-granular and 16-token pages.
WIDE_CASES = [
    (64, 1, 1, KernelConfig(16, 4, 3, page_ahead=True, v_widen=True)),
    (64, 16, 16, KernelConfig(32, 4, 2, v_widen=True)),
    (128, 3, 16, KernelConfig(16, 4, 3, page_ahead=True, v_widen=True)),
    (128, 8, 1, KernelConfig(16, 4, 2, v_widen=True)),
    (128, 16, 16, KernelConfig(16, 4, 1, prefetch=True, v_widen=True)),
    (256, 2, 16, KernelConfig(16, 4, 3, page_ahead=True, v_widen=True)),
    (256, 5, 1, KernelConfig(16, 4, 1, prefetch=True, v_widen=True)),
]


@pytest.mark.parametrize("head_dim,group,page_size,config", WIDE_CASES,
                         ids=lambda c: c.label() if isinstance(c, KernelConfig) else str(c))
def test_widened_v_matches_the_dequantised_reference_and_the_plain_fp8_path(head_dim, group,
                                                                           page_size, config):
    # The widened tile holds the same fp16 values as the plain path's cast, so the whole
    # computation is the same: bit for bit in the interpreter.
    assert_matches_reference_and_plain(head_dim, group, page_size, config,
                                       dataclasses.replace(config, v_widen=False), torch.bfloat16)


@pytest.mark.parametrize("flag,q_dtype,dtype16", [("v_widen", torch.float16, "bf16"),
                                                   ("v_pairs", torch.bfloat16, "fp16")])
def test_fp8_v_variants_are_batch_invariant_and_ignored_for_16_bit_caches(flag, q_dtype, dtype16):
    # -vw and -vp: the first requests of two batches give the same bits; a 16-bit cache takes
    # the 16-bit path whatever the flag says.
    config = KernelConfig(16, 4, 3, page_ahead=True, **{flag: True})
    kv_small, kv_large, cache_s, cache_l, q_l = _small_batch_inside_a_large_one(q_dtype)
    plan_s = build_plan(kv_small, 8, num_kv_heads=2, page_size=4)
    plan_l = build_plan(kv_large, 8, num_kv_heads=2, page_size=4)
    out_s = decode(q_l[: len(kv_small)].clone(), cache_s, plan_s, config=config)
    out_l = decode(q_l, cache_l, plan_l, config=config)
    assert torch.equal(out_s, out_l[: len(kv_small)])
    shape16 = dataclasses.replace(FP8, dtype=dtype16, kv_dtype=dtype16)
    torch16 = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype16]
    cache16 = PagedKVCache.from_lengths(kv_small, shape16, dtype=torch16, seed=fresh_seed())
    q16 = make_queries(2, shape16, dtype=torch16, seed=fresh_seed())
    assert torch.equal(decode(q16, cache16, plan_s, config=config),
                       decode(q16, cache16, plan_s,
                              config=dataclasses.replace(config, **{flag: False})))


def _v_pages_one_byte_off(cache):
    """The cache with its V pages one byte further into a larger buffer (contiguous, but off
    every 2- and 4-byte boundary)."""
    flat = torch.empty(cache.v_pages.numel() + 1, dtype=cache.v_pages.dtype)
    shifted = flat[1:].view(cache.v_pages.shape)
    shifted.copy_(cache.v_pages)
    return dataclasses.replace(cache, v_pages=shifted)


def _misaligned_v_inputs():
    """(plan, fp8 cache, the same cache with its V pages one byte off) for the refusal tests."""
    cache, _ = fp8_inputs([5, 9], torch.bfloat16)
    plan = build_plan([5, 9], 8, num_kv_heads=2, page_size=4)
    return plan, cache, _v_pages_one_byte_off(cache)


@pytest.mark.parametrize("flag, label, word", [("v_widen", "bn16-w4-s3-pa-vw", "int32"),
                                               ("v_pairs", "bn16-w4-s3-pa-vp", "int16")])
def test_explicit_wide_v_config_refuses_v_pages_off_its_boundary(flag, label, word):
    plan, _, moved = _misaligned_v_inputs()
    config = KernelConfig(16, 4, 3, page_ahead=True, **{flag: True})
    with pytest.raises(ValueError, match=f"config.{flag}: {label} reads V as {word}"):
        prepare_decode(plan, moved, config=config)
    prepare_decode(plan, moved, config=dataclasses.replace(config, **{flag: False}))  # plain: fine


# --- fp8 V read as element pairs (KernelConfig.v_pairs, label -vp) ----------------------------


@triton.jit
def _pairs_tile_kernel(src, dst, n_valid, kv_head_off, stride_tok, HEAD_DIM: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    tok = tl.arange(0, BLOCK_N)
    row = tok.to(tl.int64) * stride_tok
    pairs = decode_steps.load_e4m3_pairs(src, row, tok < n_valid, kv_head_off, HEAD_DIM)
    even, odd = decode_steps.e4m3_pairs_to_f16(pairs, False)
    tile = tl.reshape(tl.join(even, odd), (BLOCK_N, HEAD_DIM))  # the kernel's interleave
    tl.store(dst + tok[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :], tile)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_v_pairs_split_and_interleave_are_torchs_e4m3_to_fp16_on_all_256_codes(head_dim):
    # The interpreter branch of the pair split, and the join/reshape the kernel uses to put the
    # even and odd columns back: low byte of int16 j is element 2j, high byte element 2j + 1.
    # All 256 codes at both byte positions (the second copy is reversed), the second KV head
    # read (the int16 offset arithmetic), NaN planted in the head not read.
    assert_tile_kernel_widens_every_code(_pairs_tile_kernel, head_dim)


# (head_dim, G, page size, config, query type): the page-ahead loop with V pairs, G 1..16,
# token-granular and 16-token pages, both query types of the fp16-product path.
PAIR_CASES = [
    (64, 1, 1, KernelConfig(16, 4, 3, page_ahead=True, v_pairs=True), torch.bfloat16),
    (64, 16, 16, KernelConfig(32, 4, 2, page_ahead=True, v_pairs=True), torch.float16),
    (128, 3, 16, KernelConfig(16, 4, 3, page_ahead=True, v_pairs=True), torch.bfloat16),
    (128, 8, 1, KernelConfig(32, 4, 4, page_ahead=True, v_pairs=True), torch.float16),
    (256, 5, 16, KernelConfig(16, 4, 3, page_ahead=True, v_pairs=True), torch.bfloat16),
]


@pytest.mark.parametrize("head_dim,group,page_size,config,q_dtype", PAIR_CASES,
                         ids=lambda c: c.label() if isinstance(c, KernelConfig) else str(c))
def test_v_pairs_match_the_dequantised_reference_and_the_plain_fp8_path(head_dim, group,
                                                                       page_size, config, q_dtype):
    # Each output column is the same sum over the same tokens of the same fp16 products as on
    # the plain path (only the columns' grouping into products differs).
    assert_matches_reference_and_plain(head_dim, group, page_size, config,
                                       dataclasses.replace(config, v_pairs=False), q_dtype)


def test_v_pairs_config_rules_and_the_tables_fallback_on_odd_v_pages():
    assert KernelConfig.from_label("bn128-w4-s3-pa-vp") == KernelConfig(128, 4, 3, page_ahead=True,
                                                                         v_pairs=True)
    assert KernelConfig(64, 4, 4, page_ahead=True, v_pairs=True).label() == "bn64-w4-s4-pa-vp"
    for bad in ({"page_ahead": False}, {"prefetch": True}, {"v_widen": True},
                {"warp_split": 2}):
        with pytest.raises(ValueError, match="v_pairs: allowed only with page_ahead"):
            KernelConfig(64, 4, 3, **{"page_ahead": True, **bad}, v_pairs=True)
    plan, cache, moved = _misaligned_v_inputs()
    # The table's entry is -vp: without an explicit config the same misaligned pages run its
    # plain loop instead of failing (and aligned pages keep -vp).
    assert prepare_decode(plan, cache).config.v_pairs
    fallback = prepare_decode(plan, moved)
    assert not fallback.config.v_pairs and fallback.config.page_ahead

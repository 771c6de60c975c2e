"""Pinned worked examples for every split policy, computed by hand in the comments.

Unless a test says otherwise: 132 SMs (8 CTAs per SM), the default shape (32 query heads, 8 KV
heads so G = 4, head_dim 128, page 16, bf16). pages(L) = ceil(L / 16).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape, DeviceSpec, Plan, SplitParams

SM132 = DeviceSpec(
    "sm132", sm_count=132, l2_bytes=50 << 20, hbm_bytes_per_s=3.35e12, max_ctas_per_sm=8
)
SHAPE = AttentionShape()  # 32 q heads, 8 KV heads, head_dim 128, page 16, bf16


def skew80(batch: int) -> list[int]:
    """262,144 tokens: 209,715 (80%, rounded down) at index 0, the other 52,429 split evenly, the
    first `remainder` of them one token longer so the sum is exact."""
    long_tokens = 209_715
    base, remainder = divmod(262_144 - long_tokens, batch - 1)
    lens = [long_tokens] + [base + 1] * remainder + [base] * (batch - 1 - remainder)
    assert sum(lens) == 262_144 and len(lens) == batch
    return lens


def pieces(plan: Plan, request: int) -> list[tuple[int, int]]:
    """(kv_start, kv_end) of one request's items, in split order."""
    mask = plan.work_request == request
    order = np.argsort(plan.work_split[mask])
    starts, ends = plan.work_kv_start[mask][order], plan.work_kv_end[mask][order]
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


# --- flashinfer-tensor-core --------------------------------------------------------------------
# max_batch_if_split = 2 * 132 // 8 = 33; G = 4 -> cta_tile_q 16, one q tile per request;
# min chunk = 128 // 16 = 8 pages. Long request: pages(209,715) = 13,108 (13,107.19 rounded up).


def test_tensor_core_skew80_batch32_splits_long_request_in_two():
    # B = 32: others 52,429 / 31 = 1,691 rem 8 -> 1,692 or 1,691 tokens, 106 pages each.
    # Need ceil(13108/c) + 31 * ceil(106/c) <= 33. c < 106 gives >= 62 > 33, so c >= 106 and
    # ceil(13108/c) <= 2 -> c >= 6,554 pages. Long: 2 chunks of 6,554 pages = 104,864 tokens.
    plan = policies.get("flashinfer-tensor-core").plan(skew80(32), SHAPE, SM132)
    assert plan.splits.tolist() == [2] + [1] * 31
    assert pieces(plan, 0) == [(0, 104_864), (104_864, 209_715)]
    assert plan.notes["split_kv"] is True and plan.notes["chunk_pages"] == 6_554
    assert plan.notes["max_batch_if_split"] == 33 and plan.notes["cta_tile_q"] == 16
    assert plan.schedule == "static" and plan.grid_size == 33 * 8 and plan.ctas_per_sm == 2


def test_tensor_core_skew80_batch16_splits_long_request_in_18():
    # B = 16: others 52,429 / 15 = 3,495 rem 4 -> 219 pages each. c >= 219 (else >= 30 + 60),
    # ceil(13108/c) <= 33 - 15 = 18 -> c >= 728.2 -> 729 pages; ceil(13108/729) = 18.
    plan = policies.get("flashinfer-tensor-core").plan(skew80(16), SHAPE, SM132)
    assert plan.splits.tolist() == [18] + [1] * 15
    assert plan.notes["chunk_pages"] == 729


@pytest.mark.parametrize("batch", [33, 34, 48, 256])
def test_tensor_core_skew80_no_split_from_batch33(batch):
    # B = 33: only c = 13,108 (every request one chunk) keeps the count at 33 <= 33; c = max pages
    # means split off. B >= 34: even one chunk each is > 33; the search ends at max pages: off.
    plan = policies.get("flashinfer-tensor-core").plan(skew80(batch), SHAPE, SM132)
    assert plan.splits.tolist() == [1] * batch
    assert plan.notes["split_kv"] is False


def test_tensor_core_fixed_split_size_forces_batch_invariant_chunks():
    # fixed_split_size 128 pages = 2,048 tokens at B = 64: long 209,715 / 2,048 = 102.4 -> 103
    # chunks; others 52,429 / 63 = 832 rem 13 -> 833 or 832 tokens: one chunk each.
    policy = policies.get("flashinfer-tensor-core", fixed_split_size=128)
    plan = policy.plan(skew80(64), SHAPE, SM132)
    assert plan.splits.tolist() == [103] + [1] * 63
    assert pieces(plan, 0)[-1] == (102 * 2048, 209_715)
    assert plan.notes["split_kv"] is True
    # disable_split_kv wins over fixed_split_size, and turns off the searched split too.
    off = policies.get("flashinfer-tensor-core", fixed_split_size=128, disable_split_kv=True)
    assert off.plan(skew80(64), SHAPE, SM132).splits.tolist() == [1] * 64
    off = policies.get("flashinfer-tensor-core", disable_split_kv=True)
    assert off.plan(skew80(32), SHAPE, SM132).splits.tolist() == [1] * 32


@pytest.mark.parametrize(
    ("group", "head_dim", "tile"),
    [
        (1, 128, 16),
        (4, 128, 16),
        (16, 128, 16),
        (17, 128, 64),
        (64, 128, 64),
        (65, 128, 128),
        (65, 256, 64),
        (128, 256, 64),
    ],
)
def test_fa2_cta_tile_q(group, head_dim, tile):
    # FA2DetermineCtaTileQ: > 64 and head_dim < 256 -> 128; > 16 -> 64; else 16.
    assert policies.fa2_cta_tile_q(group, head_dim) == tile


def test_tensor_core_counts_query_tiles():
    # One KV head, one request of 65,536 tokens = 4,096 pages; max_batch_if_split = 264.
    # G = 4: ceil(4096/c) <= 264 -> c >= 15.5 -> 16 pages -> 256 chunks.
    # G = 128, head_dim 256: tile 64, 2 q tiles: 2 * ceil(4096/c) <= 264 -> c = 32 -> 128 chunks.
    small = AttentionShape(num_qo_heads=4, num_kv_heads=1)
    wide = AttentionShape(num_qo_heads=128, num_kv_heads=1, head_dim=256)
    policy = policies.get("flashinfer-tensor-core")
    assert policy.plan([65_536], small, SM132).splits.tolist() == [256]
    plan = policy.plan([65_536], wide, SM132)
    assert plan.splits.tolist() == [128] and plan.notes["launched_ctas"] == 256


# --- flashinfer-cuda-core ----------------------------------------------------------------------
# max_grid = occupancy (8) * 132 = 1,056; min chunk 8 pages; 65,536 tokens = 4,096 pages,
# 1,024 tokens = 64 pages.


def test_cuda_core_threshold_at_occupancy_times_sms():
    # B = 131: 131 * 8 = 1,048 < 1,056 -> search: 8 * (ceil(4096/c) + 130 * ceil(64/c)) <= 1056,
    # i.e. ceil(4096/c) + 130 * ceil(64/c) <= 132. c < 64 gives >= 260; so c >= 64 and
    # ceil(4096/c) <= 2 -> c = 2,048 pages = 32,768 tokens: the long request in 2 chunks.
    policy = policies.get("flashinfer-cuda-core")
    plan = policy.plan([65_536] + [1_024] * 130, SHAPE, SM132)
    assert plan.splits.tolist() == [2] + [1] * 130
    assert pieces(plan, 0) == [(0, 32_768), (32_768, 65_536)]
    assert plan.notes["max_grid"] == 1_056 and plan.notes["chunk_pages"] == 2_048
    assert plan.ctas_per_sm == 8
    # B = 132: 132 * 8 = 1,056 >= 1,056 -> no split at all.
    plan = policy.plan([65_536] + [1_024] * 131, SHAPE, SM132)
    assert plan.splits.tolist() == [1] * 132 and plan.notes["split_kv"] is False
    # That first branch ignores CUDA graphs: still off with enable_cuda_graph.
    graph = policies.get("flashinfer-cuda-core", enable_cuda_graph=True)
    assert graph.plan([65_536] + [1_024] * 131, SHAPE, SM132).notes["split_kv"] is False


def test_cuda_core_occupancy_parameter_moves_the_threshold():
    # occupancy 4: max_grid 528. B = 66: 528 >= 528 -> off. B = 65: ceil(4096/c) + 64 * ceil(64/c)
    # <= 66 -> c >= 64 and ceil(4096/c) <= 2 -> c = 2,048 pages: long request in 2.
    policy = policies.get("flashinfer-cuda-core", occupancy_ctas_per_sm=4)
    assert policy.plan([65_536] + [1_024] * 65, SHAPE, SM132).splits.tolist() == [1] * 66
    plan = policy.plan([65_536] + [1_024] * 64, SHAPE, SM132)
    assert plan.splits.tolist() == [2] + [1] * 64 and plan.ctas_per_sm == 4


def test_cuda_core_single_request_and_cuda_graph():
    # B = 1: ceil(4096/c) <= 1056 / 8 = 132 -> c >= 31.03 -> 32 pages: 128 chunks of 512 tokens.
    policy = policies.get("flashinfer-cuda-core")
    plan = policy.plan([65_536], SHAPE, SM132)
    assert plan.splits.tolist() == [128] and pieces(plan, 0)[1] == (512, 1024)
    # [100, 50] = 7 and 4 pages: the search starts at 8 pages, every request stays one chunk
    # -> split off; with enable_cuda_graph FlashInfer keeps the partition kernel (split_kv on).
    assert policy.plan([100, 50], SHAPE, SM132).notes["split_kv"] is False
    graph = policies.get("flashinfer-cuda-core", enable_cuda_graph=True).plan(
        [100, 50], SHAPE, SM132
    )
    assert graph.notes["split_kv"] is True and graph.splits.tolist() == [1, 1]


# --- fa3 ---------------------------------------------------------------------------------------


def test_fa3_long_request_among_short_ones():
    # One 131,072-token request (1,024 n-blocks of 128) and 63 of 2,048 (16 n-blocks).
    # Cap as if B = 1: total_mblocks = 8 * 1 = 8 < 0.8 * 132; 1,024 n-blocks > 4; over
    # s = 1..min(128, 132, 1024), eff = (8s/132) / ceil(8s/132), best 1.0 (s = 33);
    # s = 14: 112/132 = 0.848 < 0.85, s = 15: 120/132 = 0.909 -> cap 15.
    # blocks_per_sm = ceil((1024 + 63 * 16) * 1.1 * 8 / 132) = ceil(135.47) = 136.
    # Long: clamp(ceil(1024/136) = 8, 1, 15) = 8 pieces of ceil(1024/8) = 128 blocks = 16,384.
    # Short: ceil(16/136) = 1.
    plan = policies.get("fa3").plan([131_072] + [2_048] * 63, SHAPE, SM132)
    assert plan.splits.tolist() == [8] + [1] * 63
    assert pieces(plan, 0) == [(i * 16_384, (i + 1) * 16_384) for i in range(8)]
    assert plan.notes["num_splits_static"] == 15 and plan.notes["blocks_per_sm"] == 136
    # Persistent, heaviest first: the 8 long pieces lead; grid = 132 of (8 + 63) * 8 tasks.
    assert plan.schedule == "persistent-heavy-first" and plan.grid_size == 132
    assert plan.work_request[:8].tolist() == [0] * 8 and plan.work_request[8] == 1


def test_fa3_no_dynamic_split_above_992_requests():
    # B = 992: 1,048,576 tokens (8,192 n-blocks) and 991 requests of 1 token (1 n-block each):
    # cap 15 as above; blocks_per_sm = ceil(9183 * 1.1 * 8 / 132) = ceil(612.2) = 613;
    # long: ceil(8192/613) = 14 pieces of ceil(8192/14) = 586 blocks = 75,008 tokens.
    policy = policies.get("fa3")
    plan = policy.plan([1 << 20] + [1] * 991, SHAPE, SM132)
    assert plan.splits[0] == 14 and pieces(plan, 0)[0] == (0, 75_008)
    # B = 993: the prepare kernel runs 2 CTAs and sets every request to 1 split
    # (flash_prepare_scheduler.cu; tests/kernels/test_upstream_pins.py).
    plan = policy.plan([1 << 20] + [1] * 992, SHAPE, SM132)
    assert plan.splits.tolist() == [1] * 993 and plan.notes["dynamic_split"] is False


def test_fa3_num_splits_argument():
    batch = [131_072] + [2_048] * 63
    # num_splits = 1: off. num_splits = 4: cap 4 -> long min(8, 4) = 4 pieces of 256 blocks.
    assert policies.get("fa3", num_splits=1).plan(batch, SHAPE, SM132).splits.max() == 1
    plan = policies.get("fa3", num_splits=4).plan(batch, SHAPE, SM132)
    assert plan.splits.tolist() == [4] + [1] * 63 and pieces(plan, 0)[1] == (32_768, 65_536)


def test_fa3_heuristic_small_cases():
    # <= 4 n-blocks -> 1; filled machine -> 1; 48 m-blocks on 108 SMs -> 2 (eff 0.89, from the
    # comment in heuristics.h: 3 splits would be 0.67).
    assert policies.fa3_num_splits_heuristic(8, 132, 4, 1, 1 << 20, 128) == 1
    assert policies.fa3_num_splits_heuristic(106, 132, 1000, 1, 1 << 20, 128) == 1
    assert policies.fa3_num_splits_heuristic(48, 108, 1000, 1, 1 << 20, 128) == 2


# --- trtllm / trtllm-oversub ---------------------------------------------------------------------


def test_trtllm_small_batch_and_oversubscription():
    # B = 4, [65536, 4096 x 3]: base = 4 * 8 = 32 CTAs; 132 // 32 = 4; ceil(65536 / 128) = 512
    # (FlashInfer 0.5.x) -> 4 splits; chunk = ceil(512 / 4) * 128 = 16,384 -> [4, 1, 1, 1]; launched 32 * 4 = 128.
    batch = [65_536, 4_096, 4_096, 4_096]
    plan = policies.get("trtllm").plan(batch, SHAPE, SM132)
    assert plan.splits.tolist() == [4, 1, 1, 1] and plan.notes["launched_ctas"] == 128
    assert pieces(plan, 0)[0] == (0, 16_384) and plan.ctas_per_sm == 1
    # Oversub: desired = 65536 / 2048 = 32 > 4 and > 4 splits -> min(32, 16 * 132 // 32 = 66,
    # maxNumCtasPerSeqKv 512, 32) = 32 splits; chunk = ceil(512 / 32) * 128 = 2,048 -> [32, 2, 2, 2].
    plan = policies.get("trtllm-oversub").plan(batch, SHAPE, SM132)
    assert plan.splits.tolist() == [32, 2, 2, 2] and plan.notes["launched_ctas"] == 32 * 32


def test_trtllm_prod_mix_like_batch():
    # B = 32: [131072, 65536, 32768, 16384, 8192] + 27 x 4096 (the PR's length classes).
    # base = 256 > 132 -> trtllm: 1 split, nothing cut.
    # oversub: desired = 64; min(64, 16 * 132 // 256 = 8, 1024, 32) = 8 splits; chunk =
    # ceil(1024 / 8) * 128 = 16,384 -> 8, 4, 2, 1, 1, 1...; launched 256 * 8 = 2,048 CTAs.
    batch = [131_072, 65_536, 32_768, 16_384, 8_192] + [4_096] * 27
    assert policies.get("trtllm").plan(batch, SHAPE, SM132).splits.max() == 1
    plan = policies.get("trtllm-oversub").plan(batch, SHAPE, SM132)
    assert plan.splits.tolist() == [8, 4, 2, 1, 1] + [1] * 27
    assert plan.notes["launched_ctas"] == 2_048 and plan.notes["chunk_tokens"] == 16_384


def test_trtllm_oversub_needs_more_than_min_desired_splits():
    # 4 x 8192: base 32, 132 // 32 = 4, ceil(8192/128) = 64 -> 4 splits, chunk ceil(64/4)*128 =
    # 2,048. Oversub: desired = 4, not > 4 -> unchanged.
    for name in ("trtllm", "trtllm-oversub"):
        plan = policies.get(name).plan([8_192] * 4, SHAPE, SM132)
        assert plan.splits.tolist() == [4] * 4


# --- sglang-triton -------------------------------------------------------------------------------


def test_sglang_long_and_short():
    # [65536, 4096 x 3]: not uniform; s1 = min(16, 8) = 8, c1 = 8,192. ext = 132 * log2(1024) =
    # 1,320; token_grid = 4 * ceil(32 / min(16, 4)) = 32; s2 = min(ceil(41.25), 8) = 8, c2 = 8,192.
    # Long: 8 pieces of 8,192; short: ceil(4096 / 8192) = 1.
    plan = policies.get("sglang-triton").plan([65_536, 4_096, 4_096, 4_096], SHAPE, SM132)
    assert plan.splits.tolist() == [8, 1, 1, 1] and pieces(plan, 0)[1] == (8_192, 16_384)
    assert plan.notes["launched_ctas"] == 32 * 8


def test_sglang_uniform_batch():
    # 64 x 4000: uniform -> s1 = 1. ext = int(132 * log2(62.5) = 787.48) = 787; token_grid = 512;
    # s2 = ceil(787 / 512) = 2, c2 = 2,000 -> 2 splits; piece = ceil(2000 / 32) * 32 = 2,016.
    plan = policies.get("sglang-triton").plan([4_000] * 64, SHAPE, SM132)
    assert plan.splits.tolist() == [2] * 64 and pieces(plan, 5) == [(0, 2_016), (2_016, 4_000)]
    # Page 64: pieces aligned to lcm(32, 64) = 64 -> ceil(2000 / 64) * 64 = 2,048.
    paged = policies.get("sglang-triton").plan([4_000] * 64, AttentionShape(page_size=64), SM132)
    assert pieces(paged, 0) == [(0, 2_048), (2_048, 4_000)]
    # Short requests: 8 x 100 tokens, log2(100 / 64) = 0.64 < 1 -> ext = 132 * 1 = 132;
    # token_grid 64 -> s2 = ceil(132 / 64) = 3, c2 = 34 -> 3 splits; piece = ceil(34 / 32) * 32 =
    # 64 -> only 2 non-empty pieces, [0, 64) and [64, 100).
    short = policies.get("sglang-triton").plan([100] * 8, SHAPE, SM132)
    assert short.notes["ext_device_core_count"] == 132
    assert pieces(short, 0) == [(0, 64), (64, 100)]
    # max_kv_splits 1 (--triton-attention-num-kv-splits 1) turns splitting off.
    one = policies.get("sglang-triton", max_kv_splits=1).plan([4_000] * 64, SHAPE, SM132)
    assert one.splits.max() == 1


# --- vllm-triton ---------------------------------------------------------------------------------


def test_vllm_threshold_b16_vs_b17():
    # seq_threshold_3D = 128 // 8 = 16. B = 16 x 10,000: segment = ceil(10000 / 256) * 16 = 640
    # -> ceil(10000 / 640) = 16 pieces, the last [9600, 10000). B = 17: 2D kernel, no split.
    policy = policies.get("vllm-triton")
    plan = policy.plan([10_000] * 16, SHAPE, SM132)
    assert plan.splits.tolist() == [16] * 16 and pieces(plan, 3)[-1] == (9_600, 10_000)
    assert plan.notes["kernel"] == "3d"
    assert policy.plan([10_000] * 17, SHAPE, SM132).splits.tolist() == [1] * 17
    # 4 KV heads: threshold 32.
    four = AttentionShape(num_qo_heads=32, num_kv_heads=4)
    assert policy.plan([10_000] * 32, four, SM132).splits.max() == 16
    assert policy.plan([10_000] * 33, four, SM132).splits.max() == 1


def test_vllm_segment_alignment_to_pages():
    # 3,000 tokens: segment = ceil(3000 / 256) * 16 = 192 -> 16 pieces (ceil(3000/192) = 15.6).
    # Page 128: 192 rounded up to 256 -> ceil(3000 / 256) = 12 pieces.
    policy = policies.get("vllm-triton")
    assert policy.plan([3_000], SHAPE, SM132).splits.tolist() == [16]
    assert policy.plan([3_000], AttentionShape(page_size=128), SM132).splits.tolist() == [12]


# --- fixed-split / no-split ----------------------------------------------------------------------


def test_fixed_split_is_batch_invariant():
    # 5,000 tokens in 2,048-token chunks: [0, 2048), [2048, 4096), [4096, 5000), whatever else is
    # in the batch and wherever the request sits.
    policy = policies.get("fixed-split")
    want = [(0, 2_048), (2_048, 4_096), (4_096, 5_000)]
    assert pieces(policy.plan([5_000], SHAPE, SM132), 0) == want
    assert pieces(policy.plan([5_000, 100_000, 7], SHAPE, SM132), 0) == want
    assert pieces(policy.plan([7] * 300 + [5_000], SHAPE, SM132), 300) == want
    # Page 128 with 2,000-token chunks: rounded up to 2,048.
    paged = policies.get("fixed-split", chunk_tokens=2_000)
    assert pieces(paged.plan([5_000], AttentionShape(page_size=128), SM132), 0) == want


def test_no_split_and_persistent_grid():
    plan = policies.get("no-split").plan([65_536, 10, 3], SHAPE, SM132)
    assert plan.splits.tolist() == [1, 1, 1] and plan.grid_size == 3 * 8
    # Persistent: grid = min(132 SMs * 8, tasks).
    pers = policies.get("no-split", schedule="persistent-heavy-first").plan([5] * 200, SHAPE, SM132)
    assert pers.grid_size == 1_056 and pers.num_tasks == 1_600


# --- parametric ----------------------------------------------------------------------------------


def test_parametric_default_fills_one_wave():
    # Defaults: min_tokens 2048, max_waves 1, max_splits 32, ctas 2 -> slots 264;
    # budget = max(264, 4 * 8) = 264. [65536, 4096 x 3]: need min(ceil(65536/c), 32) +
    # 3 * ceil(4096/c) <= 33. c = 2,048: 32 + 6 = 38. For 2048 < c < 4096 the short ones take 6, so
    # ceil(65536/c) <= 27 -> c >= 2,427.3 -> 2,432 (152 pages; 2,416 gives 28 + 6 = 34).
    # Long: 27 pieces of ceil(4096 / 27) = 152 pages = 2,432, the last 65536 - 26 * 2432 = 2,304.
    # Shorts: 2 pieces of 128 pages. Tasks = 8 * (27 + 6) = 264 = exactly one wave.
    plan = policies.get("parametric").plan([65_536, 4_096, 4_096, 4_096], SHAPE, SM132)
    assert plan.splits.tolist() == [27, 2, 2, 2]
    assert pieces(plan, 0)[0] == (0, 2_432) and pieces(plan, 0)[-1] == (63_232, 65_536)
    assert pieces(plan, 1) == [(0, 2_048), (2_048, 4_096)]
    assert plan.num_tasks == 264 and plan.notes["chunk_tokens"] == 2_432
    assert plan.ctas_per_sm == 2 and plan.grid_size == 264


def test_parametric_budget_and_min_tokens():
    batch = [131_072] + [2_048] * 63
    # Defaults at B = 64: budget = max(264, 512) = 512 = one CTA per request and head: no split.
    assert policies.get("parametric").plan(batch, SHAPE, SM132).splits.max() == 1
    # max_waves 4: budget 1,056; min(ceil(131072/c), 32) + 63 <= 132 holds at c = 2,048 ->
    # long min(64, 32) = 32 pieces of 8192 / 32 = 256 pages = 4,096 tokens.
    plan = policies.get("parametric", max_waves=4).plan(batch, SHAPE, SM132)
    assert plan.splits.tolist() == [32] + [1] * 63 and pieces(plan, 0)[1] == (4_096, 8_192)
    # min_tokens_per_cta 4096 on [65536, 4096 x 3]: c = 4,096 fits (16 + 3 <= 33) -> 16 pieces;
    # the 4,096-token requests are never split.
    plan = policies.get("parametric", min_tokens_per_cta=4_096).plan(
        [65_536, 4_096, 4_096, 4_096], SHAPE, SM132
    )
    assert plan.splits.tolist() == [16, 1, 1, 1]


def test_parametric_schedules_and_ctas_cap():
    batch = [65_536, 4_096, 4_096, 4_096]
    heavy = policies.get("parametric", schedule="persistent-heavy-first").plan(batch, SHAPE, SM132)
    # Longest first: 26 pieces of 2,432 from request 0, then its 2,304 tail, then the 2,048s.
    tokens = heavy.item_tokens().tolist()
    assert tokens[:27] == [2_432] * 26 + [2_304] and tokens[27:] == [2_048] * 6
    assert heavy.grid_size == 264
    robin = policies.get("parametric", schedule="persistent-round-robin").plan(batch, SHAPE, SM132)
    assert robin.work_request.tolist() == [0] * 27 + [1, 1, 2, 2, 3, 3]
    # A device holding 1 CTA per SM caps ctas_per_sm 2 to 1 -> slots = budget = 132, so
    # min(ceil(65536/c), 32) + 3 * ceil(4096/c) <= 16. Below 4,096 the shorts take 6 and the long
    # one would need <= 10 pieces (c >= 6,554): impossible; so c >= 4,096 and ceil(65536/c) <= 13
    # -> c >= 5,041.2 -> 5,056 (316 pages). Long: 13 pieces; tasks 8 * 16 = 128 < 132 -> grid 128.
    one = DeviceSpec("one", sm_count=132, l2_bytes=0, hbm_bytes_per_s=1e12, max_ctas_per_sm=1)
    capped = policies.get("parametric", schedule="persistent-heavy-first").plan(batch, SHAPE, one)
    assert capped.ctas_per_sm == 1 and capped.notes["cta_slots"] == 132
    assert capped.splits.tolist() == [13, 1, 1, 1] and capped.notes["chunk_tokens"] == 5_056
    assert capped.grid_size == 128


# --- tuned ---------------------------------------------------------------------------------------

BUCKETS = [
    (1, 16, SplitParams(max_waves=4)),
    (17, 64, SplitParams()),
    (65, 256, SplitParams(max_splits=4)),
]


def test_tuned_bucket_selection():
    tuned = policies.get("tuned", buckets=BUCKETS)
    assert [tuned.select(b) for b in (1, 8, 16, 17, 64, 65, 256, 300, 65_536)] == [
        0,
        0,
        0,
        1,
        1,
        2,
        2,
        2,
        2,
    ]
    gaps = policies.BucketedPolicy([(1, 8, SplitParams()), (32, 64, SplitParams())])
    # B = 16: 8 from the first, 16 from the second; 24: 16 vs 8; 20: 12 vs 12 -> the smaller.
    assert [gaps.select(b) for b in (16, 24, 20)] == [0, 1, 0]


def test_tuned_plans_with_the_bucket_parametric_policy():
    tuned = policies.get("tuned", buckets=BUCKETS)
    for batch in ([131_072] + [2_048] * 15, [131_072] + [2_048] * 63, [131_072] + [2_048] * 99):
        index = tuned.select(len(batch))
        want = policies.ParametricPolicy(BUCKETS[index][2]).plan(batch, SHAPE, SM132)
        got = tuned.plan(batch, SHAPE, SM132)
        assert np.array_equal(got.work_kv_end, want.work_kv_end)
        assert np.array_equal(got.work_request, want.work_request)
        assert got.notes["bucket"] == index
    # B = 100 falls in (65..256, max_splits 4): the long request gets at most 4 pieces.
    assert tuned.plan([131_072] + [2_048] * 99, SHAPE, SM132).splits.max() <= 4


def test_tuned_rejects_bad_tables():
    with pytest.raises(ValueError, match="overlaps"):
        policies.BucketedPolicy([(1, 16, SplitParams()), (16, 32, SplitParams())])
    with pytest.raises(ValueError, match="overlaps or precedes"):
        policies.BucketedPolicy([(17, 32, SplitParams()), (1, 16, SplitParams())])
    with pytest.raises(ValueError, match="at least one"):
        policies.BucketedPolicy([])
    with pytest.raises(ValueError, match=r"buckets\[0\].max_batch"):
        policies.BucketedPolicy([(8, 4, SplitParams())])
    with pytest.raises(ValueError, match="max_splits"):
        policies.BucketedPolicy([{"min_batch": 1, "max_batch": 4, "params": {"max_splits": 0}}])


def test_tuned_default_rule_is_parametric_and_params_name_it():
    tuned = policies.get("tuned", buckets=BUCKETS)
    assert tuned.rule == "parametric" and tuned.params()["rule"] == "parametric"
    assert policies.parameters("tuned")["rule"] == "parametric"
    batch = [131_072] + [2_048] * 15
    assert tuned.plan(batch, SHAPE, SM132).notes["rule"] == "parametric"


def test_tuned_fixed_chunk_plans_fixed_split_pieces_and_round_trips():
    """Each bucket's requests cut into pieces of exactly min_tokens_per_cta tokens (rounded up to
    the page size), last piece shorter, request order; max_waves, max_splits, schedule ignored."""
    buckets = [(1, 8, SplitParams(1000, 1, 2, 1, "persistent-heavy-first")),
               (9, 64, SplitParams(4096, 16, 1, 2, "static-heavy-first"))]
    tuned = policies.get("tuned", buckets=buckets, rule="fixed-chunk")
    stored = json.loads(json.dumps(tuned.params()))
    assert stored["rule"] == "fixed-chunk"
    again = policies.get("tuned", **stored)
    assert again == tuned
    rng = np.random.default_rng(5)
    for _ in range(40):
        batch = rng.integers(1, 200_000, int(rng.integers(1, 65)))
        params = buckets[tuned.select(len(batch))][2]
        chunk = -(-params.min_tokens_per_cta // SHAPE.page_size) * SHAPE.page_size  # 1000 -> 1008
        want = policies.FixedSplitPolicy(chunk_tokens=chunk, ctas_per_sm=params.ctas_per_sm)
        want = want.plan(batch, SHAPE, SM132)
        for plan in (tuned.plan(batch, SHAPE, SM132), again.plan(batch, SHAPE, SM132)):
            for attr in ("splits", "work_request", "work_split", "work_kv_start", "work_kv_end"):
                assert np.array_equal(getattr(plan, attr), getattr(want, attr)), attr
            assert (plan.schedule, plan.ctas_per_sm, plan.grid_size) == ("static", params.ctas_per_sm,
                                                                         want.grid_size)
            assert plan.notes["rule"] == "fixed-chunk"
        # Exactly the chunk: every piece but a request's last, whatever max_splits (here 1 or 2).
        long = np.flatnonzero(want.splits > 2)
        assert long.size and (want.splits == -(-batch // chunk)).all()


def test_tuned_rejects_an_unknown_rule():
    with pytest.raises(ValueError, match="rule: 'equal' not allowed; allowed: parametric, fixed-chunk"):
        policies.get("tuned", rule="equal")


# --- registry ------------------------------------------------------------------------------------


def test_registry_names_and_errors():
    assert policies.names() == [
        "flashinfer-cuda-core",
        "flashinfer-tensor-core",
        "fa3",
        "trtllm",
        "trtllm-oversub",
        "sglang-triton",
        "vllm-triton",
        "fixed-split",
        "no-split",
        "parametric",
        "adaptive-chunk",
        "makespan-chunk",
        "tuned",
        "hybrid-serial",
        "hybrid-streams",
        "hybrid-fused",
        "hybrid-colocated",
        "pod",
        "hybrid-parametric",
        "hybrid-tuned",
    ]
    with pytest.raises(ValueError, match="policy: 'fa4' unknown; allowed: .*fa3"):
        policies.get("fa4")
    with pytest.raises(ValueError, match="'splits' unknown; allowed: num_splits"):
        policies.get("fa3", splits=2)
    with pytest.raises(ValueError, match="'foo' unknown; allowed: min_tokens_per_cta"):
        policies.get("parametric", foo=1)
    assert policies.parameters("trtllm-oversub")["max_waves"] == 16
    assert policies.parameters("sglang-triton")["max_kv_splits"] == 8
    assert policies.parameters("parametric") == SplitParams().to_dict()


@pytest.mark.parametrize(
    ("name", "overrides", "field"),
    [
        ("fa3", {"num_splits": -1}, "num_splits"),
        ("fa3", {"efficiency_ratio": 1.5}, "efficiency_ratio"),
        ("fa3", {"block_n_tokens": "128"}, "block_n_tokens"),
        ("flashinfer-cuda-core", {"enable_cuda_graph": "yes"}, "enable_cuda_graph"),
        ("flashinfer-cuda-core", {"occupancy_ctas_per_sm": 33}, "occupancy_ctas_per_sm"),
        ("flashinfer-tensor-core", {"fixed_split_size": 0}, "fixed_split_size"),
        ("trtllm", {"tile_kv_tokens": 0}, "tile_kv_tokens"),
        ("trtllm-oversub", {"max_waves": 0}, "max_waves"),
        ("sglang-triton", {"max_kv_splits": 0}, "max_kv_splits"),
        ("vllm-triton", {"num_segments": 2.5}, "num_segments"),
        ("fixed-split", {"chunk_tokens": 0}, "chunk_tokens"),
        ("no-split", {"schedule": "random"}, "schedule"),
        ("parametric", {"max_waves": 0}, "max_waves"),
        ("parametric", {"schedule": "lifo"}, "schedule"),
        ("tuned", {"buckets": "all"}, "buckets"),
    ],
)
def test_bad_parameters_name_the_field(name, overrides, field):
    with pytest.raises(ValueError, match=field):
        policies.get(name, **overrides)


@pytest.mark.parametrize("name", policies.names())
@pytest.mark.parametrize("kv_lens", [[0], [5, -1], [(1 << 20) + 1], []])
def test_bad_kv_lens_rejected(name, kv_lens):
    with pytest.raises(ValueError, match="kv_len"):
        policies.get(name).plan(kv_lens, SHAPE, SM132)


NON_DEFAULT = {
    "flashinfer-cuda-core": {"occupancy_ctas_per_sm": 3, "enable_cuda_graph": True},
    "flashinfer-tensor-core": {"fixed_split_size": 64},
    "fa3": {"num_splits": 3, "block_n_tokens": 64},
    "trtllm": {"tile_kv_tokens": 64},
    "trtllm-oversub": {"max_waves": 4, "min_tokens_per_cta": 1024},
    "sglang-triton": {"max_kv_splits": 16},
    "vllm-triton": {"num_segments": 8},
    "fixed-split": {"chunk_tokens": 4096, "schedule": "static-heavy-first"},
    "no-split": {"schedule": "persistent-round-robin"},
    "parametric": {"max_waves": 3, "schedule": "persistent-heavy-first", "min_tokens_per_cta": 512},
    "adaptive-chunk": {"max_waves": 4, "max_chunk_tokens": 8192},
    "makespan-chunk": {"piece_cost_tokens": 128, "max_splits": 8, "min_tokens_per_cta": 1024},
    "tuned": {"buckets": [(1, 8, SplitParams(max_waves=2)), (9, 64, SplitParams(max_splits=4))]},
    "hybrid-serial": {"decode_policy": "fa3", "prefill_block_m": 64},
    "hybrid-streams": {"prefill_split_cap_waves": 3},
    "hybrid-fused": {"decode_policy": "parametric"},
    "hybrid-colocated": {"prefill_block_m": 128, "decode_policy": "fa3"},
    "pod": {"sm_policy": "50:50", "prefill_split_cap_waves": 1},
    "hybrid-parametric": {"schedule": "fused", "ctas_per_sm": 4, "max_waves": 2,
                          "decode_schedule": "static-heavy-first"},
    "hybrid-tuned": {},  # its one parameter is a file path: tests/studies/test_hybrid_tune.py
}


@pytest.mark.parametrize("name", policies.names())
@pytest.mark.parametrize("custom", [False, True])
def test_params_round_trip(name, custom):
    policy = policies.get(name, **(NON_DEFAULT[name] if custom else {}))
    stored = json.loads(json.dumps(policy.params()))  # what a measurement row keeps
    again = policies.get(name, **stored)
    assert again == policy and again.name == name
    rng = np.random.default_rng(7)
    for batch in ([131_072] + [2_048] * 63, rng.integers(1, 300_000, 40), [17]):
        a, b = policy.plan(batch, SHAPE, SM132), again.plan(batch, SHAPE, SM132)
        for attr in ("work_request", "work_split", "work_kv_start", "work_kv_end", "splits"):
            assert np.array_equal(getattr(a, attr), getattr(b, attr))
        assert (a.grid_size, a.ctas_per_sm, a.schedule) == (b.grid_size, b.ctas_per_sm, b.schedule)


def test_describe_plan():
    plan = policies.get("fa3").plan([131_072] + [2_048] * 63, SHAPE, SM132)
    info = policies.describe_plan(plan, SM132)
    assert info["splits_per_request"] == [8] + [1] * 63
    assert info["num_items"] == 71 and info["num_tasks"] == 568 and info["grid_size"] == 132
    assert info["cta_slots"] == 132 and info["waves"] == pytest.approx(568 / 132)
    assert info["max_item_tokens"] == 16_384 and info["min_item_tokens"] == 2_048
    assert info["notes"]["num_splits_static"] == 15
    json.dumps(info)  # plain values only


@pytest.mark.parametrize("name", policies.names())
def test_planning_4096_requests_is_fast(name):
    # Lengths up to 65,536 keep fixed-split at <= 32 pieces a request; the others do not care.
    kv_lens = np.random.default_rng(3).integers(1, 65_537, 4_096)
    policy = policies.get(name)
    policy.plan(kv_lens, SHAPE, SM132)  # warm-up (imports, caches)
    start = time.perf_counter()
    policy.plan(kv_lens, SHAPE, SM132)
    assert time.perf_counter() - start < 0.25

"""Baselines against their upstream sources: each difference found by an independent port of the
upstream planners (issue 14) is pinned here with an example computed by hand from the upstream
code, whose file and commit are named next to it.

Sources:
- FA3: Dao-AILab/flash-attention 0251105a2fb19d2957484b7f023cd8c115286ced, hopper/tile_size.h,
  hopper/heuristics.h, hopper/flash_api.cpp (get_num_splits, get_pagedkv_tma),
  hopper/flash_prepare_scheduler.cu (prepare_varlen_num_blocks).
- FlashInfer v0.5.3 (0e68a2febc58df99429f652769c5c485ca67fc39): include/flashinfer/attention/
  scheduler.cuh (DecodePlan, PrefillSplitQOKVIndptr, PrefillBinarySearchKVChunkSize),
  include/flashinfer/utils.cuh (DISPATCH_GQA_GROUP_SIZE), include/flashinfer/trtllm/fmha/
  fmhaKernels.cuh; v0.6.0 (4230a48aedd21fc8823249147c4b8b363bb0dc36) for maxNumCtasPerSeqKv.
- SGLang 03cd2ec4af85b66be8ef025238bc73c165416bdb: python/sglang/srt/layers/attention/
  triton_ops/decode_attention.py (_decode_grouped_att_m_fwd grid).
- vLLM 001394336840495fb529a33f71767ecbfdc88372: vllm/v1/attention/ops/
  triton_unified_attention.py (unified_attention grid).
"""

from __future__ import annotations

import numpy as np
import pytest
from kvtune.harness.device import device_model
from kvtune.harness.sim_model import (
    SimConstants,
    empty_programs,
    merge_bytes,
    programs_per_task,
    simulate,
    task_bytes,
)
from kvtune.kernels import policies
from kvtune.kernels.baselines import fa3_tile
from kvtune.kernels.plan import AttentionShape

H200 = device_model("h200")
A100 = device_model("a100")
SHAPE = AttentionShape()  # 32 q heads, 8 KV heads, head_dim 128, page 16, bf16


# --- FA3 ---------------------------------------------------------------------------------------


def test_fa3_block_n_per_arch_and_head_dim():
    # tile_size.h: sm90 paged non-TMA 128 (hdim 64 and 128), 80 (hdim 256); sm80 varlen 80 /
    # 112 / 64; sm86/89 80 / 112 / 48. kBlockM: 192 for hdim 64 on sm90, else 128.
    assert [fa3_tile(90, d, 4, 16) for d in (64, 128, 256)] == [(192, 128), (128, 128), (128, 80)]
    assert [fa3_tile(80, d, 4, 16)[1] for d in (64, 128, 256)] == [80, 112, 64]
    assert [fa3_tile(86, d, 4, 16)[1] for d in (64, 128, 256)] == [80, 112, 48]
    assert [fa3_tile(89, d, 4, 16)[1] for d in (64, 128, 256)] == [80, 112, 48]
    # get_pagedkv_tma: TMA only when page_size % kBlockN == 0 and G > kBlockM.
    assert fa3_tile(90, 128, 256, 176) == (128, 176)


def test_fa3_a100_example_of_the_issue():
    # A100 (sm80, 108 SMs), 128 q heads / 1 KV head, hdim 128, page 64, kv [366, 486, 46, 200].
    # kBlockN 112: n-blocks [4, 5, 1, 2]; seqlen_k = 8 pages * 64 = 512 -> 5 n-blocks > 4;
    # total_mblocks = 1 (varlen: batch of 1) < 0.8 * 108; over s = 1..5, eff = s / 108, the
    # best is s = 5 and only 5 reaches 0.85 of it -> cap 5. blocks_per_sm = ceil(12 * 1.1 / 108)
    # = 1 -> splits [4, 5, 1, 2]. With kBlockN 128: 512 / 128 = 4 n-blocks <= 4 -> 1 split each.
    shape = AttentionShape(num_qo_heads=128, num_kv_heads=1, head_dim=128, page_size=64)
    kv = [366, 486, 46, 200]
    plan = policies.get("fa3").plan(kv, shape, A100)
    assert plan.notes["arch"] == 80 and plan.notes["block_n_tokens"] == 112
    assert plan.notes["fa3_splits"] == [4, 5, 1, 2]
    old = policies.get("fa3", block_n_tokens=128).plan(kv, shape, A100)
    assert old.notes["fa3_splits"] == [1, 1, 1, 1] and old.splits.tolist() == [1, 1, 1, 1]
    # FA3 cuts 112-token n-blocks; a Plan cuts at 64-token pages: pieces of 128 tokens.
    assert plan.splits.tolist() == [3, 4, 1, 2]


def test_fa3_h200_head_dim_256_uses_block_n_80():
    # H200, 32 q / 8 KV heads, hdim 256: kBlockN 80. kv [4000, 100, 100, 100]: seqlen_k 4000 ->
    # 50 n-blocks; total_mblocks 8: eff(s) = 8s / 132 below one wave, s = 15 is the first >= 0.85
    # (120 / 132 = 0.909; s = 14 gives 0.848) -> cap 15. n-blocks [50, 2, 2, 2], sum 56;
    # blocks_per_sm = ceil(56 * 1.1 * 8 / 132) = ceil(3.73) = 4 -> [13, 1, 1, 1].
    # With kBlockN 128: [32, 1, 1, 1], sum 35, ceil(35 * 1.1 * 8 / 132) = 3 -> [11, 1, 1, 1].
    shape = AttentionShape(head_dim=256)
    kv = [4000, 100, 100, 100]
    assert policies.get("fa3").plan(kv, shape, H200).notes["fa3_splits"] == [13, 1, 1, 1]
    old = policies.get("fa3", block_n_tokens=128).plan(kv, shape, H200)
    assert old.notes["fa3_splits"] == [11, 1, 1, 1]


def test_fa3_above_992_requests_one_split_even_with_num_splits():
    # flash_prepare_scheduler.cu: `if (int(gridDim.x) > 1 || num_splits_static == 1)
    # num_splits_dynamic = 1` - the prepare kernel runs ceil(B / 992) CTAs, so B = 993 gets one
    # split per request whatever num_splits says (kvtune used to give every request the cap).
    batch = [1 << 20] + [1] * 992
    for num_splits in (0, 4):
        plan = policies.get("fa3", num_splits=num_splits).plan(batch, SHAPE, H200)
        assert plan.splits.max() == 1 and plan.notes["dynamic_split"] is False
    # 992 requests: the dynamic rule, min(ceil(8192 / 613), 4) = 4 pieces for the long one.
    assert policies.get("fa3", num_splits=4).plan(batch[:992], SHAPE, H200).splits[0] == 4


def test_fa3_seqlen_k_is_the_page_table_width():
    # Without scheduler metadata get_num_splits sees seqlen_k = page_table.size(1) * page_size.
    # [256] * 4 with a tight page table: 2 n-blocks <= 4 -> 1 split. A page table sized for
    # 131,072 tokens (a serving engine's max context): 1,024 n-blocks -> cap 15;
    # blocks_per_sm = ceil(8 * 1.1 * 8 / 132) = 1 -> min(2, 15) = 2 splits each.
    batch = [256] * 4
    assert policies.get("fa3").plan(batch, SHAPE, H200).splits.tolist() == [1] * 4
    wide = policies.get("fa3", seqlen_k_tokens=131_072).plan(batch, SHAPE, H200)
    assert wide.splits.tolist() == [2] * 4 and wide.notes["seqlen_k_tokens"] == 131_072


# --- FlashInfer --------------------------------------------------------------------------------


def test_tensor_core_cuda_graph_pads_the_grid_and_keeps_split_on():
    # PrefillSplitQOKVIndptr with enable_cuda_graph: split_kv = enable_cuda_graph || low < max.
    # 40 x 1,000 tokens (63 pages): max_batch_if_split = 2 * 132 // 8 = 33 < 40, so the search
    # ends at 63 pages (one chunk each): eager no split; graph split on with the same pieces.
    # padded_batch_size = max(33, ceil(40 * 4 / 16) + 40 - 1 = 49) = 49 -> 49 * 8 CTAs.
    batch = [1_000] * 40
    eager = policies.get("flashinfer-tensor-core").plan(batch, SHAPE, H200)
    graph = policies.get("flashinfer-tensor-core", enable_cuda_graph=True).plan(batch, SHAPE, H200)
    assert eager.notes["split_kv"] is False and graph.notes["split_kv"] is True
    assert graph.splits.tolist() == eager.splits.tolist() == [1] * 40
    assert graph.notes["padded_batch_size"] == 49 and graph.notes["launched_ctas"] == 392
    assert empty_programs(graph) == 392 - 320 and empty_programs(eager) == 0
    # The simulator: partials and merge for every request, and the padded CTAs' slot time.
    assert simulate(graph, SHAPE, H200).merge_us > 0 == simulate(eager, SHAPE, H200).merge_us
    # FlashInfer refuses fixed splits with more work than the padded batch.
    with pytest.raises(ValueError, match="padded batch"):
        policies.get("flashinfer-tensor-core", enable_cuda_graph=True,
                     fixed_split_size=1).plan([16_000] * 4, SHAPE, H200)


def test_cuda_core_cuda_graph_padded_grid():
    # DecodePlan: padded_batch_size = enable_cuda_graph ? (split_kv ? max_grid / gdy : B) : new.
    # [100, 50], 8 CTAs/SM x 132 = 1,056 = max_grid; B * H_kv = 16 < 1,056; one chunk each, but
    # the graph keeps split on: padded 1,056 / 8 = 132 -> 1,056 CTAs launched for 16 tasks.
    graph = policies.get("flashinfer-cuda-core", enable_cuda_graph=True).plan([100, 50], SHAPE, H200)
    assert graph.notes["padded_batch_size"] == 132 and graph.notes["launched_ctas"] == 1_056
    assert empty_programs(graph) == 1_056 - 16


@pytest.mark.parametrize("qo_heads,ok", [(8, True), (16, True), (24, True), (32, True), (64, True),
                                         (40, False), (48, False), (128, False), (256, False)])
def test_cuda_core_refuses_group_sizes_it_does_not_dispatch(qo_heads, ok):
    # DISPATCH_GQA_GROUP_SIZE: 1, 2, 3, 4, 8; anything else raises "Unsupported group_size".
    shape = AttentionShape(num_qo_heads=qo_heads, num_kv_heads=8)
    policy = policies.get("flashinfer-cuda-core")
    if ok:
        policy.plan([1_000, 2_000], shape, H200)
    else:
        with pytest.raises(ValueError, match=r"group_size: \d+ .*allowed: 1, 2, 3, 4, 8") as exc:
            policy.plan([1_000, 2_000], shape, H200)
        assert "\n" not in str(exc.value)


def test_cuda_core_occupancy_comes_from_the_device():
    # occupancy 0 takes device.max_ctas_per_sm (a calibration's device holds the kernel's).
    from kvtune.kernels.plan import DeviceSpec

    dev4 = DeviceSpec("h200", 132, 60 << 20, 4.8e12, max_ctas_per_sm=4)
    plan = policies.get("flashinfer-cuda-core").plan([8_000] * 4, SHAPE, dev4)
    assert plan.notes["max_grid"] == 4 * 132 and plan.ctas_per_sm == 4


def test_trtllm_version_factor():
    # fmhaKernels.cuh: v0.5.3 maxNumCtasPerSeqKv = ceil(L / mStepKv); v0.6.0 ceil(L / (2 mStepKv)).
    # B = 1, 8 KV heads: base 8, 132 // 8 = 16; L = 1,000: 0.5 -> min(8, 16) = 8; 0.6 -> 4.
    assert policies.get("trtllm").plan([1_000], SHAPE, H200).notes["splits"] == 8
    six = policies.get("trtllm", flashinfer_version="0.6").plan([1_000], SHAPE, H200)
    assert six.notes["splits"] == 4 and six.notes["max_ctas_per_seq_kv"] == 4
    with pytest.raises(ValueError, match="flashinfer_version"):
        policies.get("trtllm", flashinfer_version="0.7")


def test_trtllm_oversub_cap_uses_max_ctas_per_seq_kv():
    # min_tokens_per_cta 128, [4096], base 8: desired 32 > 4. On 0.6: maxNumCtasPerSeqKv =
    # ceil(4096 / 256) = 16, base splits min(16, 16) = 16 < 32 -> cap min(32, 16 * 132 // 8,
    # 16, 32) = 16 (ceil(L / tile) = 32 would give 32 CTAs, half of them without a full tile).
    # On 0.5: maxNumCtasPerSeqKv = 32 -> 32.
    six = policies.get("trtllm-oversub", min_tokens_per_cta=128, flashinfer_version="0.6")
    assert six.plan([4_096], SHAPE, H200).notes["splits"] == 16
    five = policies.get("trtllm-oversub", min_tokens_per_cta=128)
    assert five.plan([4_096], SHAPE, H200).notes["splits"] == 32


# --- SGLang and vLLM launch more programs than the plan's tasks ------------------------------


def test_sglang_group_above_16_rereads_kv():
    # grid = (B, cdiv(H_qo, min(16, G)), max_kv_splits); cur_kv_head = head_id // cdiv(G, 16):
    # G = 32 -> 2 programs per KV head, each streaming the head's whole KV range.
    shape = AttentionShape(num_qo_heads=64, num_kv_heads=2)
    plan = policies.get("sglang-triton").plan([20_000, 1_000], shape, H200)
    assert programs_per_task(plan) == 2
    assert plan.notes["launched_ctas"] == 2 * 4 * 8  # B x 64 / 16 x max_kv_splits
    once = dict(plan.notes, kv_reads_per_task=1)
    single = type(plan)(**{**plan.__dict__, "notes": once})
    # The second program of each task reads the task's KV (and its queries) again.
    twice = simulate(plan, shape, H200).hbm_bytes - simulate(single, shape, H200).hbm_bytes
    assert twice == int(task_bytes(plan, shape).sum()) >= 21_000 * 2 * 512
    assert programs_per_task(policies.get("sglang-triton").plan([100], SHAPE, H200)) == 1


def test_vllm_q_block_grid():
    # total_num_q_blocks = B // BLOCK_Q + B, BLOCK_M = 16 (G <= 16), BLOCK_Q = 16 // G.
    # G = 4, B = 20 (2D): 20 // 4 + 20 = 25 q-blocks x 8 KV heads = 200 programs, 160 with work.
    plan = policies.get("vllm-triton").plan([1_000] * 20, SHAPE, H200)
    assert plan.notes["total_num_q_blocks"] == 25 and plan.notes["launched_ctas"] == 200
    assert empty_programs(plan) == 40
    # G = 32: BLOCK_M = 32, BLOCK_Q = 1 -> 2B q-blocks. 3D (B = 4 <= 128 // 1): x 16 segments.
    shape = AttentionShape(num_qo_heads=32, num_kv_heads=1)
    plan = policies.get("vllm-triton").plan([4_096] * 4, shape, H200)
    assert plan.notes["total_num_q_blocks"] == 8 and plan.notes["launched_ctas"] == 8 * 16


def test_empty_programs_cost_slot_time():
    plan = policies.get("vllm-triton").plan([1_000] * 20, SHAPE, H200)
    base = simulate(plan, SHAPE, H200, SimConstants(empty_cta_us=0.0)).time_us
    slow = simulate(plan, SHAPE, H200, SimConstants(empty_cta_us=10.0)).time_us
    slots = H200.sm_count * plan.ctas_per_sm
    assert slow - base == pytest.approx(10.0 * 40 / slots)
    assert np.isfinite(base)


def test_a_kernel_with_one_program_per_task_runs_no_extra_programs():
    # kvtune's Triton kernel runs SGLang's and vLLM's plans with one program per planned task
    # (harness/backends/triton.py): no empty programs, no second read of a task's KV.
    one = SimConstants(empty_cta_us=10.0, one_program_per_task=True)
    plan = policies.get("vllm-triton").plan([1_000] * 20, SHAPE, H200)
    assert empty_programs(plan, one) == 0 and empty_programs(plan) == 40
    bare = simulate(plan, SHAPE, H200, SimConstants(empty_cta_us=0.0))
    assert simulate(plan, SHAPE, H200, one).time_us == pytest.approx(bare.time_us, rel=1e-12)
    shape = AttentionShape(num_qo_heads=64, num_kv_heads=2)
    plan = policies.get("sglang-triton").plan([20_000, 1_000], shape, H200)
    assert programs_per_task(plan, one) == 1 and programs_per_task(plan) == 2
    result = simulate(plan, shape, H200, one)
    assert result.hbm_bytes == int(task_bytes(plan, shape).sum()) + merge_bytes(plan, shape)
    assert len(result.task) == plan.num_tasks

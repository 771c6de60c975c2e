"""Split heuristics of FlashAttention-3, SGLang's and vLLM's Triton decode, and the two trivial
baselines (a fixed, batch-invariant split and no split).

Each policy reproduces the library's rule in this project's terms (see shared/BACKGROUND.md
section 3); every constant of the rule is a constructor parameter whose default is the library's.
FlashInfer's planners and trtllm-gen are in kernels/baselines_flashinfer.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kvtune.kernels.plan import (
    MAX_KV_LEN_TOKENS,
    SCHEDULES,
    AttentionShape,
    DeviceSpec,
    Plan,
    as_kv_lens,
    build_plan,
    kv_element_bytes,
)
from kvtune.kernels.policy_common import (
    MIB,
    PolicyBase,
    cdiv,
    check_choice,
    check_float,
    check_int,
    lcm,
    persistent_grid,
    plain_notes,
    resolve_ctas_per_sm,
)


def fa3_num_splits_heuristic(
    total_mblocks: int,
    num_sms: int,
    num_n_blocks: int,
    num_m_blocks: int,
    size_one_kv_head_bytes: int,
    max_splits: int,
    *,
    fill_ratio: float = 0.8,
    efficiency_ratio: float = 0.85,
    l2_bytes: int = 50 * MIB,
    min_n_blocks: int = 4,
) -> int:
    """FlashAttention-3 `num_splits_heuristic` (hopper/heuristics.h), non-causal, in float32.

    If total_mblocks >= fill_ratio * S: 1 split, unless one KV head exceeds l2_bytes and there are
    >= 2S m-blocks (then ceil(size / l2_bytes), capped). If num_n_blocks <= min_n_blocks: 1.
    Else, over s in 1..min(max_splits, S, num_n_blocks), wave efficiency
    n_waves / ceil(n_waves) with n_waves = total_mblocks * s / S; the smallest s whose efficiency
    is >= efficiency_ratio times the best.
    """
    if total_mblocks >= np.float32(fill_ratio) * num_sms:
        if size_one_kv_head_bytes > l2_bytes and num_m_blocks >= num_sms * 2:
            return min(cdiv(size_one_kv_head_bytes, l2_bytes), max_splits)
        return 1
    if num_n_blocks <= min_n_blocks:
        return 1
    top = min(max_splits, num_sms, num_n_blocks)
    s = np.arange(1, top + 1)
    n_waves = (total_mblocks * s).astype(np.float32) / np.float32(num_sms)
    eff = n_waves / np.ceil(n_waves)
    ok = np.flatnonzero(eff.astype(np.float64) >= efficiency_ratio * float(eff.max()))
    return int(s[ok[0]]) if ok.size else 1


@dataclass(frozen=True)
class FA3Policy(PolicyBase):
    """FlashAttention-3 varlen decode (flash_attn_with_kvcache / varlen with a paged KV cache).

    Sources: Dao-AILab/flash-attention `hopper/heuristics.h` (num_splits_heuristic),
    `hopper/flash_api.cpp` (get_num_splits; `use_dynamic_split = is_varlen && b <= 992`, 992 =
    32 x 31, the most batches the one-CTA prepare kernel handles), `hopper/flash_prepare_scheduler.cu`
    (prepare_varlen_num_blocks) and `hopper/tile_scheduler.hpp` (VarlenDynamicPersistentTileScheduler).
    Rule (PackGQA: m_blocks = ceil(G / block_m_rows), 1 for decode; nb_b = ceil(L_b / block_n_tokens)):
      dynamic = B <= max_dynamic_batch and num_splits != 1
      cap = num_splits if num_splits > 0 else num_splits_heuristic with total_mblocks =
            H_kv * m_blocks * (1 if dynamic else B), num_n_blocks = ceil(max_L / block_n_tokens),
            one KV head = max_L * 2 * head_dim * dtype bytes, max_splits (128)
      dynamic: blocks_per_sm = ceil(sum_b m_blocks * nb_b * 1.1 * H_kv / S)   (float32, as on GPU)
               splits_b = clamp(ceil(nb_b / blocks_per_sm), 1, cap)
      else:    splits_b = cap for every request (1 under the heuristic for any B > 992)
      each split of request b covers ceil(nb_b / splits_b) n-blocks, so the actual count can be
      lower; FA3's empty splits exit, a Plan has none.
    Schedule: persistent, grid = S * ctas_per_sm capped to the tasks, longest item first. FA3 sorts
    requests (not items) heaviest first before its CTAs pull tiles from an atomic counter; the
    item-level longest-first order here approximates it.

    num_splits: FA3's argument: 0 = heuristic, 1 = off, n > 1 = the cap (the per-request dynamic
        rule still applies below max_dynamic_batch, as FA3 passes it to the prepare kernel).
    block_n_tokens: kBlockN, 128 for hdim 128 with a paged KV cache. block_m_rows: kBlockM (128).
    assumed_l2_bytes: FA3's fixed 50 MiB L2 assumption (not the device's L2).
    Others: the heuristic's constants (see fa3_num_splits_heuristic), blocks_margin the 1.1.
    ctas_per_sm: resident CTAs per SM of the persistent grid, 1..32, default 1.
    """

    name: ClassVar[str] = "fa3"
    num_splits: int = 0
    block_n_tokens: int = 128
    block_m_rows: int = 128
    max_splits: int = 128
    fill_ratio: float = 0.8
    efficiency_ratio: float = 0.85
    assumed_l2_bytes: int = 50 * MIB
    min_n_blocks: int = 4
    blocks_margin: float = 1.1
    max_dynamic_batch: int = 992
    ctas_per_sm: int = 1

    def __post_init__(self) -> None:
        check_int("num_splits", self.num_splits, 0, 1024)
        check_int("block_n_tokens", self.block_n_tokens, 1, 4096)
        check_int("block_m_rows", self.block_m_rows, 1, 4096)
        check_int("max_splits", self.max_splits, 1, 1024)
        check_float("fill_ratio", self.fill_ratio, 0.0, 64.0)
        check_float("efficiency_ratio", self.efficiency_ratio, 0.0, 1.0)
        check_int("assumed_l2_bytes", self.assumed_l2_bytes, 1, 1 << 40)
        check_int("min_n_blocks", self.min_n_blocks, 0, MAX_KV_LEN_TOKENS)
        check_float("blocks_margin", self.blocks_margin, 0.01, 100.0)
        check_int("max_dynamic_batch", self.max_dynamic_batch, 0, 1 << 16)
        check_int("ctas_per_sm", self.ctas_per_sm, 1, 32)

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        batch, heads, sms = kv_lens.shape[0], shape.num_kv_heads, device.sm_count
        m_blocks = cdiv(shape.group_size, self.block_m_rows)
        n_blocks = cdiv(kv_lens, self.block_n_tokens)
        max_len = int(kv_lens.max())
        dynamic = batch <= self.max_dynamic_batch and self.num_splits != 1
        if self.num_splits > 0:
            cap = self.num_splits
        else:
            cap = fa3_num_splits_heuristic(
                heads * m_blocks * (1 if dynamic else batch),
                sms,
                cdiv(max_len, self.block_n_tokens),
                m_blocks,
                max_len * 2 * shape.head_dim * kv_element_bytes(shape),
                self.max_splits,
                fill_ratio=self.fill_ratio,
                efficiency_ratio=self.efficiency_ratio,
                l2_bytes=self.assumed_l2_bytes,
                min_n_blocks=self.min_n_blocks,
            )
        blocks_per_sm = None
        if dynamic:
            total = np.float32(m_blocks * int(n_blocks.sum()))
            blocks_per_sm = int(
                np.ceil(
                    total * np.float32(self.blocks_margin) * np.float32(heads) / np.float32(sms)
                )
            )
            splits = np.clip(cdiv(n_blocks, max(blocks_per_sm, 1)), 1, cap)
        else:
            splits = np.full(batch, cap, dtype=np.int64)
        chunk = cdiv(n_blocks, splits) * self.block_n_tokens
        ctas = min(self.ctas_per_sm, device.max_ctas_per_sm)
        notes = plain_notes(
            num_splits_static=cap,
            dynamic_split=dynamic,
            blocks_per_sm=blocks_per_sm,
            num_m_blocks=m_blocks,
        )
        return build_plan(
            kv_lens,
            chunk,
            num_kv_heads=heads,
            page_size=shape.page_size,
            schedule="persistent-heavy-first",
            ctas_per_sm=ctas,
            grid_size=sms * ctas,
            notes=notes,
        )


@dataclass(frozen=True)
class SGLangTritonPolicy(PolicyBase):
    """SGLang Triton decode backend (`--attention-backend triton`).

    Source: sglang `python/sglang/srt/layers/attention/triton_backend.py`,
    `get_num_kv_splits_triton`; the kernel (`triton_ops/decode_attention.py`) cuts request b into
    pieces of kv_len_per_split = ceil(ceil(L_b / splits_b) / MIN_BLOCK_KV) * MIN_BLOCK_KV tokens.
    Rule (S = device_core_count, one shared chunk per condition):
      min_L = max_L if max_L < uniform_ratio * min_L (SGLang: max_L * 8 < min_L * 10)
      s1 = min(ceil(max_L / min_L), max_kv_splits); c1 = ceil(max_L / s1)
      ext_cores = int(S * max(log2(max_L / seq_len_scale_tokens), 1))   (float32, truncated)
      token_grid = B * H_qo if G == 1 else B * ceil(H_qo / min(block_h, G))   (= B * H_kv for G <= 16)
      s2 = min(ceil(ext_cores / token_grid), max_kv_splits); c2 = ceil(max_L / s2)
      splits_b = max(ceil(L_b / c1), ceil(L_b / c2))
    The kernel's grid is B x head groups x max_kv_splits; splits past splits_b exit (notes hold
    the launched grid). Pieces are aligned to lcm(min_block_kv, page_size) tokens: SGLang indexes
    tokens, a Plan needs page-aligned pieces (this matters only for pages larger than 32).

    max_kv_splits: the server argument --triton-attention-num-kv-splits, default 8, 1..1024.
    block_h: query heads per program of the grouped kernel, 16. min_block_kv: MIN_BLOCK_KV, 32.
    seq_len_scale_tokens: the 64 of max_L / 64. uniform_ratio: 1.25 (10 / 8).
    ctas_per_sm: occupancy for the plan, 0 = device.max_ctas_per_sm.
    """

    name: ClassVar[str] = "sglang-triton"
    max_kv_splits: int = 8
    block_h: int = 16
    min_block_kv: int = 32
    seq_len_scale_tokens: int = 64
    uniform_ratio: float = 1.25
    ctas_per_sm: int = 0

    def __post_init__(self) -> None:
        check_int("max_kv_splits", self.max_kv_splits, 1, 1024)
        check_int("block_h", self.block_h, 1, 1024)
        check_int("min_block_kv", self.min_block_kv, 1, 4096)
        check_int("seq_len_scale_tokens", self.seq_len_scale_tokens, 1, MAX_KV_LEN_TOKENS)
        check_float("uniform_ratio", self.uniform_ratio, 1.0, 1024.0)
        check_int("ctas_per_sm", self.ctas_per_sm, 0, 32)

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        batch, group, qo_heads = kv_lens.shape[0], shape.group_size, shape.num_qo_heads
        max_len, min_len = int(kv_lens.max()), int(kv_lens.min())
        if max_len < self.uniform_ratio * min_len:
            min_len = max_len
        s1 = min(cdiv(max_len, min_len), self.max_kv_splits)
        c1 = cdiv(max_len, s1)
        ext_len = np.float32(max_len) / np.float32(self.seq_len_scale_tokens)
        factor = np.maximum(np.log2(ext_len), np.float32(1.0))
        ext_cores = int(np.float32(device.sm_count) * factor)
        if group == 1:
            token_grid = batch * qo_heads
        else:
            token_grid = batch * cdiv(qo_heads, min(self.block_h, group))
        s2 = min(cdiv(ext_cores, token_grid), self.max_kv_splits)
        c2 = cdiv(max_len, s2)
        splits = np.maximum(cdiv(kv_lens, c1), cdiv(kv_lens, c2))
        align = lcm(self.min_block_kv, shape.page_size)
        chunk = cdiv(cdiv(kv_lens, splits), align) * align
        notes = plain_notes(
            chunk_1_tokens=c1,
            chunk_2_tokens=c2,
            ext_device_core_count=ext_cores,
            token_grid=token_grid,
            launched_ctas=token_grid * self.max_kv_splits,
        )
        return build_plan(
            kv_lens,
            chunk,
            num_kv_heads=shape.num_kv_heads,
            page_size=shape.page_size,
            schedule="static",
            ctas_per_sm=resolve_ctas_per_sm(self.ctas_per_sm, device),
            notes=notes,
        )


@dataclass(frozen=True)
class VllmTritonPolicy(PolicyBase):
    """vLLM unified Triton attention (the TRITON_ATTN backend), decode only.

    Sources: vllm `vllm/v1/attention/backends/triton_attn.py` (TritonAttentionMetadataBuilder:
    `seq_threshold_3D = MIN_LAUNCH_GRID_SIZE_2D // num_heads_kv`, MIN_LAUNCH_GRID_SIZE_2D = 128,
    NUM_PAR_SOFTMAX_SEGMENTS = 16) and `vllm/attention/ops/triton_unified_attention.py`
    (`unified_attention` runs the 2D kernel if `max_seqlen_q > 1 or num_seqs > seq_threshold_3D`,
    else the 3D kernel whose segment s covers tiles [s * t, (s + 1) * t) with
    t = ceil(L_b / (NUM_SEGMENTS_PER_SEQ * TILE_SIZE)), TILE_SIZE = 16 for 2-byte dtypes).
    Rule for a pure-decode batch:
      if B <= min_launch_grid // H_kv (H_kv = 8: B <= 16): segment_b = ceil(L_b / (16 * tile)) *
          tile tokens, rounded up to lcm(tile, page_size); request b gets ceil(L_b / segment_b)
          <= 16 pieces (the 3D kernel's later segments are empty and exit)
      else: no split (2D kernel).
    With full CUDA graphs vLLM snaps the threshold to the nearest capture size; not modelled.
    Older vLLM (before seq_threshold_3D) split only while (B // BLOCK_Q + B) * H_kv <= 128,
    BLOCK_Q = 16 // G, a lower threshold; this policy follows the current rule.

    num_segments: NUM_PAR_SOFTMAX_SEGMENTS, 1..1024. min_launch_grid: MIN_LAUNCH_GRID_SIZE_2D.
    tile_tokens: TILE_SIZE of the decode kernel. ctas_per_sm: 0 = device.max_ctas_per_sm.
    """

    name: ClassVar[str] = "vllm-triton"
    num_segments: int = 16
    min_launch_grid: int = 128
    tile_tokens: int = 16
    ctas_per_sm: int = 0

    def __post_init__(self) -> None:
        check_int("num_segments", self.num_segments, 1, 1024)
        check_int("min_launch_grid", self.min_launch_grid, 0, 1 << 20)
        check_int("tile_tokens", self.tile_tokens, 1, 4096)
        check_int("ctas_per_sm", self.ctas_per_sm, 0, 32)

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        batch, heads = kv_lens.shape[0], shape.num_kv_heads
        threshold = self.min_launch_grid // heads
        use_3d = batch <= threshold
        if use_3d:
            segment = cdiv(kv_lens, self.num_segments * self.tile_tokens) * self.tile_tokens
            align = lcm(self.tile_tokens, shape.page_size)
            chunk = cdiv(segment, align) * align
        else:
            chunk = kv_lens
        notes = plain_notes(
            seq_threshold_3d=threshold,
            kernel="3d" if use_3d else "2d",
            launched_ctas=batch * heads * (self.num_segments if use_3d else 1),
        )
        return build_plan(
            kv_lens,
            chunk,
            num_kv_heads=heads,
            page_size=shape.page_size,
            schedule="static",
            ctas_per_sm=resolve_ctas_per_sm(self.ctas_per_sm, device),
            notes=notes,
        )


@dataclass(frozen=True)
class FixedSplitPolicy(PolicyBase):
    """Batch-invariant split: every request is cut into chunks of chunk_tokens, whatever the batch.

    Source: FlashInfer `fixed_split_size` (PR 1675, seed flashinfer-pr1675-batch-invariant);
    SGLang's and vLLM's deterministic-inference modes use 2048 tokens for decode. A request's
    pieces (hence its reduction order, hence its output bits) depend on its own kv_len only.

    chunk_tokens: tokens, 1..1,048,576, rounded up to a multiple of page_size.
    schedule: one of SCHEDULES (default static). ctas_per_sm: 0 = device.max_ctas_per_sm.
    """

    name: ClassVar[str] = "fixed-split"
    chunk_tokens: int = 2048
    schedule: str = "static"
    ctas_per_sm: int = 0

    def __post_init__(self) -> None:
        check_int("chunk_tokens", self.chunk_tokens, 1, MAX_KV_LEN_TOKENS)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_int("ctas_per_sm", self.ctas_per_sm, 0, 32)

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        ctas = resolve_ctas_per_sm(self.ctas_per_sm, device)
        chunk = cdiv(self.chunk_tokens, shape.page_size) * shape.page_size
        return build_plan(
            kv_lens,
            chunk,
            num_kv_heads=shape.num_kv_heads,
            page_size=shape.page_size,
            schedule=self.schedule,
            ctas_per_sm=ctas,
            grid_size=persistent_grid(self.schedule, device.sm_count, ctas),
            notes=plain_notes(chunk_tokens=chunk),
        )


@dataclass(frozen=True)
class NoSplitPolicy(PolicyBase):
    """One CTA per (request, KV head): the FlashAttention-style decode kernel without split-KV.

    schedule: one of SCHEDULES (default static). ctas_per_sm: 0 = device.max_ctas_per_sm.
    """

    name: ClassVar[str] = "no-split"
    schedule: str = "static"
    ctas_per_sm: int = 0

    def __post_init__(self) -> None:
        check_choice("schedule", self.schedule, SCHEDULES)
        check_int("ctas_per_sm", self.ctas_per_sm, 0, 32)

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        ctas = resolve_ctas_per_sm(self.ctas_per_sm, device)
        return build_plan(
            kv_lens,
            kv_lens,
            num_kv_heads=shape.num_kv_heads,
            page_size=shape.page_size,
            schedule=self.schedule,
            ctas_per_sm=ctas,
            grid_size=persistent_grid(self.schedule, device.sm_count, ctas),
        )


__all__ = [
    "FA3Policy",
    "SGLangTritonPolicy",
    "VllmTritonPolicy",
    "FixedSplitPolicy",
    "NoSplitPolicy",
    "fa3_num_splits_heuristic",
]

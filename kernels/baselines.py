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


FA3_ARCHS = (0, 80, 86, 89, 90)


def fa3_arch(device: DeviceSpec) -> int:
    """The SM architecture FA3 sees, from the device's name: A100 80, L40S 89, else 90 (Hopper;
    FA3's Hopper path also stands in for newer cards)."""
    name = device.name.lower().replace(" ", "")
    if "a100" in name or "a800" in name:
        return 80
    if "l40" in name or "4090" in name or name.endswith("l4"):
        return 89
    if "a10" in name or "a40" in name or "3090" in name:
        return 86
    return 90


def fa3_tile(arch: int, head_dim: int, group_size: int, page_size: int) -> tuple[int, int]:
    """(kBlockM, kBlockN) that FA3's get_num_splits uses for bf16/fp16 decode with a page table.

    Dao-AILab/flash-attention hopper/tile_size.h (commit 0251105a2fb19d2957484b7f023cd8c115286ced):
    sm90 (tile_size_fwd_sm90, hdim_v = hdim, not local): hdim <= 64 -> {192, 128 if causal or
    paged_kv_non_TMA else 192}; hdim <= 128 -> {128, 128 if causal or paged non-TMA else 176};
    hdim 256 -> {128, 80}. The paged KV cache uses TMA only when page_size % kBlockN == 0 and
    seqlen_q * G > kBlockM (flash_api.cpp get_pagedkv_tma), so decode is non-TMA for G <= kBlockM;
    FA3 keeps is_causal off for hdim 64 and 256 at seqlen_q = 1 and the user's causal flag for
    128 (non-TMA gives 128 either way). sm8x (tile_size_fwd_sm8x, varlen_and_split): hdim 64 ->
    80; 128 -> 112; 256 -> 64 on sm80, 48 on sm86/89; kBlockM 128.
    """
    if arch >= 90:
        if head_dim <= 64:
            m, tma_n, paged_n = 192, 192, 128
        elif head_dim <= 128:
            m, tma_n, paged_n = 128, 176, 128
        else:
            return 128, 80
        tma = page_size % tma_n == 0 and group_size > m
        return m, tma_n if tma else paged_n
    if head_dim <= 64:
        return 128, 80
    if head_dim <= 128:
        return 128, 112
    return 128, 48 if arch in (86, 89) else 64


@dataclass(frozen=True)
class FA3Policy(PolicyBase):
    """FlashAttention-3 varlen decode (flash_attn_with_kvcache / varlen with a paged KV cache).

    Sources: Dao-AILab/flash-attention `hopper/heuristics.h` (num_splits_heuristic),
    `hopper/flash_api.cpp` (get_num_splits; `use_dynamic_split = is_varlen && b <= 992`, 992 =
    32 x 31, the most batches the one-CTA prepare kernel handles), `hopper/flash_prepare_scheduler.cu`
    (prepare_varlen_num_blocks) and `hopper/tile_scheduler.hpp` (VarlenDynamicPersistentTileScheduler).
    Tile (hopper/tile_size.h, what get_num_splits asks for; decode with a page table is
    PagedKVNonTMA unless page_size % kBlockN == 0 and G > kBlockM): see fa3_tile. kBlockN on sm90:
    128 for head_dim 64 and 128, 80 for 256; on sm80 80/112/64 and on sm86/89 80/112/48 (head_dim
    64/128/256; decode is varlen, so the varlen_and_split tiles).
    Rule (PackGQA: m_blocks = ceil(G / kBlockM), 1 for decode; nb_b = ceil(L_b / kBlockN)):
      seqlen_k = what get_num_splits sees: without scheduler metadata the page table's width,
            max pages x page_size of the batch (or seqlen_k_tokens when given)
      cap = num_splits if num_splits > 0 else num_splits_heuristic with total_mblocks =
            H_kv * m_blocks (decode is varlen: the prepare kernel's batch of 1),
            num_n_blocks = ceil(seqlen_k / kBlockN), one KV head = seqlen_k * 2 * head_dim * dtype
            bytes, max_splits (128)
      B <= max_dynamic_batch (992, the one-CTA prepare kernel):
               blocks_per_sm = ceil(sum_b m_blocks * nb_b * 1.1 * H_kv / S)   (float32, as on GPU)
               splits_b = clamp(ceil(nb_b / blocks_per_sm), 1, cap)
      B > 992: the prepare kernel runs several CTAs and sets every request to 1 split
            (flash_prepare_scheduler.cu: `if (gridDim.x > 1 || num_splits_static == 1)`).
      each split of request b covers ceil(nb_b / splits_b) n-blocks, so the actual count can be
      lower; FA3's empty splits exit, a Plan has none. FA3 cuts at n-block boundaries, a Plan at
      page boundaries: pieces are rounded up to the page, which can leave fewer pieces than FA3
      runs (notes `fa3_splits` keep FA3's own counts for batches up to 64 requests).
    Schedule: persistent, grid = S * ctas_per_sm capped to the tasks, longest item first. FA3 sorts
    requests (not items) heaviest first before its CTAs pull tiles from an atomic counter; the
    item-level longest-first order here approximates it.

    num_splits: FA3's argument: 0 = heuristic, 1 = off, n > 1 = the cap (the per-request dynamic
        rule still applies below max_dynamic_batch, as FA3 passes it to the prepare kernel).
    arch: SM architecture x 10 (80, 86, 89, 90); 0 = from the device name (a100 80, l40s 89,
        others 90). block_n_tokens: kBlockN, 0 = tile_size.h's for arch and head_dim.
    block_m_rows: kBlockM, 0 = tile_size.h's (192 for head_dim 64 on sm90, else 128).
    seqlen_k_tokens: the seqlen_k get_num_splits sees, 0 = the batch's page-table width (no
        scheduler metadata); with get_scheduler_metadata it is the max_seqlen_k passed.
    assumed_l2_bytes: FA3's fixed 50 MiB L2 assumption (not the device's L2).
    Others: the heuristic's constants (see fa3_num_splits_heuristic), blocks_margin the 1.1.
    ctas_per_sm: resident CTAs per SM of the persistent grid, 1..32, default 1.
    """

    name: ClassVar[str] = "fa3"
    num_splits: int = 0
    block_n_tokens: int = 0
    block_m_rows: int = 0
    arch: int = 0
    seqlen_k_tokens: int = 0
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
        check_int("block_n_tokens", self.block_n_tokens, 0, 4096)
        check_int("block_m_rows", self.block_m_rows, 0, 4096)
        if self.arch not in FA3_ARCHS:
            raise ValueError(f"arch: {self.arch!r} not allowed; allowed: "
                             + ", ".join(map(str, FA3_ARCHS)))
        check_int("seqlen_k_tokens", self.seqlen_k_tokens, 0, MAX_KV_LEN_TOKENS)
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
        arch = self.arch or fa3_arch(device)
        tile_m, tile_n = fa3_tile(arch, shape.head_dim, shape.group_size, shape.page_size)
        block_m = self.block_m_rows or tile_m
        block_n = self.block_n_tokens or tile_n
        m_blocks = cdiv(shape.group_size, block_m)
        n_blocks = cdiv(kv_lens, block_n)
        max_len = int(kv_lens.max())
        seqlen_k = self.seqlen_k_tokens or int(cdiv(max_len, shape.page_size) * shape.page_size)
        dynamic = batch <= self.max_dynamic_batch and self.num_splits != 1
        if self.num_splits > 0:
            cap = self.num_splits
        else:
            cap = fa3_num_splits_heuristic(
                heads * m_blocks,
                sms,
                cdiv(seqlen_k, block_n),
                m_blocks,
                seqlen_k * 2 * shape.head_dim * kv_element_bytes(shape),
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
            # num_splits=1, or more requests than the one-CTA prepare kernel takes: 1 split each.
            splits = np.ones(batch, dtype=np.int64)
        chunk = cdiv(n_blocks, splits) * block_n
        ctas = min(self.ctas_per_sm, device.max_ctas_per_sm)
        notes = plain_notes(
            num_splits_static=cap,
            dynamic_split=dynamic,
            blocks_per_sm=blocks_per_sm,
            num_m_blocks=m_blocks,
            arch=arch,
            block_n_tokens=block_n,
            block_m_rows=block_m,
            seqlen_k_tokens=seqlen_k,
        )
        if batch <= 64:
            notes["fa3_splits"] = [int(x) for x in cdiv(n_blocks, cdiv(n_blocks, splits))]
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
    the launched grid). With G > block_h a KV head has ceil(G / block_h) head groups, each a
    program that reads the whole KV range again (notes `kv_reads_per_task`; the simulator runs
    them all). Source of the grid: sglang
    python/sglang/srt/layers/attention/triton_ops/decode_attention.py, _decode_grouped_att_m_fwd
    (commit 03cd2ec4af85b66be8ef025238bc73c165416bdb). Pieces are aligned to lcm(min_block_kv, page_size) tokens: SGLang indexes
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
        # The grouped kernel's grid is (B, ceil(H_qo / min(block_h, G)), max_kv_splits); with
        # G > block_h each KV head gets ceil(G / block_h) programs that each read its KV.
        reads = cdiv(group, self.block_h) if group > self.block_h else 1
        notes = plain_notes(
            chunk_1_tokens=c1,
            chunk_2_tokens=c2,
            ext_device_core_count=ext_cores,
            token_grid=token_grid,
            launched_ctas=token_grid * self.max_kv_splits,
            kv_reads_per_task=reads,
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
    Grid: (B // BLOCK_Q + B) q-blocks x H_kv (x NUM_SEGMENTS for 3D), BLOCK_M = 16 if G <= 16 else
    next_pow2(G), BLOCK_Q = BLOCK_M // G; the B // BLOCK_Q extra q-blocks exit at once (notes
    `launched_ctas`; vllm/v1/attention/ops/triton_unified_attention.py, unified_attention, commit
    001394336840495fb529a33f71767ecbfdc88372). Empty 3D segments exit as well.
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
        # Grid (total_num_q_blocks, H_kv[, segments]) with total_num_q_blocks = B // BLOCK_Q + B
        # (an upper bound on the q-blocks; the extra ones find no query and exit).
        group = shape.group_size
        block_m = 16 if group <= 16 else 1 << (group - 1).bit_length()
        block_q = max(block_m // group, 1)
        q_blocks = batch // block_q + batch
        notes = plain_notes(
            seq_threshold_3d=threshold,
            kernel="3d" if use_3d else "2d",
            block_q=block_q,
            total_num_q_blocks=q_blocks,
            launched_ctas=q_blocks * heads * (self.num_segments if use_3d else 1),
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
    "FA3_ARCHS",
    "FA3Policy",
    "fa3_arch",
    "fa3_tile",
    "SGLangTritonPolicy",
    "VllmTritonPolicy",
    "FixedSplitPolicy",
    "NoSplitPolicy",
    "fa3_num_splits_heuristic",
]

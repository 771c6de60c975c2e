"""Split heuristics shipped in FlashInfer: its CUDA-core and tensor-core decode planners and the
TensorRT-LLM trtllm-gen FMHA launcher it bundles (with and without PR 3379's oversubscription).

Each policy reproduces the library's rule in this project's terms (see shared/BACKGROUND.md
section 3); every constant of the rule is a constructor parameter whose default is the library's.
Token counts are `_tokens`, page counts `_pages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvtune.kernels.plan import MAX_KV_LEN_TOKENS, AttentionShape, DeviceSpec, Plan, as_kv_lens, build_plan
from kvtune.kernels.policy_common import (
    PolicyBase,
    cdiv,
    check_bool,
    check_choice,
    check_int,
    plain_notes,
    smallest_fitting,
)


# G values FlashInfer's CUDA-core decode is compiled for (DISPATCH_GQA_GROUP_SIZE).
CUDA_CORE_GROUP_SIZES = (1, 2, 3, 4, 8)
TRTLLM_VERSIONS = ("0.5", "0.6")


@dataclass(frozen=True)
class FlashInferCudaCorePolicy(PolicyBase):
    """FlashInfer CUDA-core batch decode (`BatchDecodeWithPagedKVCacheWrapper`, no tensor cores).

    Source: flashinfer `include/flashinfer/attention/scheduler.cuh`,
    `BatchDecodeWithPagedKVCacheWorkEstimationDispatched` and
    `PartitionPagedKVCacheBinarySearchMinNumPagePerBatch`; `DecodeSplitKVIndptr` cuts the requests.
    Rule (pages_b = ceil(L_b / page_size)):
      max_grid = occupancy_ctas_per_sm * S   (cudaOccupancyMaxActiveBlocksPerMultiprocessor x SMs)
      if B * H_kv >= max_grid: no split
      else c = smallest chunk in pages, c >= max(min_chunk_tokens // page_size, 1), found by the
           library's binary search over [that minimum, max_b pages_b], with
           H_kv * sum_b ceil(pages_b / c) <= max_grid;
           if that leaves every request in one chunk and not enable_cuda_graph: no split
           (with CUDA graphs FlashInfer always runs the partition-KV kernel).
    Every request is cut into ceil(pages_b / c) chunks of c pages (the last one shorter).
    Static grid (items x KV heads) in request order. With enable_cuda_graph the grid is padded:
    DecodePlan sets padded_batch_size = max_grid // H_kv when split (else B), and the CTAs past the
    work exit (notes `launched_ctas`). When split-KV is on every request goes through the merge.
    Group sizes: the kernel is compiled for G in 1, 2, 3, 4, 8 only (DISPATCH_GQA_GROUP_SIZE,
    include/flashinfer/utils.cuh, v0.5.3 = 0e68a2febc58df99429f652769c5c485ca67fc39); any other G
    is refused with ValueError, as FlashInfer raises "Unsupported group_size".

    occupancy_ctas_per_sm: the kernel's occupancy, 0..32; 0 takes device.max_ctas_per_sm (a
        calibration's device holds the occupancy read from FlashInfer's own decisions; a live
        GPU's the preset's). Also the plan's ctas_per_sm.
    min_chunk_tokens: the 128 of `std::max(128 / page_size, 1U)`, tokens.
    enable_cuda_graph: FlashInfer's `use_cuda_graph`; keeps split-KV on.
    """

    name: ClassVar[str] = "flashinfer-cuda-core"
    occupancy_ctas_per_sm: int = 0
    min_chunk_tokens: int = 128
    enable_cuda_graph: bool = False

    def __post_init__(self) -> None:
        check_int("occupancy_ctas_per_sm", self.occupancy_ctas_per_sm, 0, 32)
        check_int("min_chunk_tokens", self.min_chunk_tokens, 1, MAX_KV_LEN_TOKENS)
        check_bool("enable_cuda_graph", self.enable_cuda_graph)

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        batch, heads, page = kv_lens.shape[0], shape.num_kv_heads, shape.page_size
        if shape.group_size not in CUDA_CORE_GROUP_SIZES:
            raise ValueError(
                f"group_size: {shape.group_size} (num_qo_heads / num_kv_heads) is not dispatched "
                "by FlashInfer's CUDA-core decode; allowed: "
                + ", ".join(map(str, CUDA_CORE_GROUP_SIZES))
            )
        # The library asks the driver, not the device model, so 0 means "whatever the GPU says".
        occupancy = self.occupancy_ctas_per_sm or device.max_ctas_per_sm
        max_grid = occupancy * device.sm_count
        pages = cdiv(kv_lens, page)
        min_pages = max(self.min_chunk_tokens // page, 1)
        if batch * heads >= max_grid:
            split, chunk_pages, new_batch = False, int(pages.max()), batch
        else:
            chunk_pages = smallest_fitting(
                min_pages, int(pages.max()), lambda c: heads * int(cdiv(pages, c).sum()) <= max_grid
            )
            new_batch = int(cdiv(pages, chunk_pages).sum())
            split = new_batch != batch or self.enable_cuda_graph
        chunk_tokens = chunk_pages * page if split else kv_lens
        padded = (max_grid // heads if split else batch) if self.enable_cuda_graph else None
        notes = plain_notes(
            max_grid=max_grid,
            occupancy_ctas_per_sm=occupancy,
            split_kv=split,
            chunk_pages=chunk_pages if split else None,
            new_batch_size=new_batch if split else batch,
            enable_cuda_graph=self.enable_cuda_graph,
        )
        if padded is not None:
            notes["padded_batch_size"] = int(padded)
            notes["launched_ctas"] = int(padded) * heads
        return build_plan(
            kv_lens,
            chunk_tokens,
            num_kv_heads=heads,
            page_size=page,
            schedule="static",
            ctas_per_sm=occupancy,
            notes=notes,
        )


def fa2_cta_tile_q(packed_qo_len: int, head_dim: int) -> int:
    """FlashInfer `FA2DetermineCtaTileQ` (include/flashinfer/utils.cuh) on sm80 and newer.

    128 if packed_qo_len > 64 and head_dim < 256; else 64 if packed_qo_len > 16; else 16. For
    decode the packed query length is G (one token times the query heads of a KV head).
    """
    if packed_qo_len > 64 and head_dim < 256:
        return 128
    return 64 if packed_qo_len > 16 else 16


@dataclass(frozen=True)
class FlashInferTensorCorePolicy(PolicyBase):
    """FlashInfer tensor-core decode (`use_tensor_cores=True`), which reuses the prefill planner.

    Source: flashinfer `include/flashinfer/attention/scheduler.cuh`, `PrefillPlan` ->
    `PrefillSplitQOKVIndptr` -> `PrefillBinarySearchKVChunkSize`; `fixed_split_size` is the
    batch-invariant mode of FlashInfer PR 1675 (seed flashinfer-pr1675-batch-invariant).
    Rule (pages_b = ceil(L_b / page_size), decode so q_len = 1):
      max_batch_if_split = (ctas_per_sm * S) // H_kv            (num_blocks_per_sm = 2 fixed)
      tile_q = fa2_cta_tile_q(G, head_dim); tiles_q = ceil(G / tile_q)  (1 for G <= 128)
      c = smallest chunk in pages, c >= max(min_chunk_tokens // page_size, 1), by the library's
          binary search over [that minimum, max_b pages_b], with
          sum_b tiles_q * ceil(pages_b / c) <= max_batch_if_split
      split-KV is on iff c < max_b pages_b (some request has more than one chunk). When nothing
      fits the search ends at max pages: no split. With G <= 16, split is therefore off as soon as
      B > floor(2S / H_kv) (132 SMs, H_kv = 8: B >= 34).
      disable_split_kv: one chunk per request. fixed_split_size (pages): c = fixed_split_size,
      split on iff some request gets more than one chunk (disable_split_kv wins over it).
      enable_cuda_graph (PrefillSplitQOKVIndptr, scheduler.cuh v0.5.3): the search is the same but
      split-KV is always on (`enable_cuda_graph || low < max_kv_len`, not with disable_split_kv or
      fixed_split_size), and the grid is padded to padded_batch_size = max(max_batch_if_split,
      ceil(B * G / tile_q) + B - 1) work items per KV head; CTAs past the work exit (notes
      `launched_ctas`). FlashInfer refuses a plan with more work items than that (fixed splits).
    Static grid in request order. The plan's ctas_per_sm is ctas_per_sm, capped by the device.
    When split-KV is on every request goes through the merge (partials for all).

    ctas_per_sm: the planner's fixed `num_blocks_per_sm`, 1..32 (FlashInfer: 2).
    min_chunk_tokens: the 128 of `std::max(128 / page_size, 1U)`, tokens.
    fixed_split_size: None (FlashInfer's -1) or a chunk in pages, 1..1,048,576.
    disable_split_kv: FlashInfer's `disable_split_kv`.
    enable_cuda_graph: FlashInfer's `use_cuda_graph` (serving engines decode under CUDA graphs).
    """

    name: ClassVar[str] = "flashinfer-tensor-core"
    ctas_per_sm: int = 2
    min_chunk_tokens: int = 128
    fixed_split_size: int | None = None
    disable_split_kv: bool = False
    enable_cuda_graph: bool = False

    def __post_init__(self) -> None:
        check_int("ctas_per_sm", self.ctas_per_sm, 1, 32)
        check_int("min_chunk_tokens", self.min_chunk_tokens, 1, MAX_KV_LEN_TOKENS)
        if self.fixed_split_size is not None:
            check_int("fixed_split_size", self.fixed_split_size, 1, MAX_KV_LEN_TOKENS)
        check_bool("disable_split_kv", self.disable_split_kv)
        check_bool("enable_cuda_graph", self.enable_cuda_graph)

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        heads, page, group = shape.num_kv_heads, shape.page_size, shape.group_size
        pages = cdiv(kv_lens, page)
        max_pages = int(pages.max())
        tile_q = fa2_cta_tile_q(group, shape.head_dim)
        tiles_q = cdiv(group, tile_q)
        max_batch_if_split = (self.ctas_per_sm * device.sm_count) // heads
        if self.disable_split_kv:
            split, chunk_pages = False, max_pages
        elif self.fixed_split_size is not None:
            chunk_pages = self.fixed_split_size
            split = bool((pages > chunk_pages).any())
        else:
            chunk_pages = smallest_fitting(
                max(self.min_chunk_tokens // page, 1),
                max(max_pages, 1),
                lambda c: tiles_q * int(cdiv(pages, c).sum()) <= max_batch_if_split,
            )
            split = chunk_pages < max_pages or self.enable_cuda_graph
        chunk_tokens = chunk_pages * page if split else kv_lens
        items = int(cdiv(pages, chunk_pages).sum()) if split else kv_lens.shape[0]
        work = tiles_q * items
        padded = work
        if self.enable_cuda_graph:
            batch = kv_lens.shape[0]
            padded = max(max_batch_if_split, int(cdiv(batch * group, tile_q)) + batch - 1)
            if work > padded:
                raise ValueError(
                    f"fixed_split_size: {work} work items exceed FlashInfer's CUDA-graph padded "
                    f"batch of {padded}; FlashInfer refuses this (disable the CUDA graph or use a "
                    "larger fixed_split_size)"
                )
        notes = plain_notes(
            max_batch_if_split=max_batch_if_split,
            cta_tile_q=tile_q,
            split_kv=split,
            chunk_pages=chunk_pages if split else None,
            new_batch_size=work,
            padded_batch_size=padded,
            launched_ctas=padded * heads,
            enable_cuda_graph=self.enable_cuda_graph,
        )
        return build_plan(
            kv_lens,
            chunk_tokens,
            num_kv_heads=heads,
            page_size=page,
            schedule="static",
            ctas_per_sm=min(self.ctas_per_sm, device.max_ctas_per_sm),
            notes=notes,
        )


@dataclass(frozen=True)
class TrtllmGenPolicy(PolicyBase):
    """TensorRT-LLM trtllm-gen FMHA generation kernels as FlashInfer launches them.

    Source: flashinfer `include/flashinfer/trtllm/fmha/fmhaKernels.cuh`,
    `TllmGenFmhaKernel::computeCtaAndClusterConfig` (multiCtasKv mode) and
    `selectGqGenerationKernel` (tileSizeQ = 8/16/32/64/128, the smallest >= G, so one CTA holds all
    G query heads of a KV head for G <= 128).
    Rule (q_len = 1, max_L = the longest request of the batch):
      base = B * H_kv * ceil(G / q_heads_per_cta)                  (numCtasX * numCtasY * numCtasZ)
      maxNumCtasPerSeqKv = ceil(max_L / tile_kv_tokens) in FlashInfer 0.5.x (v0.5.3,
          0e68a2febc58df99429f652769c5c485ca67fc39), ceil(max_L / (2 * tile_kv_tokens)) from
          0.6.0 (4230a48aedd21fc8823249147c4b8b363bb0dc36: "the factor of 2 ... reduction overhead")
      splits = min(maxNumCtasPerSeqKv, max(1, S // base))            (numCtasPerSeqKv)
      chunk = ceil(ceil(max_L / tile_kv_tokens) / splits) * tile_kv_tokens  (seqLenPerCtaKv)
    The split count is the same for every request: the kernel launches base * splits CTAs and
    the CTAs past a shorter request's end exit at once. A Plan has no empty pieces, so a request
    here gets ceil(L_b / chunk) pieces and the launched grid is recorded in notes
    (`launched_ctas`). Static grid in request order. (When splits is 1 the library also switches
    to its persistent tile scheduler; that changes no split, and the plan stays static.)
    Serving engines pass max_seq_len; here it is the batch's longest request.

    tile_kv_tokens: the kernel's tileSizeKv (mStepKv), 1..4096, default 128.
    q_heads_per_cta: the largest tileSizeQ, 1..1024, default 128.
    ctas_per_sm: CTAs one SM holds for these kernels, 1..32, default 1.
    flashinfer_version: "0.5" (default, the pinned FlashInfer 0.5.3) or "0.6" (0.6.0 and later).
    """

    name: ClassVar[str] = "trtllm"
    tile_kv_tokens: int = 128
    q_heads_per_cta: int = 128
    ctas_per_sm: int = 1
    flashinfer_version: str = "0.5"

    def __post_init__(self) -> None:
        check_int("tile_kv_tokens", self.tile_kv_tokens, 1, 4096)
        check_int("q_heads_per_cta", self.q_heads_per_cta, 1, 1024)
        check_int("ctas_per_sm", self.ctas_per_sm, 1, 32)
        check_choice("flashinfer_version", self.flashinfer_version, TRTLLM_VERSIONS)

    def max_ctas_per_seq_kv(self, max_len: int) -> int:
        """maxNumCtasPerSeqKv of the FlashInfer version (see the class docstring)."""
        factor = 1 if self.flashinfer_version == "0.5" else 2
        return int(cdiv(max_len, factor * self.tile_kv_tokens))

    def _splits(self, max_len: int, base: int, sm_count: int) -> tuple[int, dict]:
        max_ctas_per_seq_kv = self.max_ctas_per_seq_kv(max_len)
        splits = min(max_ctas_per_seq_kv, max(1, sm_count // base))
        return splits, {"max_ctas_per_seq_kv": max_ctas_per_seq_kv, "base_splits": splits}

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        heads, batch = shape.num_kv_heads, kv_lens.shape[0]
        max_len = int(kv_lens.max())
        base = batch * heads * cdiv(shape.group_size, self.q_heads_per_cta)
        splits, facts = self._splits(max_len, base, device.sm_count)
        chunk = cdiv(cdiv(max_len, self.tile_kv_tokens), splits) * self.tile_kv_tokens
        notes = plain_notes(
            base_ctas=base, splits=splits, chunk_tokens=chunk, launched_ctas=base * splits, **facts
        )
        return build_plan(
            kv_lens,
            chunk,
            num_kv_heads=heads,
            page_size=shape.page_size,
            schedule="static",
            ctas_per_sm=min(self.ctas_per_sm, device.max_ctas_per_sm),
            notes=notes,
        )


@dataclass(frozen=True)
class TrtllmOversubPolicy(TrtllmGenPolicy):
    """trtllm-gen with KV-split oversubscription, FlashInfer PR 3379 (seed
    flashinfer-pr3379-kv-split-oversubscription).

    Source: the PR's change to `computeCtaAndClusterConfig` in
    `include/flashinfer/trtllm/fmha/fmhaKernels.cuh`. After the base rule of `trtllm`:
      desired = ceil(max_L / min_tokens_per_cta)
      if splits < desired and desired > min_desired_splits:
          splits = max(splits, min(desired, max_waves * S // base,
                                   maxNumCtasPerSeqKv, max_splits))
    (maxNumCtasPerSeqKv of the FlashInfer version, with 0.6's factor 2 when flashinfer_version
    is "0.6": the PR keeps the launcher's cap so that every CTA has KV to read.)
    then chunk and pieces as in `trtllm`. The PR ships the rule behind environment variables
    (FLASHINFER_KV_OVERSUB_MIN_TOKENS_PER_CTA, FLASHINFER_KV_OVERSUB_MAX_WAVES,
    FLASHINFER_KV_OVERSUB_MAX_SPLITS), off by default (max waves 1); this policy is the rule
    enabled with the PR's constants: kMinTokensPerCta = 2048, kMaxOccupancyWaves = 16,
    kMaxSplits = 32, and 4 as the smallest desired split count worth it.

    min_tokens_per_cta: tokens, 1..1,048,576. max_waves: 1..1024. max_splits: 1..4096.
    min_desired_splits: 0..4096.
    """

    name: ClassVar[str] = "trtllm-oversub"
    min_tokens_per_cta: int = 2048
    max_waves: int = 16
    max_splits: int = 32
    min_desired_splits: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("min_tokens_per_cta", self.min_tokens_per_cta, 1, MAX_KV_LEN_TOKENS)
        check_int("max_waves", self.max_waves, 1, 1024)
        check_int("max_splits", self.max_splits, 1, 4096)
        check_int("min_desired_splits", self.min_desired_splits, 0, 4096)

    def _splits(self, max_len: int, base: int, sm_count: int) -> tuple[int, dict]:
        splits, facts = super()._splits(max_len, base, sm_count)
        desired = cdiv(max_len, self.min_tokens_per_cta)
        applies = splits < desired and desired > self.min_desired_splits
        if applies:
            cap = min(
                desired,
                self.max_waves * sm_count // base,
                self.max_ctas_per_seq_kv(max_len),
                self.max_splits,
            )
            splits = max(splits, cap)
        return splits, {**facts, "desired_splits": desired, "oversub_condition": applies}


__all__ = [
    "CUDA_CORE_GROUP_SIZES",
    "TRTLLM_VERSIONS",
    "FlashInferCudaCorePolicy",
    "FlashInferTensorCorePolicy",
    "TrtllmGenPolicy",
    "TrtllmOversubPolicy",
    "fa2_cta_tile_q",
]

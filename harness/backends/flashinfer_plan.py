"""How a kvtune Plan maps onto FlashInfer 0.5.3's batch decode: pure logic, no flashinfer, no GPU.

FlashInfer's `BatchDecodeWithPagedKVCacheWrapper` takes a split in only three forms, all through
`plan()` (flashinfer/decode.py and include/flashinfer/attention/scheduler.cuh of 0.5.3):
  - nothing: the library's own planner decides (tensor-core path: `PrefillSplitQOKVIndptr` with
    `PrefillBinarySearchKVChunkSize`; CUDA-core path: `BatchDecodeWithPagedKVCacheWorkEstimation`);
  - `fixed_split_size=c` (pages; tensor-core path only): every request is cut into
    ceil(pages_b / c) pieces of c pages, the last one shorter, pieces launched in request order;
  - `disable_split_kv=True` (tensor-core path): one piece per request.
So a kvtune plan is expressible when its schedule is `static` and every split request is cut into
pieces of one common chunk c (pages), every piece but the last exactly c, and no unsplit request
is longer than c. Anything else (per-request chunk sizes, persistent or heaviest-first orders) is
reported as unsupported with a one-line reason, never approximated.

A plan that is exactly what kvtune's model of FlashInfer's own planner gives (policies
`flashinfer-tensor-core` / `flashinfer-cuda-core` with their default parameters) is run with
nothing passed, so the row is FlashInfer's own heuristic; after `plan()` the backend reads back
what FlashInfer decided (`decision_from_plan_info`) and records whether it agrees.

Float workspace: with split-KV on, `plan()` carves the partial outputs and log-sum-exps of every
piece out of the float workspace (tensor-core: `batch_prefill_tmp_v` + `batch_prefill_tmp_s`,
padded to cta_tile_q rows; CUDA-core: `batch_decode_tmp_v` + `batch_decode_tmp_s`), and fails
when the buffer is too small. `workspace_bytes` sizes it from the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kvtune.kernels.baselines import FixedSplitPolicy
from kvtune.kernels.baselines_flashinfer import (
    FlashInferCudaCorePolicy,
    FlashInferTensorCorePolicy,
    fa2_cta_tile_q,
)
from kvtune.kernels.plan import AttentionShape, DeviceSpec, Plan, SplitParams
from kvtune.kernels.policy_common import cdiv

PATHS = ("tensor-core", "cuda-core")
BACKEND_PATHS = ("auto",) + PATHS
PLANNERS = ("flashinfer", "fixed-split", "no-split")
# DISPATCH_GQA_GROUP_SIZE of include/flashinfer/utils.cuh: the CUDA-core decode kernels exist
# for these query heads per KV head only.
CUDA_CORE_GROUP_SIZES = (1, 2, 3, 4, 8)
# PrefillPlan's fixed `num_blocks_per_sm` (tensor-core path).
TENSOR_CORE_CTAS_PER_SM = 2
# Upper bound of resident CTAs per SM on NVIDIA GPUs so far: bounds what the CUDA-core planner
# (occupancy x SMs) can ask for without knowing the occupancy it will measure.
MAX_RESIDENT_CTAS_PER_SM = 32
# Plan notes that identify the policy of kernels/baselines_flashinfer.py that made a plan.
PLANNER_NOTE_KEYS = {
    "tensor-core": ("max_batch_if_split", "cta_tile_q"),
    "cuda-core": ("max_grid", "occupancy_ctas_per_sm"),
}
DEFAULT_PLANNER_POLICIES = {
    "tensor-core": FlashInferTensorCorePolicy,
    "cuda-core": FlashInferCudaCorePolicy,
}
# The study hook (studies/space.py): FlashInfer takes one chunk per batch, so a study on this
# backend varies min_tokens_per_cta alone; these knobs are pinned to values that never bind a
# fixed chunk (no budget, no cap on pieces) and to the tensor-core planner's 2 CTAs per SM.
SUPPORTED_SCHEDULES = ("static",)
FIXED_SPLIT_PARAMS = {"max_waves": 16, "max_splits": 128, "ctas_per_sm": TENSOR_CORE_CTAS_PER_SM}
FLOAT_BYTES = 4  # partial outputs and log-sum-exps are float32
ALIGN_BYTES = 16  # AlignedAllocator alignment of both workspace blocks


class NotExpressible(ValueError):
    """FlashInfer cannot run the plan as planned; the message is one line."""


def check_path(path: str) -> str:
    if path not in BACKEND_PATHS:
        raise ValueError(f"path: {path!r} not allowed; allowed: {', '.join(BACKEND_PATHS)}")
    return path


# -- the page table ------------------------------------------------------------------------------

def flashinfer_page_table(cache):
    """(kv_indptr, kv_indices, kv_last_page_len) of a kernels.paged.PagedKVCache, as FlashInfer's
    plan() takes them: int32 tensors on the cache's device, [B + 1], [total pages], [B].

    Request b owns pages kv_indices[kv_indptr[b]:kv_indptr[b + 1]] in token order and its last
    page holds kv_last_page_len[b] tokens (1..page_size): the cache's own CSR table, unchanged.
    """
    import torch

    indptr = cache.page_indptr.to(torch.int32)
    indices = cache.page_indices.to(torch.int32)
    last = torch.from_numpy(cache.last_page_lens.astype(np.int32)).to(cache.device)
    return indptr, indices, last


# -- what FlashInfer can express -----------------------------------------------------------------

def fixed_chunk_pages(plan: Plan) -> int | None:
    """The one chunk (pages) every split request of `plan` is cut into, or None when no request
    is split. Raises NotExpressible (one line) when the pieces are not one fixed chunk."""
    page = plan.page_size
    pages = cdiv(plan.kv_lens, page)
    order = np.lexsort((plan.work_split, plan.work_request))
    req = plan.work_request[order]
    length = (plan.work_kv_end - plan.work_kv_start)[order]
    last = np.ones(req.shape[0], dtype=bool)
    last[:-1] = req[1:] != req[:-1]
    split_req = plan.splits[req] > 1
    inner = split_req & ~last  # every piece of a split request but its last
    if not inner.any():
        return None
    inner_len = length[inner]
    chunk_tokens = int(inner_len[0])
    if (inner_len != chunk_tokens).any():
        other = int(inner_len[inner_len != chunk_tokens][0])
        r_a = int(req[inner][0])
        r_b = int(req[inner][inner_len != chunk_tokens][0])
        raise NotExpressible(
            f"per-request chunk sizes (request {r_a} cut into {chunk_tokens}-token pieces, request "
            f"{r_b} into {other}-token pieces); FlashInfer takes one fixed_split_size per batch")
    chunk = chunk_tokens // page  # inner pieces end on a page boundary: a whole number of pages
    longest_last = int(length[last & split_req].max())
    if longest_last > chunk_tokens:
        raise NotExpressible(
            f"a split request's last piece ({longest_last} tokens) is longer than its other pieces "
            f"({chunk_tokens}); FlashInfer's fixed_split_size makes only the last piece shorter")
    whole = plan.splits == 1
    if whole.any() and int(pages[whole].max()) > chunk:
        b = int(np.flatnonzero(whole & (pages > chunk))[0])
        raise NotExpressible(
            f"request {b} ({int(plan.kv_lens[b])} tokens) is left whole although longer than the "
            f"{chunk_tokens}-token chunk of the split requests; fixed_split_size would cut it")
    return chunk


def structural_reason(plan: Plan) -> str | None:
    """Why FlashInfer cannot run `plan` as planned (schedule or pieces), or None."""
    if plan.schedule != "static":
        kind = "persistent" if plan.is_persistent else "heaviest-first"
        return (f"schedule {plan.schedule!r} ({kind} order): FlashInfer's batch decode launches "
                "one CTA per piece in request order; only 'static' plans can be run")
    try:
        fixed_chunk_pages(plan)
    except NotExpressible as exc:
        return str(exc)
    return None


def planner_signature(plan: Plan) -> str | None:
    """The FlashInfer path whose kvtune planner policy made `plan` (by its notes), or None."""
    for path, keys in PLANNER_NOTE_KEYS.items():
        if all(k in plan.notes for k in keys):
            return path
    return None


def same_pieces(a: Plan, b: Plan) -> bool:
    """True when two plans cut the same requests into the same pieces in the same order."""
    return (np.array_equal(a.kv_lens, b.kv_lens) and np.array_equal(a.splits, b.splits)
            and np.array_equal(a.work_request, b.work_request)
            and np.array_equal(a.work_kv_start, b.work_kv_start)
            and np.array_equal(a.work_kv_end, b.work_kv_end))


def own_planner_path(plan: Plan, shape: AttentionShape, device: DeviceSpec) -> str | None:
    """The path ("tensor-core"/"cuda-core") whose FlashInfer planner `plan` reproduces: made by
    that path's kvtune policy and identical to what the policy plans with default parameters."""
    path = planner_signature(plan)
    if path is None:
        return None
    # Default parameters, in the plan's CUDA-graph mode (a policy parameter of both planners).
    graph = bool(plan.notes.get("enable_cuda_graph", False))
    try:
        default = DEFAULT_PLANNER_POLICIES[path](enable_cuda_graph=graph).plan(
            plan.kv_lens, shape, device)
    except ValueError:  # e.g. a group size the CUDA-core planner refuses on this shape
        return None
    return path if same_pieces(plan, default) else None


@dataclass(frozen=True)
class FlashInferSetting:
    """How FlashInfer is asked to run one plan.

    path: "tensor-core" (use_tensor_cores=True) or "cuda-core". planner: "flashinfer" (nothing
    passed: the library decides), "fixed-split" (fixed_split_size=fixed_split_pages) or
    "no-split" (disable_split_kv=True). chunk_pages: the chunk of kvtune's plan (None: no request
    split). items: the pieces of kvtune's plan (what FlashInfer's padded batch should count).
    cuda_graph: the wrapper is made with use_cuda_graph=True (fixed page-table buffers; FlashInfer
    then keeps split-KV on and pads the grid to padded_items pieces, per query tile).
    """

    path: str
    planner: str
    chunk_pages: int | None
    items: int
    fixed_split_pages: int | None = None
    cuda_graph: bool = False
    padded_items: int | None = None

    @property
    def use_tensor_cores(self) -> bool:
        return self.path == "tensor-core"

    def plan_kwargs(self) -> dict:
        """The split arguments of wrapper.plan() (empty: FlashInfer's own planner)."""
        if self.planner == "fixed-split":
            return {"fixed_split_size": int(self.fixed_split_pages)}
        if self.planner == "no-split":
            return {"disable_split_kv": True}
        return {}

    def to_extra(self) -> dict:
        return {
            "fi_path": self.path,
            "fi_planner": self.planner,
            "fi_fixed_split_pages": self.fixed_split_pages,
            "fi_disable_split_kv": self.planner == "no-split",
            "fi_cuda_graph": self.cuda_graph,
            "fi_padded_items": self.padded_items,
        }


def choose_setting(plan: Plan, shape: AttentionShape, device: DeviceSpec,
                   path: str = "auto", cuda_graph: bool = False) -> FlashInferSetting:
    """See _choose_setting; cuda_graph (the backend setting) or a plan made with
    enable_cuda_graph runs it with use_cuda_graph=True and FlashInfer's padded grid."""
    setting = _choose_setting(plan, shape, device, path)
    graph = bool(cuda_graph or plan.notes.get("enable_cuda_graph", False))
    if not graph:
        return setting
    if setting.path == "cuda-core":
        occupancy = int(plan.notes.get("occupancy_ctas_per_sm", device.max_ctas_per_sm))
        split = bool(plan.notes.get("split_kv", False))
        batch = plan.batch_size
        padded = occupancy * device.sm_count // shape.num_kv_heads if split else batch
    else:
        batch, group = plan.batch_size, shape.group_size
        tile = fa2_cta_tile_q(group, shape.head_dim)
        padded = max(TENSOR_CORE_CTAS_PER_SM * device.sm_count // shape.num_kv_heads,
                     cdiv(batch * group, tile) + batch - 1)
    return replace(setting, cuda_graph=True, padded_items=int(padded))


def _choose_setting(plan: Plan, shape: AttentionShape, device: DeviceSpec,
                    path: str = "auto") -> FlashInferSetting:
    """The FlashInfer call that runs `plan` exactly, for a backend restricted to `path`.

    auto: a plan identical to kvtune's model of a FlashInfer planner runs that planner on its own
    path with nothing passed; every other expressible plan runs on the tensor-core path with
    fixed_split_size (or disable_split_kv when nothing is split). tensor-core: the same, but the
    CUDA-core planner's plans run as fixed splits on the tensor-core path. cuda-core: only plans
    of FlashInfer's own CUDA-core planner (0.5.3 takes fixed_split_size on the tensor-core path
    only). Raises NotExpressible (one line) otherwise.
    """
    check_path(path)
    reason = structural_reason(plan)
    if reason is not None:
        raise NotExpressible(reason)
    chunk = fixed_chunk_pages(plan)
    own = own_planner_path(plan, shape, device)
    if path == "cuda-core" and own != "cuda-core":
        raise NotExpressible(
            "backend path cuda-core runs only FlashInfer's own CUDA-core planner (policy "
            "flashinfer-cuda-core with default parameters); FlashInfer 0.5.3 takes "
            "fixed_split_size on the tensor-core path only")
    if own == "cuda-core" and path != "tensor-core":
        if shape.group_size not in CUDA_CORE_GROUP_SIZES:
            raise NotExpressible(
                f"FlashInfer's CUDA-core decode has kernels for group sizes "
                f"{', '.join(map(str, CUDA_CORE_GROUP_SIZES))} only; this shape has "
                f"G={shape.group_size}")
        return FlashInferSetting("cuda-core", "flashinfer", chunk, plan.num_items)
    tiles_q = tensor_core_tiles_q(shape)
    if own == "tensor-core":
        return FlashInferSetting("tensor-core", "flashinfer", chunk, plan.num_items * tiles_q)
    if chunk is None:
        return FlashInferSetting("tensor-core", "no-split", None, plan.num_items * tiles_q)
    return FlashInferSetting("tensor-core", "fixed-split", chunk, plan.num_items * tiles_q,
                             fixed_split_pages=chunk)


def unsupported_reason(plan: Plan, path: str = "auto") -> str | None:
    """What Backend.unsupported_reason answers (no shape needed): the schedule and pieces, and on
    a cuda-core-only backend the planner the plan came from. The remaining checks that need the
    attention shape (default parameters, group size) are made by choose_setting in verify."""
    check_path(path)
    reason = structural_reason(plan)
    if reason is None and path == "cuda-core" and planner_signature(plan) != "cuda-core":
        reason = ("backend path cuda-core runs only FlashInfer's own CUDA-core planner (policy "
                  "flashinfer-cuda-core); FlashInfer 0.5.3 takes fixed_split_size on the "
                  "tensor-core path only")
    return reason


def flashinfer_splits(kv_lens, page_size: int, chunk_pages: int | None) -> np.ndarray:
    """Pieces per request under fixed_split_size=chunk_pages (None: disable_split_kv), as
    PrefillSplitQOKVIndptr cuts them: ceil(pages_b / chunk_pages), every request at least one."""
    pages = np.maximum(cdiv(np.asarray(kv_lens, dtype=np.int64), page_size), 1)
    if chunk_pages is None:
        return np.ones_like(pages)
    return cdiv(pages, int(chunk_pages))


# -- the workspace -------------------------------------------------------------------------------

def tensor_core_tiles_q(shape: AttentionShape) -> int:
    """Query tiles per request on the tensor-core path: ceil(G / cta_tile_q), cta_tile_q from
    FlashInfer's FA2DetermineCtaTileQ."""
    return cdiv(shape.group_size, fa2_cta_tile_q(shape.group_size, shape.head_dim))


def float_workspace_bytes(path: str, pieces: int, shape: AttentionShape) -> int:
    """Float workspace bytes FlashInfer's plan() takes for `pieces` padded pieces with split-KV on
    (0 pieces: split-KV off, nothing taken).

    tensor-core: tmp_v = H_qo x pieces x cta_tile_q x head_dim x 4, tmp_s = H_qo x pieces x
    cta_tile_q x 4 (pieces counted per query tile); cuda-core: the same without cta_tile_q.
    The second block starts 16-byte aligned.
    """
    if path not in PATHS:
        raise ValueError(f"path: {path!r} not allowed; allowed: {', '.join(PATHS)}")
    if pieces < 0:
        raise ValueError(f"pieces: {pieces} must be >= 0")
    rows = fa2_cta_tile_q(shape.group_size, shape.head_dim) if path == "tensor-core" else 1
    tmp_v = shape.num_qo_heads * pieces * rows * shape.head_dim * FLOAT_BYTES
    tmp_s = shape.num_qo_heads * pieces * rows * FLOAT_BYTES
    return cdiv(tmp_v, ALIGN_BYTES) * ALIGN_BYTES + tmp_s


def own_planner_max_pieces(path: str, shape: AttentionShape, device: DeviceSpec) -> int:
    """Most padded pieces FlashInfer's own planner can choose when it splits.

    tensor-core: its binary search keeps the pieces (per query tile) at most
    max_batch_size_if_split = 2 x S // H_kv. cuda-core: pieces x H_kv at most occupancy x S,
    bounded here with MAX_RESIDENT_CTAS_PER_SM because the occupancy is measured by the library.
    """
    if path == "tensor-core":
        return TENSOR_CORE_CTAS_PER_SM * device.sm_count // shape.num_kv_heads
    return MAX_RESIDENT_CTAS_PER_SM * device.sm_count // shape.num_kv_heads


def workspace_bytes(setting: FlashInferSetting, shape: AttentionShape,
                    device: DeviceSpec) -> tuple[int, int]:
    """(bytes kvtune's plan needs, bytes to allocate) of float workspace for `setting`.

    The need is exact for fixed and no splits. Under FlashInfer's own planner the library may
    decide otherwise than kvtune's model, so the allocation also covers its largest choice.
    """
    split = setting.chunk_pages is not None
    pieces = setting.items
    if setting.cuda_graph:
        # FlashInfer sizes tmp for the padded batch; its own planner keeps split-KV on.
        split = split or setting.planner == "flashinfer"
        pieces = max(pieces, setting.padded_items or 0)
    need = float_workspace_bytes(setting.path, pieces if split else 0, shape)
    if setting.planner != "flashinfer":
        return need, need
    bound = float_workspace_bytes(setting.path, own_planner_max_pieces(setting.path, shape, device),
                                  shape)
    return need, max(need, bound)


# -- reading back what FlashInfer decided --------------------------------------------------------

@dataclass(frozen=True)
class FlashInferDecision:
    """What FlashInfer's plan() decided: split_kv on or off, the chunk in tokens (valid only with
    split_kv on), and the padded pieces (per query tile on the tensor-core path)."""

    split_kv: bool
    chunk_tokens: int | None
    items: int


# Positions in PrefillPlanInfo::ToVector / DecodePlanInfo::ToVector (scheduler.cuh, 0.5.3).
PLAN_INFO_LAYOUT = {
    "tensor-core": {"length": 15, "padded_batch_size": 0, "kv_chunk_size_ptr_offset": 9,
                    "split_kv": 14},
    "cuda-core": {"length": 10, "padded_batch_size": 0, "kv_chunk_size_ptr_offset": 7,
                  "split_kv": 9},
}


def chunk_size_offset(path: str, plan_info) -> int:
    """Byte offset of the kv chunk size (int32, tokens) in the page-locked int workspace."""
    layout = PLAN_INFO_LAYOUT[path]
    info = [int(x) for x in plan_info]
    if len(info) != layout["length"]:
        raise ValueError(f"plan_info: {len(info)} entries, expected {layout['length']} for the "
                         f"{path} path of FlashInfer 0.5.3")
    return info[layout["kv_chunk_size_ptr_offset"]]


def decision_from_plan_info(path: str, plan_info, chunk_tokens: int) -> FlashInferDecision:
    """FlashInfer's decision from the plan_info vector and the chunk size read at
    chunk_size_offset. ValueError when the vector is not 0.5.3's layout for `path`."""
    layout = PLAN_INFO_LAYOUT[path]
    info = [int(x) for x in plan_info]
    if len(info) != layout["length"]:
        raise ValueError(f"plan_info: {len(info)} entries, expected {layout['length']} for the "
                         f"{path} path of FlashInfer 0.5.3")
    split = bool(info[layout["split_kv"]])
    return FlashInferDecision(split, int(chunk_tokens) if split else None,
                              info[layout["padded_batch_size"]])


def disagreement(setting: FlashInferSetting, decision: FlashInferDecision,
                 page_size: int) -> str | None:
    """How FlashInfer's decision differs from kvtune's plan, in one line, or None."""
    planned_split = setting.chunk_pages is not None
    if decision.split_kv != planned_split:
        return (f"FlashInfer chose split_kv={decision.split_kv} where kvtune's plan has "
                f"split_kv={planned_split}")
    if planned_split and decision.chunk_tokens != setting.chunk_pages * page_size:
        return (f"FlashInfer chose {decision.chunk_tokens}-token chunks where kvtune's plan has "
                f"{setting.chunk_pages * page_size}")
    if decision.items != setting.items:
        return f"FlashInfer planned {decision.items} pieces where kvtune's plan has {setting.items}"
    return None


# -- tuning on this backend ----------------------------------------------------------------------

def chunk_policy(params: SplitParams) -> FixedSplitPolicy:
    """The plan rule for a study's trial on this backend: one chunk of params.min_tokens_per_cta
    tokens for the whole batch (static order), which FlashInfer runs as fixed_split_size. It is
    the tuned table's `fixed-chunk` rule, so what a trial measured is what an export plans."""
    from kvtune.kernels.parametric import FIXED_CHUNK_RULE, rule_policy

    return rule_policy(FIXED_CHUNK_RULE, params)


def fixed_split_params(device: DeviceSpec) -> dict:
    """FIXED_SPLIT_PARAMS with ctas_per_sm capped by the device's occupancy."""
    return {**FIXED_SPLIT_PARAMS,
            "ctas_per_sm": min(FIXED_SPLIT_PARAMS["ctas_per_sm"], device.max_ctas_per_sm)}


__all__ = [
    "BACKEND_PATHS",
    "CUDA_CORE_GROUP_SIZES",
    "FIXED_SPLIT_PARAMS",
    "PATHS",
    "SUPPORTED_SCHEDULES",
    "FlashInferDecision",
    "FlashInferSetting",
    "NotExpressible",
    "choose_setting",
    "chunk_policy",
    "chunk_size_offset",
    "decision_from_plan_info",
    "disagreement",
    "fixed_chunk_pages",
    "fixed_split_params",
    "flashinfer_page_table",
    "flashinfer_splits",
    "float_workspace_bytes",
    "own_planner_path",
    "planner_signature",
    "structural_reason",
    "tensor_core_tiles_q",
    "unsupported_reason",
    "workspace_bytes",
]

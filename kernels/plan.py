"""Plain data types that cross module lines, and the building of a split plan.

A `Plan` is everything a decode kernel needs to run one batch and nothing else: which
contiguous KV range of which request each CTA reads, in which order the CTAs are dispatched,
and how large the grid is. Policies (kernels/policies.py) decide the splits; backends
(harness/backends/) run or model the plan. Planning is cheap CPU work; nothing here touches a GPU.

Conventions: token counts are `_tokens`, byte counts `_bytes`, rates `_bytes_per_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

DTYPE_BYTES = {"bf16": 2, "fp16": 2}
# KV cache element types: the query/output types, or e4m3 pages with per-tensor float scales (the
# form vLLM, SGLang, TensorRT-LLM and FlashInfer serve with).
KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8_e4m3": 1}
FP8_KV_DTYPES = ("fp8_e4m3",)
SCHEDULES = (
    "static",
    "static-heavy-first",
    "persistent-round-robin",
    "persistent-heavy-first",
)
PERSISTENT_SCHEDULES = ("persistent-round-robin", "persistent-heavy-first")
# Stage 1's launch order of a one-program-per-task (static) plan: "plan", the plan's items for KV
# head 0, then for head 1, ...; "longest-first", every KV head of the longest item first, then
# the next (kernels/decode.py MODE 3; launch_tasks). Either computes the same bits.
LAUNCH_ORDERS = ("plan", "longest-first")
MAX_KV_LEN_TOKENS = 1 << 20
MAX_BATCH = 1 << 16


@dataclass(frozen=True)
class AttentionShape:
    """One GPU's shard of a decode attention layer (tensor parallelism already applied).

    num_qo_heads: query heads, 1..1024, a multiple of num_kv_heads.
    num_kv_heads: KV heads, 1..1024.
    head_dim: 64, 128 or 256.
    page_size: tokens per KV page, a power of two from 1 to 128.
    dtype: "bf16" or "fp16": queries and output (and the KV cache unless kv_dtype says otherwise).
    kv_dtype: element type of the K/V pages: "bf16", "fp16" or "fp8_e4m3" (one byte per element,
        dequantised with a per-tensor scale); None (the default) means `dtype`. A 16-bit kv_dtype
        must equal dtype (the kernels multiply q and K in one type).
    """

    num_qo_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    page_size: int = 16
    dtype: str = "bf16"
    kv_dtype: str | None = None

    def __post_init__(self) -> None:
        _check_int("num_kv_heads", self.num_kv_heads, 1, 1024)
        _check_int("num_qo_heads", self.num_qo_heads, 1, 1024)
        if self.num_qo_heads % self.num_kv_heads:
            raise ValueError(
                f"num_qo_heads: {self.num_qo_heads} is not divisible by num_kv_heads "
                f"{self.num_kv_heads}; allowed: a multiple of num_kv_heads"
            )
        if self.head_dim not in (64, 128, 256):
            raise ValueError(f"head_dim: {self.head_dim} not allowed; allowed: 64, 128, 256")
        _check_int("page_size", self.page_size, 1, 128)
        if self.page_size & (self.page_size - 1):
            raise ValueError(f"page_size: {self.page_size} is not a power of two; allowed: 1..128")
        if self.dtype not in DTYPE_BYTES:
            hint = " (fp8 is a KV cache type: give it as kv_dtype)" if self.dtype in FP8_KV_DTYPES else ""
            raise ValueError(f"dtype: {self.dtype!r} not allowed for queries{hint}; allowed: "
                             f"{', '.join(DTYPE_BYTES)}")
        if self.kv_dtype is None:
            object.__setattr__(self, "kv_dtype", self.dtype)
        if self.kv_dtype not in KV_DTYPE_BYTES:
            raise ValueError(f"kv_dtype: {self.kv_dtype!r} not allowed; allowed: "
                             f"{', '.join(KV_DTYPE_BYTES)}")
        if self.kv_dtype not in FP8_KV_DTYPES and self.kv_dtype != self.dtype:
            raise ValueError(f"kv_dtype: {self.kv_dtype!r} with dtype {self.dtype!r}; allowed: "
                             f"{self.dtype!r} or {', '.join(FP8_KV_DTYPES)}")

    @property
    def group_size(self) -> int:
        """Query heads per KV head (G)."""
        return self.num_qo_heads // self.num_kv_heads

    @property
    def kv_is_fp8(self) -> bool:
        """True for e4m3 pages (per-tensor k_scale / v_scale)."""
        return self.kv_dtype in FP8_KV_DTYPES

    @property
    def kv_bytes_per_token_per_head(self) -> int:
        """Bytes of K plus V for one token of one KV head (1 byte per element for fp8)."""
        return 2 * self.head_dim * kv_element_bytes(self)

    def to_dict(self) -> dict:
        return {
            "num_qo_heads": self.num_qo_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "page_size": self.page_size,
            "dtype": self.dtype,
            "kv_dtype": self.kv_dtype,
        }


def kv_element_bytes(shape: AttentionShape) -> int:
    """Bytes of one K or V element in the cache: 2 for bf16/fp16, 1 for fp8_e4m3.

    The one place byte counts of the KV cache come from (floors, bandwidth fractions, the
    simulator, the policies' cost models); the query and output stay in `shape.dtype`.
    """
    return KV_DTYPE_BYTES[shape.kv_dtype]


@dataclass(frozen=True)
class DeviceSpec:
    """A GPU as the planners and the simulator see it.

    sm_count: streaming multiprocessors, 1..1024.
    l2_bytes: L2 cache size in bytes.
    hbm_bytes_per_s: memory bandwidth in bytes/s (datasheet for a model, measured for a live GPU).
    max_ctas_per_sm: decode CTAs one SM holds at once (the occupancy of a decode kernel; the
        CUDA-core planner and the `ctas_per_sm` knob are capped by it), 1..32.
    live: True for a GPU that is present and measured, False for a simulator model.
    """

    name: str
    sm_count: int
    l2_bytes: int
    hbm_bytes_per_s: float
    max_ctas_per_sm: int = 8
    live: bool = False

    def __post_init__(self) -> None:
        _check_int("sm_count", self.sm_count, 1, 1024)
        _check_int("max_ctas_per_sm", self.max_ctas_per_sm, 1, 32)
        if not self.hbm_bytes_per_s > 0:
            raise ValueError(f"hbm_bytes_per_s: {self.hbm_bytes_per_s} must be > 0")
        if self.l2_bytes < 0:
            raise ValueError(f"l2_bytes: {self.l2_bytes} must be >= 0")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "sm_count": self.sm_count,
            "l2_bytes": self.l2_bytes,
            "hbm_bytes_per_s": self.hbm_bytes_per_s,
            "max_ctas_per_sm": self.max_ctas_per_sm,
            "live": self.live,
        }


@dataclass(frozen=True)
class SplitParams:
    """The five tuned knobs of the parametric split heuristic (see ParametricPolicy for the rule).

    min_tokens_per_cta: smallest KV chunk worth a CTA, tokens, 1..1,048,576.
    max_waves: cap on the grid as a multiple of one wave (sm_count x ctas_per_sm), 1..64.
    max_splits: cap on the splits of one request, 1..1024.
    ctas_per_sm: CTAs resident per SM that one wave counts (and the persistent grid launches), 1..32.
    schedule: one of SCHEDULES.
    """

    min_tokens_per_cta: int = 2048
    max_waves: int = 1
    max_splits: int = 32
    ctas_per_sm: int = 2
    schedule: str = "static"

    def __post_init__(self) -> None:
        _check_int("min_tokens_per_cta", self.min_tokens_per_cta, 1, MAX_KV_LEN_TOKENS)
        _check_int("max_waves", self.max_waves, 1, 64)
        _check_int("max_splits", self.max_splits, 1, 1024)
        _check_int("ctas_per_sm", self.ctas_per_sm, 1, 32)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: {self.schedule!r} not allowed; allowed: {', '.join(SCHEDULES)}")

    def to_dict(self) -> dict:
        return {
            "min_tokens_per_cta": self.min_tokens_per_cta,
            "max_waves": self.max_waves,
            "max_splits": self.max_splits,
            "ctas_per_sm": self.ctas_per_sm,
            "schedule": self.schedule,
        }


@dataclass(frozen=True, eq=False)
class Plan:
    """How one decode batch is cut into CTAs and in which order they run.

    Work items are (request, split index, kv_start, kv_end) with kv ranges in tokens, half-open.
    Each work item is run once per KV head, so a launch has `num_items * num_kv_heads` tasks.
    Dispatch order of the tasks is head-major over the ordered item list (task t is item
    `t % num_items` of head `t // num_items`), which is CUDA's order for a grid
    `(num_items, num_kv_heads)`; persistent grids walk the same task order.

    kv_lens: [B] tokens per request, 1..MAX_KV_LEN_TOKENS.
    splits: [B] number of work items per request, >= 1.
    work_request, work_split, work_kv_start, work_kv_end: [num_items] in dispatch order.
    num_kv_heads, page_size: from the attention shape; splits start on page boundaries.
    schedule: one of SCHEDULES. `static` is request order; `static-heavy-first` and
        `persistent-heavy-first` are longest item first (ties in request order);
        `persistent-round-robin` is request order walked by CTA `i` at tasks i, i+grid, ...
    grid_size: CTAs launched: every task for static schedules, at most the task count for
        persistent ones.
    ctas_per_sm: CTAs one SM holds at once for this launch (occupancy the plan assumes).
    """

    kv_lens: np.ndarray
    splits: np.ndarray
    work_request: np.ndarray
    work_split: np.ndarray
    work_kv_start: np.ndarray
    work_kv_end: np.ndarray
    num_kv_heads: int
    page_size: int
    schedule: str
    grid_size: int
    ctas_per_sm: int = 1
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_plan(self)

    @property
    def batch_size(self) -> int:
        return int(self.kv_lens.shape[0])

    @property
    def num_items(self) -> int:
        return int(self.work_request.shape[0])

    @property
    def num_tasks(self) -> int:
        """CTA-sized tasks: work items times KV heads."""
        return self.num_items * self.num_kv_heads

    @property
    def is_persistent(self) -> bool:
        return self.schedule in PERSISTENT_SCHEDULES

    @property
    def num_split_requests(self) -> int:
        return int((self.splits > 1).sum())

    def waves(self, sm_count: int) -> float:
        """Tasks over the CTA slots of one wave (sm_count x ctas_per_sm)."""
        return self.num_tasks / (sm_count * self.ctas_per_sm)

    def item_tokens(self) -> np.ndarray:
        return self.work_kv_end - self.work_kv_start

    def summary(self) -> dict:
        """Plain numbers for tables and storage."""
        return {
            "batch_size": self.batch_size,
            "total_tokens": int(self.kv_lens.sum()),
            "max_kv_len": int(self.kv_lens.max()),
            "num_items": self.num_items,
            "num_tasks": self.num_tasks,
            "grid_size": self.grid_size,
            "max_splits": int(self.splits.max()),
            "split_requests": self.num_split_requests,
            "schedule": self.schedule,
            "ctas_per_sm": self.ctas_per_sm,
        }


def validate_plan(plan: Plan) -> None:
    """Raise ValueError when a plan breaks an invariant a kernel relies on."""
    kv_lens = plan.kv_lens
    B = kv_lens.shape[0]
    if kv_lens.ndim != 1 or B == 0:
        raise ValueError("kv_lens: must be a non-empty 1-D array")
    if (kv_lens < 1).any() or (kv_lens > MAX_KV_LEN_TOKENS).any():
        raise ValueError(f"kv_lens: every kv_len must be in 1..{MAX_KV_LEN_TOKENS}")
    if plan.schedule not in SCHEDULES:
        raise ValueError(f"schedule: {plan.schedule!r} not allowed; allowed: {', '.join(SCHEDULES)}")
    n = plan.work_request.shape[0]
    for name in ("work_split", "work_kv_start", "work_kv_end"):
        if getattr(plan, name).shape != (n,):
            raise ValueError(f"{name}: shape {getattr(plan, name).shape} != ({n},)")
    if plan.splits.shape != (B,) or (plan.splits < 1).any():
        raise ValueError("splits: need one count >= 1 per request")
    req, sp = plan.work_request, plan.work_split
    start, end = plan.work_kv_start, plan.work_kv_end
    if n != int(plan.splits.sum()):
        raise ValueError(f"work items: {n} items but splits sum to {int(plan.splits.sum())}")
    if (req < 0).any() or (req >= B).any():
        raise ValueError("work_request: request index out of range")
    if (end <= start).any():
        raise ValueError("work items: a split is empty (kv_end <= kv_start)")
    if (start % plan.page_size).any():
        raise ValueError(f"work items: a split does not start on a page boundary (page_size {plan.page_size})")
    # Coverage: sorted by (request, split) the ranges must tile [0, kv_len) exactly.
    order = np.lexsort((sp, req))
    r, s, a, b = req[order], sp[order], start[order], end[order]
    first = np.ones(n, dtype=bool)
    first[1:] = r[1:] != r[:-1]
    expected_split = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))
    if not np.array_equal(s, expected_split):
        raise ValueError("work items: split indices of a request must be 0..splits-1, each once")
    if (a[first] != 0).any():
        raise ValueError("work items: a request's first split must start at token 0")
    if (a[~first] != b[np.flatnonzero(~first) - 1]).any():
        raise ValueError("work items: splits of a request must be contiguous, without gap or overlap")
    last = np.ones(n, dtype=bool)
    last[:-1] = r[1:] != r[:-1]
    if not np.array_equal(b[last], kv_lens[r[last]]):
        raise ValueError("work items: a request's last split must end at its kv_len")
    if not np.array_equal(np.bincount(req, minlength=B), plan.splits):
        raise ValueError("splits: counts do not match the work items")
    if plan.schedule in ("static", "persistent-round-robin"):
        want = np.lexsort((sp, req))  # request order, then split order
    else:
        want = np.lexsort((sp, req, -(end - start)))  # longest first, ties in request order
    if not np.array_equal(want, np.arange(n)):
        raise ValueError(f"work items: order does not match schedule {plan.schedule!r}")
    tasks = n * plan.num_kv_heads
    if plan.schedule in PERSISTENT_SCHEDULES:
        if not 1 <= plan.grid_size <= tasks:
            raise ValueError(f"grid_size: {plan.grid_size} not in 1..{tasks} for a persistent schedule")
    elif plan.grid_size != tasks:
        raise ValueError(f"grid_size: {plan.grid_size} != tasks {tasks} for a static schedule")
    _check_int("ctas_per_sm", plan.ctas_per_sm, 1, 32)


def order_items(schedule: str, req: np.ndarray, sp: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Put work items given in (request, split) order into the dispatch order of `schedule`."""
    if schedule in ("static", "persistent-round-robin"):
        idx = np.lexsort((sp, req))
    else:
        idx = np.lexsort((sp, req, -(end - start)))
    return req[idx], sp[idx], start[idx], end[idx]


def check_launch_order(launch_order: str) -> None:
    """ValueError naming LAUNCH_ORDERS where `launch_order` is not one of them."""
    if launch_order not in LAUNCH_ORDERS:
        raise ValueError(f"launch_order: {launch_order!r} not allowed; allowed: "
                         f"{', '.join(LAUNCH_ORDERS)}")


def launch_item_order(plan: Plan, launch_order: str = "plan") -> np.ndarray:
    """The plan's work items in the order stage 1 launches them, int64 [num_items]: "plan" the
    plan's own; "longest-first" by descending token count, ties in plan order. ValueError for
    another order, or "longest-first" on a persistent schedule (its programs take tasks in their
    own order)."""
    check_launch_order(launch_order)
    if launch_order == "plan":
        return np.arange(plan.num_items, dtype=np.int64)
    if plan.is_persistent:
        raise ValueError(f"launch_order: 'longest-first' needs a static schedule, not "
                         f"{plan.schedule!r}")
    return np.argsort(plan.work_kv_start - plan.work_kv_end, kind="stable").astype(np.int64)


def product_launch_order(plan: Plan) -> str:
    """The launch order the product gives `plan`'s stage 1 (LAUNCH_ORDERS): "longest-first" for
    a static schedule (its tasks then start longest first, the same bits; H200, twenty-ninth
    session, call 1: 1.03-1.36x the plan order's speed on skew80 plans but one, 0.99-1.00x on
    166 one-KV-head tasks, and 1.01-1.09x on uniform ones; docs/PERFORMANCE.md), "plan" for a
    persistent one (its programs take tasks in their own order)."""
    return "plan" if plan.is_persistent else "longest-first"


def launch_tasks(plan: Plan, launch_order: str = "plan") -> tuple[np.ndarray, np.ndarray]:
    """(work item, KV head) of each stage-1 task in the order the launch hands them out, int64
    [num_tasks] each. "plan": task t is item t % num_items of head t // num_items (a 2-D grid,
    x fastest); "longest-first": launch_item_order's items, each with its KV heads 0..H-1
    together. ValueError as launch_item_order."""
    order = launch_item_order(plan, launch_order)
    n, heads = plan.num_items, plan.num_kv_heads
    if launch_order == "plan":
        t = np.arange(n * heads, dtype=np.int64)
        return t % n, t // n
    return np.repeat(order, heads), np.tile(np.arange(heads, dtype=np.int64), n)


def split_by_count(kv_lens: np.ndarray, splits: np.ndarray, page_size: int) -> np.ndarray:
    """Chunk size in tokens per request that cuts it into at most `splits[b]` page-aligned pieces.

    The chunk is `ceil(pages / splits) * page_size`; the resulting count can be lower than asked
    (no piece is ever empty). Returns int64 [B].
    """
    pages = -(-kv_lens // page_size)
    per_split_pages = -(-pages // np.maximum(splits, 1))
    return per_split_pages * page_size


def build_plan(
    kv_lens,
    chunk_tokens,
    *,
    num_kv_heads: int,
    page_size: int,
    schedule: str = "static",
    ctas_per_sm: int = 1,
    grid_size: int | None = None,
    notes: dict | None = None,
) -> Plan:
    """Cut every request into contiguous chunks of `chunk_tokens` (scalar or [B]) and order them.

    chunk_tokens: tokens per chunk, rounded up to a multiple of page_size; >= kv_len means no
        split. grid_size: for persistent schedules the number of resident CTAs (capped by the task
        count); ignored for static schedules, whose grid is one CTA per task.
    """
    kv_lens = as_kv_lens(kv_lens)
    B = kv_lens.shape[0]
    chunk = np.broadcast_to(np.asarray(chunk_tokens, dtype=np.int64), (B,))
    if (chunk < 1).any():
        raise ValueError("chunk_tokens: must be >= 1")
    chunk = -(-chunk // page_size) * page_size
    splits = -(-kv_lens // chunk)
    n = int(splits.sum())
    req = np.repeat(np.arange(B, dtype=np.int64), splits)
    first = np.concatenate(([0], np.cumsum(splits)[:-1]))
    sp = np.arange(n, dtype=np.int64) - np.repeat(first, splits)
    start = sp * chunk[req]
    end = np.minimum(start + chunk[req], kv_lens[req])
    req, sp, start, end = order_items(schedule, req, sp, start, end)
    tasks = n * num_kv_heads
    if schedule in PERSISTENT_SCHEDULES:
        grid = tasks if grid_size is None else max(1, min(int(grid_size), tasks))
    else:
        grid = tasks
    return Plan(
        kv_lens=kv_lens,
        splits=splits,
        work_request=req,
        work_split=sp,
        work_kv_start=start,
        work_kv_end=end,
        num_kv_heads=num_kv_heads,
        page_size=page_size,
        schedule=schedule,
        grid_size=grid,
        ctas_per_sm=ctas_per_sm,
        notes=dict(notes or {}),
    )


def as_kv_lens(kv_lens) -> np.ndarray:
    """Validate and convert kv_lens to a 1-D int64 array (1..MAX_KV_LEN_TOKENS, 1..MAX_BATCH)."""
    arr = np.asarray(kv_lens)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError("kv_lens: need a non-empty list of request lengths (batch size >= 1)")
    if arr.shape[0] > MAX_BATCH:
        raise ValueError(f"kv_lens: batch size {arr.shape[0]} above {MAX_BATCH}")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError("kv_lens: every kv_len must be an integer")
    arr = arr.astype(np.int64)
    if (arr < 1).any() or (arr > MAX_KV_LEN_TOKENS).any():
        bad = int(arr[(arr < 1) | (arr > MAX_KV_LEN_TOKENS)][0])
        raise ValueError(f"kv_len: {bad} out of range; allowed: 1..{MAX_KV_LEN_TOKENS}")
    return arr


class Policy(Protocol):
    """Anything that turns a batch into a Plan. `name` is its registry name."""

    name: str

    def plan(self, kv_lens: np.ndarray, shape: AttentionShape, device: DeviceSpec) -> Plan: ...

    def params(self) -> dict: ...


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check_int(name: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: {value!r} is not an integer; allowed: {lo}..{hi}")
    if not lo <= value <= hi:
        raise ValueError(f"{name}: {value} out of range; allowed: {lo}..{hi}")


# The fields of a shape a tuned file (a decode heuristic, a hybrid heuristic) is tied to.
SHAPE_FIELDS = ("num_qo_heads", "num_kv_heads", "head_dim", "page_size", "dtype", "kv_dtype")


def _as_shape_dict(shape) -> dict:
    if isinstance(shape, AttentionShape):
        return shape.to_dict()
    if isinstance(shape, dict):
        return dict(shape)
    raise ValueError(f"shape: {shape!r} is not an AttentionShape")


def check_shape(file_shape: dict, shape=None, dtype: str | None = None) -> None:
    """ValueError naming the field when the shape/dtype asked for differs from `file_shape`, the
    shape a tuned file (decode or hybrid heuristic) was tuned for."""
    asked = _as_shape_dict(shape) if shape is not None else {}
    if dtype is not None:
        asked["dtype"] = dtype
    # The file says its KV type; a file without kv_dtype (before fp8) was tuned on a cache of
    # its query type, and loading it for another KV type is refused like any other field.
    file_shape = {**file_shape, "kv_dtype": file_shape.get("kv_dtype") or file_shape["dtype"]}
    if "kv_dtype" in asked and asked["kv_dtype"] is None:
        asked["kv_dtype"] = asked.get("dtype", file_shape["dtype"])
    for key in SHAPE_FIELDS:
        if key in asked and asked[key] != file_shape[key]:
            raise ValueError(f"shape.{key}: the heuristic was tuned for {file_shape[key]!r}, "
                             f"asked to plan for {asked[key]!r}; allowed: {file_shape[key]!r} "
                             "(tune and export for this shape)")


__all__ = [
    "AttentionShape",
    "DTYPE_BYTES",
    "KV_DTYPE_BYTES",
    "FP8_KV_DTYPES",
    "kv_element_bytes",
    "DeviceSpec",
    "SplitParams",
    "Plan",
    "Policy",
    "SCHEDULES",
    "PERSISTENT_SCHEDULES",
    "LAUNCH_ORDERS",
    "check_launch_order",
    "product_launch_order",
    "launch_item_order",
    "launch_tasks",
    "build_plan",
    "split_by_count",
    "order_items",
    "as_kv_lens",
    "validate_plan",
    "ceil_div",
    "SHAPE_FIELDS",
    "check_shape",
]

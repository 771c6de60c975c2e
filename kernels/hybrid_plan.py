"""HybridPlan: how one hybrid batch (prefill chunks + decodes + speculative decodes) is cut and run.

A hybrid batch has requests with q_len new query tokens over kv_len keys (kv_len counts the new
tokens; attention is causal inside them). Requests with q_len <= MAX_DECODE_Q_LEN (16) are
*decodes*: they run as split-KV work items of an ordinary decode `Plan` (kernels/plan.py) over
their kv_lens, each item packing the request's q_len x G query rows of one KV head into one tile.
Longer requests are *prefill chunks*: their query tokens are cut into tiles of `prefill_block_m`
rows (rows = tokens x G, so a tile holds block_m // G tokens of one KV head), and each tile reads
the keys 0 .. its causal end (kv_len - q_len + last token + 1), optionally cut into kv splits
that a merge combines (FlashDecoding for chunked prefill; the split count is capped so the prefill
tasks stay within `prefill_split_cap_waves` waves of `sm_count x ctas_per_sm` slots, as
POD-Attention caps them at two).

Schedules (how the two kinds reach the GPU):
- serial: a prefill launch, then a decode launch (then the merge).
- streams: the same two launches on two CUDA streams.
- fused: one launch over one work list, heaviest task first (prefill tiles usually lead).
- sm-aware: POD-Attention's SM-aware CTA scheduling: one launch of prefill + decode CTAs; each
  CTA reads its SM id, takes a ticket from that SM's counter and runs prefill or decode by
  `sm_policy` ("50:50": alternate; "proportional": prefill:decode CTAs per SM in the ratio of the
  batch's prefill and decode tasks, over ctas_per_sm tickets), falling back to the other kind
  when its own is used up.
- partitioned: SM partitioning by launch shape: the decodes as a persistent grid of
  `decode_programs` programs (about one per SM of the decode share) on one stream, the prefill
  tiles as an ordinary grid on another; the prefill programs take the SMs the decode grid leaves
  (a 128-row prefill program needs an SM's whole register file, so it cannot co-reside with a
  decode program). The share comes from the policy (proportional to modelled decode time).
- colocated: co-location by launch footprint: the prefill tiles as a persistent grid of one
  program per SM, launched first, that takes tiles from a counter; the decodes as an ordinary
  grid on a second stream, whose programs fill what the prefill program leaves of each SM (a
  64-row prefill tile at 4 warps holds about half of the register file and 112 KB of shared
  memory; a 128-row tile holds all of it, so use 64-row tiles); after the decode launch, a tail
  of one more prefill program per SM joins the same counter so the prefill regains whole SMs
  once the decodes are done.

Planning is CPU numpy work; nothing here touches a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from kvtune.kernels.plan import MAX_KV_LEN_TOKENS, Plan, _check_int, as_kv_lens

# The vendored planner owns the decode / prefill boundary and the prefill split rule, so that an
# engine that copies it plans hybrid batches exactly as kvtune does.
from kvtune.kernels.tuned_planner import MAX_DECODE_Q_LEN
from kvtune.kernels.tuned_planner import prefill_kv_splits as vendored_prefill_kv_splits

HYBRID_SCHEDULES = ("serial", "streams", "fused", "sm-aware", "partitioned", "colocated")
SM_POLICIES = ("50:50", "proportional")
PREFILL_BLOCK_M = (64, 128)


@dataclass(frozen=True, eq=False)
class HybridPlan:
    """One hybrid batch's plan (see the module docstring).

    q_lens, kv_lens: [B] int64 tokens. decode_requests: [Bd] batch indices of the decodes
    (q_len <= 16) in batch order; decode_plan: the split plan over kv_lens[decode_requests]
    (its request b is batch request decode_requests[b]), None when there are none.
    Prefill tiles, one entry per (tile, kv split), in dispatch order (heaviest first):
    tile_request (batch index), tile_q_start/tile_q_end (token range within the request's new
    tokens), tile_split, tile_kv_start/tile_kv_end (token range of keys), tile_splits (kv splits
    of that tile). prefill_block_m: query rows per prefill tile (64 or 128; tokens x G).
    schedule: one of HYBRID_SCHEDULES. ctas_per_sm: CTAs per SM the plan assumes (1..32; 2 or 4 in
    POD). sm_policy: one of SM_POLICIES (used by sm-aware). prefill_split_cap_waves: most waves
    of prefill tasks the kv splits may make (1..64). sm_count: SMs of the planned device.
    num_kv_heads, page_size, group_size: from the shape. decode_programs: the persistent decode
    grid of the `partitioned` schedule (1..sm_count x ctas_per_sm where the batch has decodes;
    0 for other schedules). decode_ahead: the decode launch of a two-launch schedule (serial,
    streams, colocated) runs its items through the page-ahead loop (K/V tiles in flight, as
    kernels/decode.py's page-ahead configurations; `partitioned` always does, one-launch
    schedules never); other bits than the plain loop's (another key block), like any plan knob.
    decode_kernel: run the single-token decodes through kernels/decode.py (True) or as the hybrid
    kernel's decode items (False) wherever decode.py can take them (decode_kernel_allowed); None:
    the schedule's default (decodes_through_decode_kernel). With decode.py, decode_ahead has no
    effect (decode.py picks its own loop).
    """

    q_lens: np.ndarray
    kv_lens: np.ndarray
    decode_requests: np.ndarray
    decode_plan: Plan | None
    tile_request: np.ndarray
    tile_q_start: np.ndarray
    tile_q_end: np.ndarray
    tile_split: np.ndarray
    tile_kv_start: np.ndarray
    tile_kv_end: np.ndarray
    tile_splits: np.ndarray
    prefill_block_m: int
    schedule: str
    ctas_per_sm: int
    sm_policy: str
    prefill_split_cap_waves: int
    sm_count: int
    num_kv_heads: int
    page_size: int
    group_size: int
    decode_programs: int = 0
    decode_ahead: bool = False
    decode_kernel: bool | None = None
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_hybrid_plan(self)

    @property
    def batch_size(self) -> int:
        return int(self.kv_lens.shape[0])

    @property
    def num_decodes(self) -> int:
        return int(self.decode_requests.shape[0])

    @property
    def prefill_requests(self) -> np.ndarray:
        return np.flatnonzero(self.q_lens > MAX_DECODE_Q_LEN)

    @property
    def num_prefill_tiles(self) -> int:
        return int(self.tile_request.shape[0])

    @property
    def num_prefill_tasks(self) -> int:
        return self.num_prefill_tiles * self.num_kv_heads

    @property
    def num_decode_tasks(self) -> int:
        return 0 if self.decode_plan is None else self.decode_plan.num_tasks

    @property
    def num_tasks(self) -> int:
        return self.num_prefill_tasks + self.num_decode_tasks

    @property
    def grid_size(self) -> int:
        return self.num_tasks

    @property
    def tokens_per_tile(self) -> int:
        return self.prefill_block_m // self.group_size

    def sm_ratio(self) -> tuple[int, int]:
        """(prefill, decode) tickets per period of an SM's counter under sm_policy.

        50:50 alternates (1, 1). proportional splits ctas_per_sm (at least 2) tickets in the
        ratio of prefill to decode tasks, each kind keeping at least one when both exist; the
        paper's example: 50 prefill and 100 decode CTAs -> one prefill, then two decodes.
        """
        p, d = self.num_prefill_tasks, self.num_decode_tasks
        if p == 0:
            return 0, 1
        if d == 0:
            return 1, 0
        if self.sm_policy == "50:50":
            return 1, 1
        if p >= d:
            return max(1, round(p / d)), 1
        return 1, max(1, round(d / p))

    def waves(self, sm_count: int) -> float:
        return self.num_tasks / (sm_count * self.ctas_per_sm)

    def summary(self) -> dict:
        """Plain numbers for result rows (the Plan.summary keys plus the hybrid knobs)."""
        dp = self.decode_plan
        return {
            "batch_size": self.batch_size,
            "total_tokens": int(self.kv_lens.sum()),
            "max_kv_len": int(self.kv_lens.max()),
            "num_items": self.num_prefill_tiles + (dp.num_items if dp else 0),
            "num_tasks": self.num_tasks,
            "grid_size": self.grid_size,
            "max_splits": int(max(self.tile_splits.max() if self.tile_splits.size else 1,
                                  dp.splits.max() if dp else 1)),
            "split_requests": dp.num_split_requests if dp else 0,
            "schedule": self.schedule,
            "ctas_per_sm": self.ctas_per_sm,
            "sm_policy": self.sm_policy,
            "prefill_split_cap_waves": self.prefill_split_cap_waves,
            "prefill_block_m": self.prefill_block_m,
            "prefill_tasks": self.num_prefill_tasks,
            "decode_tasks": self.num_decode_tasks,
            "decode_schedule": dp.schedule if dp else "",
            "decode_ahead": bool(self.decode_ahead),
            "decode_kernel": decodes_through_decode_kernel(self),
            "decode_programs": self.decode_programs,
        }

    @property
    def splits(self) -> np.ndarray:
        """[B] kv splits per request: a decode's from its plan, a prefill's most split tile."""
        out = np.ones(self.batch_size, dtype=np.int64)
        if self.decode_plan is not None:
            out[self.decode_requests] = self.decode_plan.splits
        if self.tile_request.size:
            np.maximum.at(out, self.tile_request, self.tile_splits)
        return out


# The largest 16-bit copy of an fp8 cache's prefill pages one step may make (K and V together);
# beyond it prefill tiles widen each K/V tile where they load it (kernels/hybrid.py).
PREFILL_WIDEN_MAX_BYTES = 1 << 31


def widened_prefill_pages(plan: HybridPlan, shape) -> int:
    """Pages of the 16-bit copy kernels/hybrid.py makes of an fp8 cache's prefill requests (every
    page of each request with a prefill tile), or 0 where it makes none: a 16-bit cache, queries
    that are not 16-bit (float32 tests), no prefill tile, or a copy above PREFILL_WIDEN_MAX_BYTES.
    `shape` is the plan's AttentionShape (page_size, heads, head_dim, dtype, kv_dtype)."""
    reqs = np.unique(plan.tile_request)
    if not shape.kv_is_fp8 or reqs.size == 0 or shape.dtype not in ("bf16", "fp16"):
        return 0
    pages = int((-(-plan.kv_lens[reqs] // shape.page_size)).sum())
    copy_bytes = 2 * pages * shape.page_size * shape.num_kv_heads * shape.head_dim * 2
    return pages if copy_bytes <= PREFILL_WIDEN_MAX_BYTES else 0


# Schedules whose decodes get a launch of their own that nothing runs beside by design: there
# kernels/hybrid.py runs single-token decodes through kernels/decode.py.
def gluon_prefill_chosen(plan: HybridPlan, head_dim: int) -> bool:
    """Whether kernels/hybrid.py picks the Gluon prefill tile (kernels/prefill_wgmma.py) for this
    plan where it can run (an sm_90 GPU, 16-bit pages): head_dim 128 with 128-row tiles, the one
    setting measured faster than the Triton tile (nineteenth session, docs/PERFORMANCE.md), in a
    prefill launch of one program per task: serial, streams, partitioned, or colocated without
    decodes (colocated's persistent prefill grid keeps the Triton tile; one-launch schedules
    never). hybrid_config and the simulator (harness/sim_hybrid.py) both ask this."""
    if head_dim != 128 or plan.prefill_block_m != 128:
        return False
    return plan.schedule in ("serial", "streams", "partitioned") \
        or (plan.schedule == "colocated" and plan.num_decode_tasks == 0)


DECODE_KERNEL_SCHEDULES = ("serial", "streams")


def decode_kernel_allowed(plan: HybridPlan) -> bool:
    """Whether kernels/hybrid.py can run the plan's decodes through kernels/decode.py: every
    decode has q_len 1 and the decodes have a launch of their own (serial, streams, colocated,
    or a batch without prefill tiles). decodes_through_decode_kernel says where it does by
    default."""
    if plan.decode_plan is None or not np.all(plan.q_lens[plan.decode_requests] == 1):
        return False
    return plan.schedule in (*DECODE_KERNEL_SCHEDULES, "colocated") \
        or plan.num_prefill_tiles == 0


def decodes_through_decode_kernel(plan: HybridPlan, override: bool | None = None) -> bool:
    """Whether kernels/hybrid.py runs the plan's decodes as kernels/decode.py's own launch (the
    decode plan's schedule, tuned configuration, page-ahead and fp8 loops, its merge) instead of
    the hybrid kernel's decode items: every decode has q_len 1 (decode.py packs one query token per
    request) and the decodes have a launch of their own that is not meant to share SMs: a serial
    or streams schedule, or a batch without prefill tiles (any schedule). A plan's decode_kernel
    (True / False) overrides that default wherever decode_kernel_allowed, and `override` (a
    caller's: kernels/hybrid.py prepare_hybrid, the simulator) overrides both.

    Why: a decode-only batch then runs exactly today's decode kernel, and fp8 decodes keep
    decode.py's fp8 loops (the hybrid item streamed e4m3 no faster per token than 16-bit pages,
    docs/KERNEL_NOTES.md). colocated / partitioned keep the hybrid items: their footprint beside
    the persistent grid is what those schedules were measured and tuned with."""
    if not decode_kernel_allowed(plan):
        return False
    if override is not None:
        return bool(override)
    if plan.decode_kernel is not None:  # the plan's knob (hybrid-parametric, a tuned bucket)
        return bool(plan.decode_kernel)
    return plan.schedule in DECODE_KERNEL_SCHEDULES or plan.num_prefill_tiles == 0


def causal_end(q_lens: np.ndarray, kv_lens: np.ndarray, req: np.ndarray,
               q_end: np.ndarray) -> np.ndarray:
    """Keys a tile of tokens [.., q_end) of request `req` reads: kv_len - q_len + q_end."""
    return kv_lens[req] - q_lens[req] + q_end


def validate_hybrid_plan(p: HybridPlan) -> None:
    """Raise ValueError when a hybrid plan breaks an invariant the kernel relies on."""
    q, kv = p.q_lens, p.kv_lens
    if q.shape != kv.shape or q.ndim != 1 or q.shape[0] == 0:
        raise ValueError("q_lens: need one q_len per kv_len, at least one request")
    if (q < 1).any() or (q > kv).any():
        raise ValueError("q_lens: every q_len must be in 1..kv_len")
    if p.schedule not in HYBRID_SCHEDULES:
        raise ValueError(f"schedule: {p.schedule!r} not allowed; allowed: "
                         f"{', '.join(HYBRID_SCHEDULES)}")
    if p.sm_policy not in SM_POLICIES:
        raise ValueError(f"sm_policy: {p.sm_policy!r} not allowed; allowed: "
                         f"{', '.join(SM_POLICIES)}")
    _check_int("ctas_per_sm", p.ctas_per_sm, 1, 32)
    _check_int("prefill_split_cap_waves", p.prefill_split_cap_waves, 1, 64)
    _check_int("sm_count", p.sm_count, 1, 1024)
    if not isinstance(p.decode_ahead, (bool, np.bool_)):
        raise ValueError(f"decode_ahead: {p.decode_ahead!r} not allowed; allowed: true, false")
    if p.decode_kernel is not None and not isinstance(p.decode_kernel, (bool, np.bool_)):
        raise ValueError(f"decode_kernel: {p.decode_kernel!r} not allowed; allowed: true, false, "
                         "null (the schedule's default)")
    if p.schedule == "partitioned" and q.size and (q <= MAX_DECODE_Q_LEN).any():
        _check_int("decode_programs", p.decode_programs, 1, p.sm_count * p.ctas_per_sm)
    elif p.decode_programs != 0 and p.schedule != "partitioned":
        raise ValueError(f"decode_programs: {p.decode_programs} set for schedule "
                         f"{p.schedule!r}; allowed: 0 unless the schedule is partitioned")
    if p.prefill_block_m not in PREFILL_BLOCK_M:
        raise ValueError(f"prefill_block_m: {p.prefill_block_m} not allowed; allowed: 64, 128")
    if p.group_size > p.prefill_block_m:
        raise ValueError(f"group_size: {p.group_size} query heads per KV head exceed the "
                         f"{p.prefill_block_m}-row prefill tile")
    dec = np.flatnonzero(q <= MAX_DECODE_Q_LEN)
    if not np.array_equal(p.decode_requests, dec):
        raise ValueError("decode_requests: must be exactly the requests with q_len <= 16")
    if (p.decode_plan is None) != (dec.size == 0):
        raise ValueError("decode_plan: needed exactly when the batch has decodes")
    if p.decode_plan is not None:
        dp = p.decode_plan
        if not np.array_equal(dp.kv_lens, kv[dec]):
            raise ValueError("decode_plan: kv_lens differ from the decodes' kv_lens")
        if dp.num_kv_heads != p.num_kv_heads or dp.page_size != p.page_size:
            raise ValueError("decode_plan: num_kv_heads/page_size differ from the hybrid plan's")
    n = p.tile_request.shape[0]
    for name in ("tile_q_start", "tile_q_end", "tile_split", "tile_kv_start", "tile_kv_end",
                 "tile_splits"):
        if getattr(p, name).shape != (n,):
            raise ValueError(f"{name}: shape {getattr(p, name).shape} != ({n},)")
    pre = np.flatnonzero(q > MAX_DECODE_Q_LEN)
    if n == 0:
        if pre.size:
            raise ValueError("prefill tiles: a prefill request has no tiles")
        return
    r = p.tile_request
    if (r < 0).any() or (r >= q.shape[0]).any() or (q[r] <= MAX_DECODE_Q_LEN).any():
        raise ValueError("tile_request: every tile must belong to a prefill request")
    tok = p.tokens_per_tile
    qs, qe = p.tile_q_start, p.tile_q_end
    if (qs % tok).any() or (qe <= qs).any() or (qe - qs > tok).any() or (qe > q[r]).any():
        raise ValueError(f"tiles: a tile's token range must be [k*{tok}, min(q_len, (k+1)*{tok}))")
    if ((qe - qs < tok) & (qe != q[r])).any():
        raise ValueError("tiles: only a request's last tile may be short")
    ends = causal_end(q, kv, r, qe)
    ks, ke, sp, ns = p.tile_kv_start, p.tile_kv_end, p.tile_split, p.tile_splits
    if (ke <= ks).any() or (ks % p.page_size).any() or (ke > ends).any():
        raise ValueError("tiles: kv ranges must be non-empty, page-aligned and end by the causal "
                         "end")
    # Each (request, token range) group: splits 0..n-1 tiling [0, causal end) contiguously.
    order = np.lexsort((sp, qs, r))
    r_o, qs_o, sp_o = r[order], qs[order], sp[order]
    ks_o, ke_o, ns_o = ks[order], ke[order], ns[order]
    first = np.ones(n, dtype=bool)
    first[1:] = (r_o[1:] != r_o[:-1]) | (qs_o[1:] != qs_o[:-1])
    group = np.cumsum(first) - 1
    start_idx = np.flatnonzero(first)
    if not np.array_equal(sp_o, np.arange(n) - start_idx[group]):
        raise ValueError("tiles: kv split indices of a tile must be 0..splits-1, each once")
    counts = np.bincount(group)
    if not np.array_equal(ns_o, counts[group]):
        raise ValueError("tile_splits: do not match the tiles' split counts")
    if (ks_o[first] != 0).any() or (ks_o[~first] != ke_o[np.flatnonzero(~first) - 1]).any():
        raise ValueError("tiles: kv splits must start at 0 and be contiguous")
    last = np.ones(n, dtype=bool)
    last[:-1] = first[1:]
    if not np.array_equal(ke_o[last], causal_end(q, kv, r_o[last], p.tile_q_end[order][last])):
        raise ValueError("tiles: a tile's last kv split must end at its causal end")
    # Every prefill request's tokens covered by its tiles exactly once.
    covered = np.bincount(r_o[first], weights=(p.tile_q_end[order] - qs_o)[first],
                          minlength=q.shape[0])
    if not np.array_equal(covered[pre].astype(np.int64), q[pre]):
        raise ValueError("tiles: the tiles of a prefill request must cover its q_len tokens once")


def build_prefill_tiles(q_lens, kv_lens, *, group_size: int, block_m: int, page_size: int,
                        kv_splits: int = 1, min_split_tokens: int = 1024):
    """Tile every prefill request (q_len > 16) and cut each tile's causal key range into at most
    `kv_splits` page-aligned pieces of at least `min_split_tokens` (except the last).

    Returns dict of the tile_* arrays, heaviest (most keys per split) first, ties in
    (request, tile, split) order.
    """
    q = np.asarray(q_lens, dtype=np.int64)
    kv = as_kv_lens(kv_lens)
    tok = block_m // group_size
    pre = np.flatnonzero(q > MAX_DECODE_Q_LEN)
    n_tiles = -(-q[pre] // tok)
    req = np.repeat(pre, n_tiles)
    first = np.concatenate(([0], np.cumsum(n_tiles)[:-1])) if pre.size else np.zeros(0, np.int64)
    k = np.arange(req.shape[0], dtype=np.int64) - np.repeat(first, n_tiles)
    qs = k * tok
    qe = np.minimum(qs + tok, q[req])
    end = causal_end(q, kv, req, qe)
    pages = -(-end // page_size)
    per_split_pages = np.maximum(-(-pages // max(1, kv_splits)), -(-min_split_tokens // page_size))
    chunk = per_split_pages * page_size
    splits = -(-end // chunk)
    rr = np.repeat(req, splits)
    first_s = np.concatenate(([0], np.cumsum(splits)[:-1])) if req.size else np.zeros(0, np.int64)
    sp = np.arange(rr.shape[0], dtype=np.int64) - np.repeat(first_s, splits)
    ks = sp * np.repeat(chunk, splits)
    ke = np.minimum(ks + np.repeat(chunk, splits), np.repeat(end, splits))
    out = {"tile_request": rr, "tile_q_start": np.repeat(qs, splits),
           "tile_q_end": np.repeat(qe, splits), "tile_split": sp, "tile_kv_start": ks,
           "tile_kv_end": ke, "tile_splits": np.repeat(splits, splits)}
    order = np.lexsort((sp, out["tile_q_start"], rr, -(ke - ks)))
    return {k_: v[order] for k_, v in out.items()}


def prefill_kv_splits(q_lens, kv_lens, *, group_size: int, block_m: int, num_kv_heads: int,
                      slots: int, cap_waves: int) -> int:
    """The largest kv split count (1..64) that keeps the prefill tasks within `cap_waves` waves of
    `slots` CTA slots; 1 when the unsplit tiles already fill that many (the vendored planner's
    rule, kernels.tuned_planner.prefill_kv_splits, so both plan alike). kv_lens: unused."""
    return vendored_prefill_kv_splits(q_lens, group_size=group_size, block_m=block_m,
                                      num_kv_heads=num_kv_heads, slots=slots,
                                      cap_waves=cap_waves)


__all__ = [
    "DECODE_KERNEL_SCHEDULES",
    "HYBRID_SCHEDULES",
    "MAX_DECODE_Q_LEN",
    "MAX_KV_LEN_TOKENS",
    "PREFILL_BLOCK_M",
    "SM_POLICIES",
    "HybridPlan",
    "build_prefill_tiles",
    "causal_end",
    "decode_kernel_allowed",
    "decodes_through_decode_kernel",
    "gluon_prefill_chosen",
    "prefill_kv_splits",
    "validate_hybrid_plan",
]

"""The project's tunable split rule (ParametricPolicy) and the tuned table of it by batch size
(BucketedPolicy, registry name `tuned`), which the tuning study produces and export loads.

A tuned table plans each bucket with one of two rules (RULES), chosen for the whole table:
  parametric   ParametricPolicy of the bucket's SplitParams (every backend that runs any plan);
  fixed-chunk  pieces of exactly min_tokens_per_cta tokens (rounded up to the page size, the last
               piece of a request shorter) in request order: kernels.baselines.FixedSplitPolicy.
               This is all a backend with one chunk size per batch (FlashInfer's
               fixed_split_size) can run, so a study on such a backend tunes only the chunk.
`rule_policy(rule, params)` is the Policy one bucket plans with.

A bucket may also name its own rule family (FAMILIES), which then replaces the table's rule for
that bucket:
  fixed-chunk  as above;
  parametric   as above;
  adaptive     one chunk per batch, computed at plan time from the batch (AdaptiveChunkPolicy):
               what FlashInfer's plan() can take per decode step as fixed_split_size;
  makespan     one chunk per batch, chosen at plan time among a few candidates (a chunk grid and
               the engine's own chunk) by the busiest CTA slot of the in-order launch with a
               cost per piece (MakespanChunkPolicy); also a fixed_split_size per decode step;
  defer        the engine's own planner (FlashInfer's tensor-core plan, fixed_split_size=None):
               a bucket where no tuned rule beat it on held-out cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from kvtune.kernels.baselines import FixedSplitPolicy
from kvtune.kernels.plan import (
    MAX_BATCH,
    PERSISTENT_SCHEDULES,
    AttentionShape,
    DeviceSpec,
    Plan,
    SplitParams,
    as_kv_lens,
    build_plan,
    split_by_count,
)
from kvtune.kernels.policy_common import (
    cdiv,
    check_choice,
    check_int,
    plain_notes,
    smallest_fitting,
)

# The rule and family names and the defaults are the vendored planner's (one definition: what
# kvtune plans and what a deployed file plans cannot drift apart).
from kvtune.kernels.tuned_planner import (
    ADAPTIVE_FAMILY,
    DEFAULT_MAX_CHUNK_TOKENS,
    DEFAULT_PIECE_COST_TOKENS,
    DEFER_FAMILY,
    EVEN_CTAS_PER_SM,
    FAMILIES,
    FIXED_CHUNK_RULE,
    MAKESPAN_FAMILY,
    PARAMETRIC_RULE,
    RULES,
    adaptive_chunk_pages,
    makespan_chunk_pages,
)


def engine_default_policy():
    """The engine's own planner, what a deferred bucket plans with: FlashInfer's tensor-core
    decode planner with fixed_split_size=None (the Triton backend runs the same plan)."""
    from kvtune.kernels.baselines_flashinfer import FlashInferTensorCorePolicy

    return FlashInferTensorCorePolicy()


def adaptive_chunk_tokens(kv_lens, num_kv_heads: int, page_size: int, sm_count: int,
                          max_ctas_per_sm: int, params: SplitParams, max_chunk_tokens: int) -> int:
    """The adaptive family's chunk (tokens, a multiple of page_size) for one batch.

    Knobs: target waves W = params.max_waves, min chunk = params.min_tokens_per_cta, max chunk =
    max_chunk_tokens, max splits = params.max_splits, occupancy = params.ctas_per_sm (capped by
    max_ctas_per_sm). The rule is kernels.tuned_planner.adaptive_chunk_pages (the vendored
    planner computes the same chunk): a batch already spread evenly over the CTA slots stays
    unsplit (evenness counted with EVEN_CTAS_PER_SM per SM); otherwise the smallest chunk whose
    exact piece count fits the budget of W waves (FlashInfer's own search at W = 1), spread
    further when one piece stays far above the even share, clamped by the min chunk,
    L / max_splits and the max chunk.
    """
    kv = as_kv_lens(kv_lens)
    slots = sm_count * min(params.ctas_per_sm, max_ctas_per_sm)
    pages = adaptive_chunk_pages(kv, num_kv_heads, page_size, slots, params.max_waves,
                                 params.min_tokens_per_cta, max_chunk_tokens, params.max_splits,
                                 even_slots=sm_count * min(EVEN_CTAS_PER_SM, max_ctas_per_sm))
    return pages * page_size


class _OneChunkPerBatch:
    """What the per-batch chunk families share (AdaptiveChunkPolicy, MakespanChunkPolicy): their
    knob check, and a plan of pieces of exactly the chunk the subclass computes for the batch
    (`_chunk_tokens`), in request order (FixedSplitPolicy, static order), noted with the chunk
    and the family that chose it."""

    family: ClassVar[str]

    def _check_knobs(self) -> None:
        if not isinstance(self.split_params, SplitParams):
            raise ValueError(f"split_params: {self.split_params!r} is not a SplitParams")  # noqa: TRY004
        check_int("max_chunk_tokens", self.max_chunk_tokens, 1, 1 << 20)

    @classmethod
    def default_params(cls) -> dict:
        return cls().params()

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        chunk = self._chunk_tokens(kv_lens, shape, device)
        plan = FixedSplitPolicy(chunk_tokens=chunk, schedule="static",
                                ctas_per_sm=self.split_params.ctas_per_sm).plan(kv_lens, shape,
                                                                                device)
        plan.notes.update(chunk_tokens=chunk, family=self.family)
        return plan


@dataclass(frozen=True)
class AdaptiveChunkPolicy(_OneChunkPerBatch):
    """One chunk per batch, computed from the batch at plan time (adaptive_chunk_tokens), then
    pieces of exactly that many tokens in request order (FixedSplitPolicy, static order).

    split_params: the knobs (max_waves = target waves, min_tokens_per_cta = min chunk,
    max_splits, ctas_per_sm; schedule ignored). max_chunk_tokens: the cap, tokens, 1..1,048,576.
    """

    split_params: SplitParams = field(default_factory=SplitParams)
    max_chunk_tokens: int = DEFAULT_MAX_CHUNK_TOKENS
    name: ClassVar[str] = "adaptive-chunk"
    family: ClassVar[str] = ADAPTIVE_FAMILY

    def __post_init__(self) -> None:
        self._check_knobs()

    def params(self) -> dict:
        return {**self.split_params.to_dict(), "max_chunk_tokens": self.max_chunk_tokens}

    @classmethod
    def from_params(cls, **params) -> AdaptiveChunkPolicy:
        max_chunk = params.pop("max_chunk_tokens", DEFAULT_MAX_CHUNK_TOKENS)
        return cls(SplitParams(**params), max_chunk)

    def _chunk_tokens(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> int:
        return adaptive_chunk_tokens(kv_lens, shape.num_kv_heads, shape.page_size,
                                     device.sm_count, device.max_ctas_per_sm, self.split_params,
                                     self.max_chunk_tokens)


def makespan_chunk_tokens(kv_lens, num_kv_heads: int, page_size: int, sm_count: int,
                          max_ctas_per_sm: int, params: SplitParams, max_chunk_tokens: int,
                          piece_cost_tokens: int) -> int:
    """The makespan family's chunk (tokens, a multiple of page_size) for one batch: the rule of
    kernels.tuned_planner.makespan_chunk_pages (the vendored planner computes the same chunk)
    with min chunk = params.min_tokens_per_cta, max chunk = max_chunk_tokens, params.max_splits,
    slots = SMs x min(params.ctas_per_sm, max_ctas_per_sm), and piece_cost_tokens (>= 0)."""
    kv = as_kv_lens(kv_lens)
    slots = sm_count * min(params.ctas_per_sm, max_ctas_per_sm)
    pages = makespan_chunk_pages(kv, num_kv_heads, page_size, sm_count, slots,
                                 params.min_tokens_per_cta, max_chunk_tokens, params.max_splits,
                                 piece_cost_tokens)
    return pages * page_size


@dataclass(frozen=True)
class MakespanChunkPolicy(_OneChunkPerBatch):
    """One chunk per batch, chosen at plan time by makespan_chunk_tokens, then pieces of exactly
    that many tokens in request order (FixedSplitPolicy, static order).

    split_params: min_tokens_per_cta = smallest candidate chunk, max_splits, ctas_per_sm (slots
    per SM the model counts); max_waves and schedule are ignored. The defaults are the study's
    (512-token min chunk, 1024 splits, 2 slots per SM): registry name `makespan-chunk`, so
    `kvtune bench --policies makespan-chunk:piece_cost_tokens=256` runs the rule untuned.
    max_chunk_tokens: the largest candidate, tokens, 1..1,048,576. piece_cost_tokens: the
    modelled cost of a piece beyond its tokens, 0..1,048,576.
    """

    split_params: SplitParams = field(default_factory=lambda: SplitParams(
        min_tokens_per_cta=512, max_waves=1, max_splits=1024, ctas_per_sm=2, schedule="static"))
    max_chunk_tokens: int = DEFAULT_MAX_CHUNK_TOKENS
    piece_cost_tokens: int = DEFAULT_PIECE_COST_TOKENS
    name: ClassVar[str] = "makespan-chunk"
    family: ClassVar[str] = MAKESPAN_FAMILY

    def __post_init__(self) -> None:
        self._check_knobs()
        check_int("piece_cost_tokens", self.piece_cost_tokens, 0, 1 << 20)

    def params(self) -> dict:
        return {**self.split_params.to_dict(), "max_chunk_tokens": self.max_chunk_tokens,
                "piece_cost_tokens": self.piece_cost_tokens}

    @classmethod
    def from_params(cls, **params) -> MakespanChunkPolicy:
        max_chunk = params.pop("max_chunk_tokens", DEFAULT_MAX_CHUNK_TOKENS)
        piece_cost = params.pop("piece_cost_tokens", DEFAULT_PIECE_COST_TOKENS)
        knobs = {**cls().split_params.to_dict(), **params}  # the study's defaults, overridden
        return cls(SplitParams(**knobs), max_chunk, piece_cost)

    def _chunk_tokens(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> int:
        return makespan_chunk_tokens(kv_lens, shape.num_kv_heads, shape.page_size,
                                     device.sm_count, device.max_ctas_per_sm, self.split_params,
                                     self.max_chunk_tokens, self.piece_cost_tokens)


@dataclass(frozen=True)
class ParametricPolicy:
    """The five-knob split rule that kvtune tunes (SplitParams).

    Rule, for B requests of L_b tokens, H_kv KV heads, S SMs, page size P:
      ctas = min(ctas_per_sm, device.max_ctas_per_sm); slots = S * ctas      (one wave)
      budget = max(max_waves * slots, B * H_kv)   (never below one CTA per request and head)
      c = the smallest multiple of P with c >= max(min_tokens_per_cta, P) such that
          H_kv * sum_b min(ceil(L_b / c), max_splits) <= budget
          (binary search over c from that minimum up to max_L, where every request is one piece
          and the condition always holds)
      splits_b = min(ceil(L_b / c), max_splits); request b is cut into splits_b equal page-aligned
          pieces (split_by_count: ceil(pages_b / splits_b) pages each, so the count can end lower).
    So requests no longer than min_tokens_per_cta are never split, a piece is never shorter than
    about c / 2, no request has more than max_splits pieces, and the launch has at most `budget`
    tasks. Items are ordered by `schedule`; a persistent grid has min(slots, tasks) CTAs; the plan
    assumes `ctas` CTAs per SM.
    """

    split_params: SplitParams = field(default_factory=SplitParams)
    name: ClassVar[str] = "parametric"

    def __post_init__(self) -> None:
        if not isinstance(self.split_params, SplitParams):
            raise ValueError(f"split_params: {self.split_params!r} is not a SplitParams")

    def params(self) -> dict:
        return self.split_params.to_dict()

    @classmethod
    def from_params(cls, **params) -> ParametricPolicy:
        return cls(SplitParams(**params))

    @classmethod
    def default_params(cls) -> dict:
        return SplitParams().to_dict()

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        p = self.split_params
        batch, heads, page = kv_lens.shape[0], shape.num_kv_heads, shape.page_size
        ctas = min(p.ctas_per_sm, device.max_ctas_per_sm)
        slots = device.sm_count * ctas
        budget = max(p.max_waves * slots, batch * heads)
        pages = cdiv(kv_lens, page)
        min_pages = cdiv(max(p.min_tokens_per_cta, page), page)
        max_pages = int(pages.max())

        def fits(chunk_pages: int) -> bool:
            wanted = np.minimum(cdiv(pages, chunk_pages), p.max_splits)
            return heads * int(wanted.sum()) <= budget

        # Counting in pages is exact: ceil(L / (c * P)) == ceil(ceil(L / P) / c).
        chunk_pages = smallest_fitting(min_pages, max(min_pages, max_pages), fits)
        wanted = np.minimum(cdiv(pages, chunk_pages), p.max_splits)
        notes = plain_notes(
            chunk_tokens=chunk_pages * page,
            budget_tasks=budget,
            cta_slots=slots,
            split_requests=int((wanted > 1).sum()),
        )
        return build_plan(
            kv_lens,
            split_by_count(kv_lens, wanted, page),
            num_kv_heads=heads,
            page_size=page,
            schedule=p.schedule,
            ctas_per_sm=ctas,
            grid_size=slots if p.schedule in PERSISTENT_SCHEDULES else None,
            notes=notes,
        )


def rule_policy(rule: str, params: SplitParams):
    """The Policy that plans one bucket of `params` under `rule` (one of RULES).

    parametric: ParametricPolicy(params). fixed-chunk: FixedSplitPolicy with chunk_tokens =
    params.min_tokens_per_cta (rounded up to the page size), static order, and params.ctas_per_sm
    as the occupancy the plan assumes (capped by the device's); max_waves, max_splits and schedule
    are not part of that rule and are ignored. ValueError for an unknown rule.
    """
    check_choice("rule", rule, RULES)
    if not isinstance(params, SplitParams):
        raise ValueError(f"params: {params!r} is not a SplitParams")
    if rule == FIXED_CHUNK_RULE:
        return FixedSplitPolicy(chunk_tokens=params.min_tokens_per_cta, schedule="static",
                                ctas_per_sm=params.ctas_per_sm)
    return ParametricPolicy(params)


def family_policy(family: str, params: SplitParams, max_chunk_tokens: int | None = None,
                  piece_cost_tokens: int | None = None):
    """The Policy one bucket of rule family `family` (FAMILIES) plans with. max_chunk_tokens
    (adaptive, makespan) and piece_cost_tokens (makespan): None takes the defaults."""
    check_choice("family", family, FAMILIES)
    if family == DEFER_FAMILY:
        return engine_default_policy()
    if family == MAKESPAN_FAMILY:
        return MakespanChunkPolicy(
            params, max_chunk_tokens or DEFAULT_MAX_CHUNK_TOKENS,
            DEFAULT_PIECE_COST_TOKENS if piece_cost_tokens is None else piece_cost_tokens)
    if family == ADAPTIVE_FAMILY:
        return AdaptiveChunkPolicy(params, max_chunk_tokens or DEFAULT_MAX_CHUNK_TOKENS)
    return rule_policy(family, params)


@dataclass(frozen=True)
class Bucket:
    """SplitParams for batch sizes min_batch..max_batch (inclusive), 1..MAX_BATCH.

    family: "" (the table's rule) or one of FAMILIES; max_chunk_tokens: the adaptive and
    makespan families' largest chunk (None: DEFAULT_MAX_CHUNK_TOKENS); piece_cost_tokens: the
    makespan family's cost per piece (None: DEFAULT_PIECE_COST_TOKENS). A deferred bucket's params
    are kept but not used.
    """

    min_batch: int
    max_batch: int
    params: SplitParams
    family: str = ""
    max_chunk_tokens: int | None = None
    piece_cost_tokens: int | None = None

    def to_dict(self) -> dict:
        d = {
            "min_batch": self.min_batch,
            "max_batch": self.max_batch,
            "params": self.params.to_dict(),
        }
        if self.family:
            d["family"] = self.family
        if self.max_chunk_tokens is not None:
            d["max_chunk_tokens"] = self.max_chunk_tokens
        if self.piece_cost_tokens is not None:
            d["piece_cost_tokens"] = self.piece_cost_tokens
        return d


def _as_bucket(index: int, entry) -> Bucket:
    family, max_chunk, piece_cost = "", None, None
    if isinstance(entry, Bucket):
        lo, hi, params = entry.min_batch, entry.max_batch, entry.params
        family, max_chunk, piece_cost = entry.family, entry.max_chunk_tokens, entry.piece_cost_tokens
    elif isinstance(entry, dict):
        unknown = set(entry) - {"min_batch", "max_batch", "params", "family", "max_chunk_tokens",
                                "piece_cost_tokens"}
        if unknown or "params" not in entry:
            raise ValueError(
                f"buckets[{index}]: needs keys min_batch, max_batch, params (family, "
                f"max_chunk_tokens, piece_cost_tokens optional); got {', '.join(sorted(entry))}"
            )
        lo, hi, params = entry.get("min_batch"), entry.get("max_batch"), entry["params"]
        family, max_chunk = entry.get("family", ""), entry.get("max_chunk_tokens")
        piece_cost = entry.get("piece_cost_tokens")
    elif isinstance(entry, (tuple, list)) and len(entry) in (3, 4, 5, 6):
        lo, hi, params = entry[:3]
        family = entry[3] if len(entry) > 3 else ""
        max_chunk = entry[4] if len(entry) > 4 else None
        piece_cost = entry[5] if len(entry) > 5 else None
    else:
        raise ValueError(f"buckets[{index}]: {entry!r} is not (min_batch, max_batch, SplitParams)")
    check_int(f"buckets[{index}].min_batch", lo, 1, MAX_BATCH)
    check_int(f"buckets[{index}].max_batch", hi, int(lo), MAX_BATCH)
    if isinstance(params, dict):
        params = SplitParams(**params)
    if not isinstance(params, SplitParams):
        raise ValueError(
            f"buckets[{index}].params: {params!r} is not a SplitParams or a dict of its fields"
        )
    if family:
        check_choice(f"buckets[{index}].family", family, FAMILIES)
    if max_chunk is not None:
        check_int(f"buckets[{index}].max_chunk_tokens", max_chunk, 1, 1 << 20)
    if piece_cost is not None:
        check_int(f"buckets[{index}].piece_cost_tokens", piece_cost, 0, 1 << 20)
    return Bucket(int(lo), int(hi), params, family or "", max_chunk, piece_cost)


@dataclass(frozen=True)
class BucketedPolicy:
    """A tuned heuristic: SplitParams looked up by batch size, planned with one rule.

    buckets: ordered, non-overlapping (min_batch, max_batch, SplitParams) ranges, given as Bucket,
        3-tuples or dicts {"min_batch", "max_batch", "params"} (params a SplitParams or its dict);
        ValueError if empty, overlapping or out of order. Gaps are allowed.
    rule: one of RULES (default "parametric": ParametricPolicy of the bucket's params;
        "fixed-chunk": pieces of exactly min_tokens_per_cta tokens, see rule_policy).
    A batch of B requests is planned with the bucket whose range holds B; a B outside every range
    takes the nearest bucket (smallest distance from B to the range; a tie goes to the bucket of
    smaller batches). The default is one bucket over every batch size with the default SplitParams.
    """

    buckets: tuple = ((1, MAX_BATCH, SplitParams()),)
    rule: str = PARAMETRIC_RULE
    name: ClassVar[str] = "tuned"

    def __post_init__(self) -> None:
        check_choice("rule", self.rule, RULES)
        entries = self.buckets
        if isinstance(entries, (str, bytes, dict)) or not hasattr(entries, "__iter__"):
            raise ValueError("buckets: need a list of (min_batch, max_batch, SplitParams)")
        normalized = tuple(_as_bucket(i, e) for i, e in enumerate(entries))
        if not normalized:
            raise ValueError("buckets: need at least one (min_batch, max_batch, SplitParams)")
        for i in range(1, len(normalized)):
            prev, cur = normalized[i - 1], normalized[i]
            if cur.min_batch <= prev.max_batch:
                raise ValueError(
                    f"buckets[{i}]: {cur.min_batch}..{cur.max_batch} overlaps or precedes "
                    f"buckets[{i - 1}] {prev.min_batch}..{prev.max_batch}; allowed: ranges in "
                    "increasing order without overlap"
                )
        object.__setattr__(self, "buckets", normalized)

    def params(self) -> dict:
        return {"buckets": [b.to_dict() for b in self.buckets], "rule": self.rule}

    @classmethod
    def from_params(cls, **params) -> BucketedPolicy:
        return cls(**params)

    @classmethod
    def default_params(cls) -> dict:
        return cls().params()

    def select(self, batch_size: int) -> int:
        """Index of the bucket used for `batch_size` requests."""
        distance = [
            max(b.min_batch - batch_size, 0, batch_size - b.max_batch) for b in self.buckets
        ]
        return int(np.argmin(distance))  # argmin keeps the first (smaller batches) on a tie

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        index = self.select(kv_lens.shape[0])
        bucket = self.buckets[index]
        family = bucket.family or self.rule
        plan = family_policy(family, bucket.params, bucket.max_chunk_tokens,
                             bucket.piece_cost_tokens).plan(kv_lens, shape, device)
        plan.notes.update(
            bucket=index, bucket_min_batch=bucket.min_batch, bucket_max_batch=bucket.max_batch,
            rule=self.rule, family=family,
        )
        return plan


__all__ = [
    "ADAPTIVE_FAMILY",
    "DEFAULT_MAX_CHUNK_TOKENS",
    "DEFER_FAMILY",
    "FAMILIES",
    "FIXED_CHUNK_RULE",
    "PARAMETRIC_RULE",
    "RULES",
    "AdaptiveChunkPolicy",
    "MAKESPAN_FAMILY",
    "MakespanChunkPolicy",
    "makespan_chunk_tokens",
    "Bucket",
    "BucketedPolicy",
    "ParametricPolicy",
    "adaptive_chunk_tokens",
    "engine_default_policy",
    "family_policy",
    "rule_policy",
]

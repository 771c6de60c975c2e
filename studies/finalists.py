"""The noise-aware choice at the end of a bucket's study.

The top configurations (5 by default) are measured again, interleaved so that drift in clocks
or temperature hits them alike: in each round, for each case, every finalist in turn
(A B C D E on case 1, A B C D E on case 2, ...). A finalist's score in a round is the geometric
mean over the cases of its latency / the best baseline latency; over the rounds it has a median,
p10 and p90. The fastest finalist (lowest median score) wins, unless another one's p10..p90 range
overlaps the fastest's (they are within the measurement noise of each other) and it is simpler:
it launches fewer CTAs over the bucket's cases. Among all finalists within the noise of the
fastest, the one with fewest CTAs wins (ties: the lower median score). With a deterministic
backend (the simulator) the ranges are points, so only exact ties are decided by simplicity.

Rule families: besides the search's configurations (the backend's rule), the finalists include a
few `makespan` candidates (makespan_candidates: one chunk per batch chosen at plan time by a model
of the launch, kernels.parametric.MakespanChunkPolicy), so each bucket picks its family on the
same interleaved measurements; `defer` is decided afterwards on held-out cases
(studies/validation.py). The `adaptive` family (adaptive_candidates) is measured too when a
study asks for it (`kvtune tune --families makespan,adaptive`), not by default: on the GPU rows
of four acceptance runs the makespan rule was within 1% of the per-case best chunk where
adaptive's winners were up to 18.5% off (docs/PERFORMANCE.md, fourth session).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kvtune.kernels.plan import SplitParams
from kvtune.studies.objective import geomean, robust_score
from kvtune.studies.result import Finalist
from kvtune.studies.rules import trial_policy

DEFAULT_FINALISTS = 5
DEFAULT_ROUNDS = 3
# The adaptive candidates: target waves x CTA slots per SM (the occupancy the rule counts with),
# min chunk 128 tokens (FlashInfer's), max splits 256, and the max chunks below. Simulated on the calibrated H100 and H200
# models (FlashInfer and Triton kernels), the best of this grid per batch-size range sits within
# about 1% of the per-case best chunk in geomean while never planning slower than FlashInfer's own
# planner; which cell is best moves with the batch size (1-2 slots, 2 waves at batch 8-16; 2
# slots, 4 waves at 32-64; 4 slots, 2-16 waves above), so each bucket measures the grid.
ADAPTIVE_WAVES = (1, 2, 4, 8)
ADAPTIVE_CTAS_PER_SM = (1, 2, 4)
ADAPTIVE_MAX_SPLITS = 256
ADAPTIVE_MIN_CHUNK_TOKENS = 128  # FlashInfer's own minimum
# Max chunk: none (FlashInfer's own search has none; small batches of long requests want large
# chunks), or 8192 tokens: on large batches of long requests (prod-mix, B >= 128, millions of
# tokens) the best fixed chunk is 4096-8192 tokens whatever the even share per slot, and a chunk
# of 1.2 x that share / W was 1.23-1.26x slower there (H200, FlashInfer, 2026-11-26).
ADAPTIVE_MAX_CHUNKS_TOKENS = (1 << 20, 8192)


# The makespan candidates: the modelled cost of a piece beyond its tokens (tokens), with the
# model counting 2 CTA slots per SM over a chunk grid of 512..16384 tokens. On the GPU rows of the
# third and fourth sessions (H100 and H200, Triton graph replays and FlashInfer CUPTI, 1,197
# cases, engine margin kernels.tuned_planner.ENGINE_PREFERENCE) 384-768 never planned a case
# slower than FlashInfer's planner; 128 planned 15 cases more than 2% slower, 256 two (one H100
# threshold batch, 2.8%) for 0.2% of geomean, so the grid starts at 384.
MAKESPAN_PIECE_COSTS_TOKENS = (384, 512, 768)
# Slots per SM the model counts: 2, the kernels' usual residency, and 3, what the Triton kernel's
# register-capped twins run where every slot of the entry is taken (kernels/decode_config.py
# CAPPED_TWIN: fp8 head_dim 128, the one-KV-head 16-bit twin). Counting 2, the model splits
# batches whose unsplit tasks fit one wave of 3: on an H200 (twenty-fifth session, call 5) the fp8
# study's 33-128 bucket deferred to the engine because its 2-slot rule cut arxiv B=48 (384 tasks
# whole: one wave of 396 slots under the twin) and ran 1.039x the engine's plan there, while
# 1.2-3.9x faster on the bucket's other traces. Both are measured; the validation decides.
MAKESPAN_CTAS_PER_SM = (2, 3)
MAKESPAN_MIN_CHUNK_TOKENS = 512
MAKESPAN_MAX_CHUNK_TOKENS = 16384
MAKESPAN_MAX_SPLITS = 1024


@dataclass(frozen=True)
class FamilyCandidate:
    """A finalist of another rule family than the backend's: `family` (kernels.parametric
    FAMILIES) with its knobs `params` and, for adaptive and makespan, `max_chunk_tokens`; for
    makespan `piece_cost_tokens`."""

    params: SplitParams
    family: str
    max_chunk_tokens: int | None = None
    piece_cost_tokens: int | None = None

    def policy(self):
        from kvtune.kernels.parametric import family_policy

        return family_policy(self.family, self.params, self.max_chunk_tokens,
                             self.piece_cost_tokens)


def _distinct(candidates, device, cases) -> list:
    """The candidates in order, less those that plan the same chunk on every case as an earlier
    one (measuring it again would only cost GPU time); all of them without device or cases."""
    if device is None or not cases:
        return list(candidates)
    out, seen = [], set()
    for cand in candidates:
        policy = cand.policy()
        key = tuple(policy.plan(c.batch.kv_lens, c.batch.shape, device).notes["chunk_tokens"]
                    for c in cases)
        if key not in seen:
            seen.add(key)
            out.append(cand)
    return out


def makespan_candidates(space, device=None, cases=()) -> list[FamilyCandidate]:
    """The makespan finalists of a study's `space` (its page size): one per
    MAKESPAN_CTAS_PER_SM (slots per SM the model counts; those above device.max_ctas_per_sm left
    out) x MAKESPAN_PIECE_COSTS_TOKENS, with min chunk max(512, page), max chunk 16384. Given
    `device` and the bucket's `cases` (harness.runner.CaseRun), a candidate that plans the same
    chunk on every case as an earlier one is dropped."""
    low = max(MAKESPAN_MIN_CHUNK_TOKENS, space.page_size)
    limit = device.max_ctas_per_sm if device is not None else max(MAKESPAN_CTAS_PER_SM)
    return _distinct((FamilyCandidate(SplitParams(min_tokens_per_cta=low, max_waves=1,
                                                  max_splits=MAKESPAN_MAX_SPLITS,
                                                  ctas_per_sm=ctas, schedule="static"),
                                      "makespan", max(MAKESPAN_MAX_CHUNK_TOKENS, low), cost)
                      for ctas in (c for c in MAKESPAN_CTAS_PER_SM if c <= limit)
                      for cost in MAKESPAN_PIECE_COSTS_TOKENS), device, cases)


def adaptive_candidates(space, device=None, cases=()) -> list[FamilyCandidate]:
    """The adaptive finalists of a study's `space` (its page size): ADAPTIVE_MAX_CHUNKS_TOKENS x
    ADAPTIVE_CTAS_PER_SM x ADAPTIVE_WAVES (slots per SM above device.max_ctas_per_sm left out). Given `device`
    and the bucket's `cases` (harness.runner.CaseRun), a candidate that plans the same chunk on
    every case as an earlier one is dropped: measuring it again would only cost GPU time."""
    page = space.page_size
    low = max(ADAPTIVE_MIN_CHUNK_TOKENS, page)
    limit = device.max_ctas_per_sm if device is not None else max(ADAPTIVE_CTAS_PER_SM)
    return _distinct((FamilyCandidate(SplitParams(min_tokens_per_cta=low, max_waves=w,
                                                  max_splits=ADAPTIVE_MAX_SPLITS, ctas_per_sm=ctas,
                                                  schedule="static"), "adaptive", max(top, low))
                      for top in ADAPTIVE_MAX_CHUNKS_TOKENS
                      for ctas in (c for c in ADAPTIVE_CTAS_PER_SM if c <= limit)
                      for w in ADAPTIVE_WAVES), device, cases)


# The per-batch families a study can add to its finalists (kvtune tune --families), and what
# makes each one's candidates.
PER_BATCH_CANDIDATES = {"makespan": makespan_candidates, "adaptive": adaptive_candidates}


@dataclass(frozen=True)
class FinalistStats:
    """One finalist after the interleaved rounds.

    scores: one score per round. total_us: per round, the summed latency over the cases (us).
    case_us: median latency per case over the rounds. ctas: CTAs launched over the cases.
    failed: why it could not be re-measured (None when all rows were ok).
    """

    params: SplitParams
    scores: tuple[float, ...]
    total_us: tuple[float, ...]
    case_us: dict
    ctas: int
    failed: str | None = None
    family: str = ""
    max_chunk_tokens: int | None = None
    piece_cost_tokens: int | None = None

    @property
    def median(self) -> float:
        return float(np.median(self.scores)) if self.scores else float("inf")

    @property
    def p10(self) -> float:
        return float(np.percentile(self.scores, 10)) if self.scores else float("inf")

    @property
    def p90(self) -> float:
        return float(np.percentile(self.scores, 90)) if self.scores else float("inf")

    @property
    def median_us(self) -> float:
        return float(np.median(self.total_us)) if self.total_us else float("nan")

    @property
    def spread(self) -> float:
        """(p90 - p10) / median of the score over the rounds (0 for a deterministic backend)."""
        return (self.p90 - self.p10) / self.median if self.scores else float("nan")

    def to_finalist(self, chosen: bool) -> Finalist:
        return Finalist(self.params, self.median, self.p10, self.p90, self.ctas, chosen,
                        self.family, self.max_chunk_tokens, self.piece_cost_tokens)


def choose(stats: list[FinalistStats], default_us: dict | None = None,
           limit: float = 1.02) -> int:
    """Index of the winner (see the module docstring). ValueError when none was measured.

    default_us: {case_id: latency of the engine's own planner, us} on the same cases (a baseline
    of the study). Given it, finalists never more than `limit` x its latency on any case win over
    the others: what ships must not be slower than the engine's planner on held-out cases
    (studies/validation.py), so training prefers a rule that is not slower on training cases
    either. When no finalist is that safe, those whose worst case is least past the limit
    compete.
    """
    ok = [i for i, s in enumerate(stats) if s.failed is None and s.scores]
    if not ok:
        raise ValueError("finalists: none could be measured again")
    if default_us:
        def excess(i):  # how far past the limit its worst case is (1.0: within it)
            worst = max((us / default_us[c] for c, us in stats[i].case_us.items()
                         if c in default_us), default=1.0)
            return max(worst / limit, 1.0)

        least = min(excess(i) for i in ok)
        ok = [i for i in ok if excess(i) <= least]
    fastest = min(ok, key=lambda i: (stats[i].median, stats[i].ctas))
    f = stats[fastest]
    within = [i for i in ok if stats[i].p10 <= f.p90]
    return min(within, key=lambda i: (stats[i].ctas, stats[i].median))


def runners_up(stats: list[FinalistStats], winner: int, default_us: dict | None,
               limit: float = 1.02, count: int = 2) -> list[int]:
    """Indices of at most `count` finalists other than `winner` that may ship in its place when
    the winner defers on the held-out cases (studies/validation_step.py): measured, within `limit`
    x the engine's planner (`default_us`, {case_id: us}) on every training case, faster than it
    in geomean over them, fastest (lowest median score) first. [] without `default_us`."""
    if not default_us:
        return []
    out = []
    for i, s in enumerate(stats):
        if i == winner or s.failed is not None or not s.scores:
            continue
        ratios = [us / default_us[c] for c, us in s.case_us.items() if c in default_us]
        if ratios and max(ratios) <= limit and geomean(ratios) < 1.0:
            out.append(i)
    out.sort(key=lambda i: (stats[i].median, stats[i].ctas))
    return out[:count]


def top_configs(trials, k: int = DEFAULT_FINALISTS, multi_objective: bool = False,
                pareto=()) -> list[SplitParams]:
    """The `k` best distinct configurations of the complete `trials` (optuna FrozenTrials).

    Single objective: by value. Multi-objective: the Pareto front (`pareto`, by geometric mean)
    first, then the other trials by geometric mean.
    """
    from kvtune.studies.space import params_from_trial

    def key(t):
        return t.values[0] if multi_objective else t.value

    front = sorted(pareto, key=key)
    rest = sorted((t for t in trials if t not in front), key=key)
    out: list[SplitParams] = []
    for t in list(front) + rest:
        params = params_from_trial(t.params)
        if params not in out:
            out.append(params)
        if len(out) == k:
            break
    return out


def measure_finalists(runner, cases, candidates: list, baselines_us: dict,
                      recorder, *, study_name: str, bucket: str,
                      rounds: int = DEFAULT_ROUNDS, robust: bool = False) -> list[FinalistStats]:
    """Measure `candidates` interleaved over `rounds` rounds (see the module docstring), each
    planned with the backend's rule (studies/rules.py: trial_policy), or a FamilyCandidate with
    its family's rule. robust: a round's score is objective.robust_score of the ratios (the
    default objective), else their geomean."""
    if rounds < 1:
        raise ValueError(f"finalist-rounds: {rounds} out of range; allowed: >= 1")
    n = len(candidates)
    policies = [c.policy() if isinstance(c, FamilyCandidate) else trial_policy(runner.backend, c)
                for c in candidates]
    lat = np.full((n, rounds, len(cases)), np.nan)
    ctas = [0] * n
    failed: list[str | None] = [None] * n
    for r in range(rounds):
        for c, case in enumerate(cases):
            for i, policy in enumerate(policies):
                if failed[i]:
                    continue
                row, plan = runner.measure_one(case, policy, series=f"finalist:{i}")
                recorder.add(row, phase="finalist", study=study_name, bucket=bucket,
                             round_index=r, candidate=i)
                if row["status"] != "ok":
                    failed[i] = f"{row['status']} on {case.case_id}: {row.get('message', '')}"
                    continue
                lat[i, r, c] = row["latency_us"]
                if r == 0:
                    ctas[i] += int(plan.grid_size)
    best = np.array([min(baselines_us[case.case_id].values()) for case in cases])
    out = []
    for i, cand in enumerate(candidates):
        is_family = isinstance(cand, FamilyCandidate)
        family = cand.family if is_family else ""
        knobs = (cand.max_chunk_tokens, cand.piece_cost_tokens) if is_family else (None, None)
        params = cand.params if is_family else cand
        if failed[i]:
            out.append(FinalistStats(params, (), (), {}, ctas[i], failed[i], family, *knobs))
            continue
        score_of = robust_score if robust else geomean
        scores = tuple(score_of(lat[i, r] / best) for r in range(rounds))
        totals = tuple(float(lat[i, r].sum()) for r in range(rounds))
        case_us = {case.case_id: float(np.median(lat[i, :, c])) for c, case in enumerate(cases)}
        out.append(FinalistStats(params, scores, totals, case_us, ctas[i], None, family, *knobs))
    return out


__all__ = [
    "DEFAULT_FINALISTS",
    "DEFAULT_ROUNDS",
    "FamilyCandidate",
    "FinalistStats",
    "adaptive_candidates",
    "makespan_candidates",
    "PER_BATCH_CANDIDATES",
    "choose",
    "runners_up",
    "measure_finalists",
    "top_configs",
]

"""The oracle: the best per-request split found for one case, to measure a heuristic's regret.

A heuristic maps (kv_lens, device) to split counts through a few knobs; the oracle instead picks
the split count of each request directly and measures, so regret = tuned latency / oracle latency
says how much any rule of the five knobs leaves on the table for that batch.

What is searched, exactly (ExplicitSplitPolicy plans it: request b is cut into splits_b equal
page-aligned pieces, kernels.plan.split_by_count):
1. Groups. A batch of at most EXACT_MAX_REQUESTS requests gives every request its own group.
   Otherwise requests of similar length share a group (length classes of a quarter octave:
   round(4 * log2(kv_len)) equal), and when there are more than MAX_GROUPS classes, the
   requests sorted by length are cut into MAX_GROUPS groups of (nearly) equal count. All
   requests of a group get the same split count.
2. Split grid: 1, 2, 4, ..., 128 per group, capped at the group's longest request in pages.
3. Seeds: no split; one count for all groups from the grid; each baseline policy's split counts
   (with its schedule and CTAs per SM) cut into equal pieces; and each baseline's own plan as it
   is (its pieces need not be equal) - so the oracle is never slower than a seeding baseline.
4. From the best seed, with its schedule and CTAs per SM: exhaustive over every combination of
   the grid when there are at most EXHAUSTIVE_MAX_COMBINATIONS, else coordinate descent (each
   group in turn takes the grid value that is fastest with the others fixed, until a sweep
   changes nothing, at most MAX_SWEEPS sweeps).
5. Then every schedule x CTAs per SM of the study's space is tried with the best split counts;
   if one is faster, step 4's descent runs once more with it.
Every configuration is measured through the runner (correctness gate included), once; results
are cached per configuration. The oracle is what this search found, not a proven optimum.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kvtune.kernels.plan import (
    PERSISTENT_SCHEDULES,
    AttentionShape,
    DeviceSpec,
    Plan,
    as_kv_lens,
    build_plan,
    split_by_count,
)
from kvtune.studies.space import SearchSpace

EXACT_MAX_REQUESTS = 4
MAX_GROUPS = 4
SPLIT_GRID = (1, 2, 4, 8, 16, 32, 64, 128)
EXHAUSTIVE_MAX_COMBINATIONS = 512
MAX_SWEEPS = 3


@dataclass(frozen=True)
class ExplicitSplitPolicy:
    """Plans a batch with the given split count per request (not a heuristic: one batch only).

    splits: one count >= 1 per request (a count above a request's pages ends lower).
    schedule: one of SCHEDULES. ctas_per_sm: 1..32, capped by the device's occupancy.
    """

    splits: tuple
    schedule: str = "static"
    ctas_per_sm: int = 1
    name: ClassVar[str] = "oracle-splits"

    def params(self) -> dict:
        return {"splits": [int(s) for s in self.splits], "schedule": self.schedule,
                "ctas_per_sm": int(self.ctas_per_sm)}

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv_lens = as_kv_lens(kv_lens)
        splits = np.asarray(self.splits, dtype=np.int64)
        if splits.shape != kv_lens.shape or (splits < 1).any():
            raise ValueError(f"splits: need {kv_lens.shape[0]} counts >= 1, got {len(self.splits)}")
        ctas = min(int(self.ctas_per_sm), device.max_ctas_per_sm)
        return build_plan(
            kv_lens, split_by_count(kv_lens, splits, shape.page_size),
            num_kv_heads=shape.num_kv_heads, page_size=shape.page_size, schedule=self.schedule,
            ctas_per_sm=ctas,
            grid_size=device.sm_count * ctas if self.schedule in PERSISTENT_SCHEDULES else None,
            notes={"oracle": True})


@dataclass(frozen=True)
class OracleResult:
    """The best configuration the search found for one case (latency in us)."""

    case_id: str
    best_us: float
    splits: tuple
    schedule: str
    ctas_per_sm: int
    evaluations: int
    method: str


def length_groups(kv_lens: np.ndarray) -> np.ndarray:
    """Group index per request (see step 1 of the module docstring)."""
    kv_lens = np.asarray(kv_lens)
    n = kv_lens.shape[0]
    if n <= EXACT_MAX_REQUESTS:
        return np.arange(n)
    classes = np.round(4 * np.log2(kv_lens)).astype(np.int64)
    distinct, inverse = np.unique(classes, return_inverse=True)
    if distinct.shape[0] <= MAX_GROUPS:
        return inverse.reshape(-1)
    order = np.argsort(kv_lens, kind="stable")
    groups = np.empty(n, dtype=np.int64)
    groups[order] = np.arange(n) * MAX_GROUPS // n
    return groups


class OracleSearch:
    """Runs the search of the module docstring for one case at a time."""

    def __init__(self, runner, space: SearchSpace, recorder, *, study_name: str, bucket: str) -> None:
        self.runner = runner
        self.space = space
        self.recorder = recorder
        self.study_name = study_name
        self.bucket = bucket

    def run(self, case, seed_policies=()) -> OracleResult:
        """The oracle of `case` (a CaseRun); seed_policies: baseline policies whose plans seed it."""
        kv_lens = case.batch.kv_lens
        page = case.batch.shape.page_size
        groups = length_groups(kv_lens)
        n_groups = int(groups.max()) + 1
        pages = -(-kv_lens // page)
        group_pages = np.array([pages[groups == g].max() for g in range(n_groups)])
        grids = [tuple(v for v in SPLIT_GRID if v <= max(1, gp)) for gp in group_pages]
        cache: dict = {}

        def evaluate(splits, schedule, ctas) -> float:
            key = (tuple(int(s) for s in splits), schedule, int(ctas))
            if key not in cache:
                policy = ExplicitSplitPolicy(key[0], schedule, int(ctas))
                row, _ = self.runner.measure_one(case, policy)
                self.recorder.add(row, phase="oracle", study=self.study_name, bucket=self.bucket)
                cache[key] = float(row["latency_us"]) if row["status"] == "ok" else float("inf")
            return cache[key]

        def per_request(values) -> tuple:
            return tuple(int(values[g]) for g in groups)

        base_sched, base_ctas = self.space.schedules[0], self.space.ctas_per_sm[0]
        seeds = [(per_request([1] * n_groups), base_sched, base_ctas)]
        for v in SPLIT_GRID:
            seeds.append((per_request([min(v, grids[g][-1]) for g in range(n_groups)]), base_sched, base_ctas))
        plan_us = {}
        for policy in seed_policies:
            try:
                plan = policy.plan(kv_lens, case.batch.shape, self.runner.device)
            except ValueError:
                continue
            seeds.append((tuple(int(s) for s in plan.splits), plan.schedule, int(plan.ctas_per_sm)))
            row, _ = self.runner.measure_one(case, policy)
            self.recorder.add(row, phase="oracle", study=self.study_name, bucket=self.bucket)
            if row["status"] == "ok":
                plan_us[f"{policy.name}:{json.dumps(policy.params(), sort_keys=True, default=str)}"] = (
                    float(row["latency_us"]), plan)
        best = min(seeds, key=lambda s: evaluate(*s))
        splits, schedule, ctas = best
        combos = int(np.prod([len(g) for g in grids]))
        method = "exhaustive" if combos <= EXHAUSTIVE_MAX_COMBINATIONS else "coordinate-descent"

        def improve(splits, schedule, ctas):
            if method == "exhaustive":
                options = [per_request(v) for v in itertools.product(*grids)]
                return min([splits] + options, key=lambda s: evaluate(s, schedule, ctas))
            values = _group_values(splits, groups, n_groups)
            for _ in range(MAX_SWEEPS):
                changed = False
                for g in range(n_groups):
                    def trial(v, g=g):
                        vals = list(values)
                        vals[g] = v
                        return per_request(vals)
                    current = evaluate(per_request(values), schedule, ctas)
                    pick = min(grids[g], key=lambda v: evaluate(trial(v), schedule, ctas))
                    if evaluate(trial(pick), schedule, ctas) < current:
                        values[g] = pick
                        changed = True
                if not changed:
                    break
            candidate = per_request(values)
            return min([splits, candidate], key=lambda s: evaluate(s, schedule, ctas))

        splits = improve(splits, schedule, ctas)
        pairs = [(s, c) for s in self.space.schedules for c in self.space.ctas_per_sm]
        best_pair = min(pairs + [(schedule, ctas)], key=lambda p: evaluate(splits, *p))
        if best_pair != (schedule, ctas):
            schedule, ctas = best_pair
            splits = improve(splits, schedule, ctas)
        best_key = min(cache, key=cache.get)
        evaluations = len(cache) + len(plan_us)
        if plan_us:
            us, plan = min(plan_us.values(), key=lambda v: v[0])
            if us < cache[best_key]:
                return OracleResult(case.case_id, us, tuple(int(s) for s in plan.splits),
                                    plan.schedule, int(plan.ctas_per_sm), evaluations,
                                    method + "+baseline-plan")
        return OracleResult(case.case_id, cache[best_key], best_key[0], best_key[1], best_key[2],
                            evaluations, method)


def _group_values(splits, groups, n_groups) -> list[int]:
    # A per-request assignment collapsed to one value per group (the group's largest count).
    splits = np.asarray(splits)
    return [int(splits[groups == g].max()) for g in range(n_groups)]


__all__ = ["SPLIT_GRID", "ExplicitSplitPolicy", "OracleResult", "OracleSearch", "length_groups"]

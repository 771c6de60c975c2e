"""Is a tuned heuristic ever slower than a baseline measured beside it? One verdict per pair.

A deployed heuristic must never be slower than the engine's own planner, and on many batches it
plans exactly what the engine plans (a deferred bucket, or a rule that keeps the engine's chunk).
There the two series launched the same kernel on the same pieces, and whatever their latencies
differ by is the measurement's noise, not the heuristic: on an H200 two such launches, timed in
alternated rounds, read up to 2.9% apart (twenty-sixth session, docs/PERFORMANCE.md). So the
verdict keeps them apart: the cases where the launches differ (harness.fidelity.launch_key) carry
the comparison, and the identical ones give the noise band it is read against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtune.harness.fidelity import launch_key
from kvtune.kernels.parametric import BucketedPolicy

TUNED_POLICY = BucketedPolicy.name
# A heuristic's launch slower than the engine's planner by more than this factor is a regression:
# without identical launches to read the noise from, the verdict counts a launch as slower only
# past it, and the tune ships a bucket only if no held-out case is past it (plus the noise;
# studies/validation.py and studies/export.py take it from here).
REGRESSION_LIMIT = 1.02


@dataclass(frozen=True)
class HeuristicVerdict:
    """One tuned series against one baseline over the cases both measured.

    speedups are baseline latency / tuned latency (> 1: the heuristic is faster). cases: the
    cases both measured ok; same_launch: of them, where both launched the same kernel on the
    same pieces (same_min / same_max: their speedup range, the noise; nan when none);
    differing: the others (geomean / worst over them; nan when none); slower: of the differing,
    those below the noise floor (the identical launches' lowest speedup, or 1 / REGRESSION_LIMIT
    when there are none or that is higher): the cases where the heuristic is slower than the
    baseline beyond the noise; geomean_all, worst_all: over every case."""

    series: str
    baseline: str
    cases: int
    same_launch: int
    same_min: float
    same_max: float
    differing: int
    geomean_differing: float
    worst_differing: float
    geomean_all: float
    worst_all: float
    slower: int = 0


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _ok(row: dict) -> bool:
    latency = row.get("latency_us")
    return (row.get("status") == "ok" and isinstance(latency, (int, float))
            and math.isfinite(latency) and latency > 0)


def _hybrid(row: dict) -> bool:
    """A row of a hybrid batch (prefill chunks or speculative decodes): it names its prefill
    tokens (a table of decode rows read beside hybrid ones holds NaN there)."""
    value = row.get("prefill_tokens")
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _names_file(row: dict) -> bool:
    """A row of a heuristic file (`kvtune bench --heuristic` / `tuned:path=`), not of a tune's
    own candidates."""
    path = row.get("heuristic_path")
    return isinstance(path, str) and bool(path)


def heuristic_verdicts(rows: list[dict]) -> list[HeuristicVerdict]:
    """A verdict per (tuned series, other series) pair over decode rows (rows of prefill chunks
    are left out: harness.hybrid_summary compares those). A row's series is its `series` column
    (else its policy); tuned series are rows of policy "tuned" that name their heuristic file
    (heuristic_path), baselines every other series but the oracle's. Pairs with no common case
    are left out; order: tuned series, then baselines, as first seen."""
    by_series: dict[str, dict[str, dict]] = {}
    tuned: list[str] = []
    for r in rows:
        if _hybrid(r) or not _ok(r):
            continue
        series = str(r.get("series") or r.get("policy"))
        if r.get("policy") == TUNED_POLICY:
            if not _names_file(r):
                continue  # a tune's own trials and finalists: not a deployed file
            if series not in tuned:
                tuned.append(series)
        by_series.setdefault(series, {})[str(r.get("case_id"))] = r
    out = []
    for t in tuned:
        for base, base_rows in by_series.items():
            if base in tuned or base.startswith("oracle"):
                continue
            common = [c for c in by_series[t] if c in base_rows]
            if not common:
                continue
            same, differing = [], []
            for c in common:
                mine, theirs = by_series[t][c], base_rows[c]
                speedup = float(theirs["latency_us"]) / float(mine["latency_us"])
                key = launch_key(mine)
                (same if key is not None and key == launch_key(theirs) else differing).append(
                    speedup)
            every = same + differing
            floor = min(min(same, default=1.0), 1.0 / REGRESSION_LIMIT)
            out.append(HeuristicVerdict(
                series=t, baseline=base, cases=len(common), same_launch=len(same),
                same_min=min(same, default=math.nan), same_max=max(same, default=math.nan),
                differing=len(differing), geomean_differing=_geomean(differing),
                worst_differing=min(differing, default=math.nan), geomean_all=_geomean(every),
                worst_all=min(every), slower=sum(1 for x in differing if x < floor)))
    return out


def verdict_line(v: HeuristicVerdict) -> str:
    """One line for a person: the differing launches first, then the identical ones' band."""
    text = f"{v.series} against {v.baseline}: {v.cases} case" + ("s" if v.cases != 1 else "")
    if v.differing:
        text += (f"; {v.differing} with another launch: x{v.geomean_differing:.3f} geomean, "
                 f"worst x{v.worst_differing:.3f}")
        if v.slower:
            text += f", SLOWER than {v.baseline} beyond the noise on {v.slower}"
    if v.same_launch:
        text += (f"; {v.same_launch} the same launch (x{v.same_min:.3f}..x{v.same_max:.3f}: "
                 "the measurement's noise)")
    return text + f"; all: x{v.geomean_all:.3f} geomean, worst x{v.worst_all:.3f}"


__all__ = ["HeuristicVerdict", "REGRESSION_LIMIT", "TUNED_POLICY", "heuristic_verdicts",
           "verdict_line"]

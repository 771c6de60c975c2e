"""Interleaved rounds: one case measured with every policy several times, in alternating order,
and each policy's rounds merged into one row.

Why: two back-to-back measurements of the same launches drift apart by up to 2.5% on an H100
(hybrid suite, twenty-third session: 79 cases where the tuned file plans exactly as serial read
0.975-1.009x of serial, p10 included), enough to break a 2% "never slower" check with no
difference in the work. Measuring A B, then B A, ..., and taking the median of each policy's
round medians puts the same drift on both sides of a comparison.

Plain data only: rows are the dicts harness.runner builds (Measurement.to_row plus plan
columns); times in microseconds.
"""

from __future__ import annotations

import json
import math

import numpy as np

MAX_ROUNDS = 20


def check_rounds(rounds: int) -> int:
    """`rounds` as an int in 1..MAX_ROUNDS; ValueError naming the field otherwise."""
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) \
            or not 1 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"rounds: {rounds!r} out of range; allowed: an integer 1..{MAX_ROUNDS}")
    return int(rounds)


def round_order(items: list, round_index: int) -> list:
    """The order of `items` in round `round_index` (0-based): as given in even rounds, reversed
    in odd ones, so that each item is measured first as often as last."""
    return list(items) if round_index % 2 == 0 else list(reversed(items))


def _finite(values) -> list[float]:
    out = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def merge_rounds(rows: list[dict]) -> dict:
    """One row from the rows of the same (case, policy) measured in successive rounds.

    A round that is not ok (failed, unsupported) makes the merged row that round's row. Else the
    last round's row carries the plan and telemetry columns, with: latency_us the median of the
    rounds' medians; p10_us / p90_us the lowest p10 and highest p90; mean_us the mean of the
    means; std_us pooled (within plus between rounds); samples and interference_retries summed;
    noise_met only where every round met it; rel_spread, achieved_bytes_per_s and bw_fraction
    recomputed from the merged median; `rounds` and `round_latencies_us` (a JSON list) added.
    A single row comes back with only those two columns added."""
    if not rows:
        raise ValueError("rows: empty; allowed: one row per round, at least one")
    for r in rows:
        if r.get("status") != "ok":
            return {**r, "rounds": len(rows),
                    "round_latencies_us": json.dumps([x.get("latency_us") for x in rows])}
    out = dict(rows[-1])
    medians = [float(r["latency_us"]) for r in rows]
    out["rounds"] = len(rows)
    out["round_latencies_us"] = json.dumps([round(m, 3) for m in medians])
    if len(rows) == 1:
        return out
    median = float(np.median(medians))
    out["latency_us"] = median
    p10 = _finite(r.get("p10_us") for r in rows)
    p90 = _finite(r.get("p90_us") for r in rows)
    out["p10_us"] = min(p10) if p10 else float("nan")
    out["p90_us"] = max(p90) if p90 else float("nan")
    means = _finite(r.get("mean_us") for r in rows)
    if len(means) == len(rows):
        grand = float(np.mean(means))
        stds = _finite(r.get("std_us") for r in rows)
        within = float(np.mean([s * s for s in stds])) if len(stds) == len(rows) else float("nan")
        between = float(np.mean([(m - grand) ** 2 for m in means]))
        out["mean_us"] = grand
        out["std_us"] = math.sqrt(within + between) if within == within else float("nan")
    out["samples"] = int(sum(int(r.get("samples") or 0) for r in rows))
    retries = _finite(r.get("interference_retries") for r in rows)
    if retries:
        out["interference_retries"] = int(sum(retries))
    out["noise_met"] = all(bool(r.get("noise_met")) for r in rows)
    if median > 0 and out["p10_us"] == out["p10_us"] and out["p90_us"] == out["p90_us"]:
        out["rel_spread"] = (out["p90_us"] - out["p10_us"]) / median
    nbytes = out.get("bytes_moved") or 0
    if nbytes and median > 0:
        out["achieved_bytes_per_s"] = nbytes / (median * 1e-6)
        ceiling = out.get("ceiling_bytes_per_s")
        if ceiling and ceiling == ceiling:
            out["bw_fraction"] = out["achieved_bytes_per_s"] / ceiling
    return out


__all__ = ["MAX_ROUNDS", "check_rounds", "merge_rounds", "round_order"]

"""A tuned bucket's training and validation side by side (the Study page).

Training numbers come from the bucket's cases (the cases the search and the finalists saw);
validation numbers from `bucket.validation`, the cases the search never saw (studies/validation.py).
Ratios are latency / the best baseline's (below 1: faster); speedups are baseline / chosen.
"""

from __future__ import annotations

import math

import pandas as pd


def _geomean(values) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def training_summary(bucket) -> dict:
    """{cases, score_geomean, worst, speedup: {baseline: {geomean, worst}}} of the training cases."""
    cases = [c for c in bucket.cases if c.tuned_us and c.tuned_us > 0]
    speedup = {}
    names = sorted({n for c in cases for n in c.baselines_us})
    for name in names:
        s = [c.baselines_us[name] / c.tuned_us for c in cases if name in c.baselines_us]
        speedup[name] = {"geomean": _geomean(s), "worst": min(s) if s else math.nan}
    return {"cases": len(cases), "score_geomean": bucket.score, "worst": bucket.worst,
            "speedup": speedup}


def train_validation_table(bucket) -> pd.DataFrame:
    """One row per set (training, validation): cases, score, worst, and per baseline the
    geomean and worst speedup of the shipped rule; validation adds the engine default."""
    sets = [("training", training_summary(bucket))]
    if bucket.validation:
        sets.append(("validation", bucket.validation))
    rows = []
    for label, s in sets:
        row = {"set": label, "cases": s.get("cases"), "score (geomean)": s.get("score_geomean"),
               "worst": s.get("worst")}
        for name, sp in sorted((s.get("speedup") or {}).items()):
            row[f"x vs {name} (geomean / worst)"] = _pair(sp)
        if label == "validation":
            row["x vs engine default (geomean / worst)"] = _pair(s.get("vs_default"))
            row["shipped"] = "engine default (deferred)" if s.get("deferred") else "tuned rule"
        rows.append(row)
    return pd.DataFrame(rows)


def _pair(sp) -> str:
    if not sp or sp.get("geomean") is None:
        return "—"
    return f"{sp['geomean']:.3f} / {sp['worst']:.3f}"


def validation_cases(bucket) -> pd.DataFrame:
    """The validation cases: tuned, engine default, shipped, and each baseline (us)."""
    v = bucket.validation or {}
    rows = []
    for r in v.get("case_list") or ():
        row = {"case": r.get("case_id"), "batch_size": r.get("batch_size"),
               "tuned_us": r.get("tuned_us"), "default_us": r.get("default_us"),
               "shipped_us": r.get("chosen_us")}
        for name, us in sorted((r.get("baselines_us") or {}).items()):
            row[f"{name}_us"] = us
        rows.append(row)
    return pd.DataFrame(rows)

"""What a tuning run shows and writes besides tuning.json: the final report and summary.json.

summary.json (the issue's schema, derived from the TuningResult):
  {study, storage, run_id, simulated, device, backend,
   buckets: [{name, min_batch, max_batch, best_params,
              speedup: {<baseline>: {geomean, worst}},   baseline latency / tuned latency
              finalists: [{params, median_us, spread, score_median, ctas, chosen}],
              cases: [{case, batch_size, tuned_us, <baseline>_us..., oracle_us}],
              regret,                                     tuned / oracle geomean (null without --oracle)
              family,                                     "" (the table's rule) or "defer"
              validation: {cases, score_geomean, worst,   held-out cases (studies/validation.py):
                           speedup: {<baseline>: {geomean, worst}},  of what the bucket ships
                           vs_default, tuned_vs_default, deferred, reason, noise, source, how,
                           case_list}}}                    (null when no held-out case fell in it)
speedup > 1 means tuned is faster; `worst` is the smallest speedup over the bucket's cases.
Training numbers (score, worst, speedup) and validation numbers sit side by side per bucket.
"""

from __future__ import annotations

import numpy as np

from kvtune.studies.objective import geomean
from kvtune.studies.result import BucketResult, TuningResult

SUMMARY_FILE = "summary.json"


def speedups(bucket: BucketResult) -> dict[str, dict[str, float]]:
    """{baseline: {"geomean", "worst"}} of baseline latency / tuned latency over the cases
    the baseline ran on."""
    out = {}
    labels = sorted({k for c in bucket.cases for k in c.baselines_us}, key=_label_order(bucket))
    for label in labels:
        ratios = [c.baselines_us[label] / c.tuned_us for c in bucket.cases if label in c.baselines_us]
        if ratios:
            out[label] = {"geomean": geomean(ratios), "worst": float(min(ratios))}
    return out


def _label_order(bucket: BucketResult):
    first = list(bucket.cases[0].baselines_us) if bucket.cases else []
    return lambda label: (first.index(label) if label in first else len(first), label)


def build_summary(result: TuningResult, finalist_extra: dict | None = None) -> dict:
    """summary.json's content. finalist_extra: {bucket name: [(median_us, spread), ...]} in the
    order of each bucket's finalists (the total latency over the cases, which the TuningResult
    does not keep)."""
    finalist_extra = finalist_extra or {}
    buckets = []
    for b in result.buckets:
        extra = finalist_extra.get(b.name, [])
        finalists = []
        for i, f in enumerate(b.finalists):
            median_us, spread = extra[i] if i < len(extra) else (float("nan"), _spread(f))
            finalists.append({"params": f.params.to_dict(), "median_us": median_us, "spread": spread,
                              "score_median": f.score_median, "ctas": f.ctas, "chosen": f.chosen,
                              "family": f.family})
        cases = []
        for c in b.cases:
            entry = {"case": c.case_id, "batch_size": c.batch_size, "tuned_us": c.tuned_us}
            entry.update({f"{k}_us": v for k, v in c.baselines_us.items()})
            entry["oracle_us"] = c.oracle_us
            cases.append(entry)
        buckets.append({
            "name": b.name, "min_batch": b.min_batch, "max_batch": b.max_batch,
            "study_name": b.study_name, "best_params": b.params.to_dict(), "score": b.score,
            "worst": b.worst, "n_trials": b.n_trials, "speedup": speedups(b),
            "finalists": finalists, "cases": cases, "regret": b.regret_geomean,
            "pareto_front": list(b.pareto_front),
            "family": b.family, "max_chunk_tokens": b.max_chunk_tokens, "validation": b.validation,
        })
    prov = result.provenance
    return {"study": result.study, "storage": prov.get("storage"), "run_id": prov.get("run_id"),
            "simulated": result.simulated, "device": result.device.get("name"),
            "backend": result.backend, "kernel": result.kernel, "rule": result.rule,
            "validation": prov.get("validation"), "buckets": buckets}


def _spread(f) -> float:
    return (f.score_p90 - f.score_p10) / f.score_median if f.score_median else float("nan")


def format_report(result: TuningResult, summary: dict) -> str:
    """The table printed at the end of `kvtune tune`: per bucket the tuned params, speedup over
    each baseline (geometric mean and worst case), the finalists' spread, the regret."""
    label = "simulated" if result.simulated else "measured"
    lines = [f"kvtune tune: study {result.study} ({label}, {result.backend}, {result.device.get('name')})"]
    if result.provenance.get("validation"):
        lines.append(f"validation: {result.provenance['validation']}")
    if result.rule != "parametric":
        lines.append(f"split rule: {result.rule} (the backend runs one chunk per batch: only "
                     "min_tokens_per_cta was searched, pieces of exactly that many tokens)")
    for b, s in zip(result.buckets, summary["buckets"]):
        p = b.params
        lines.append("")
        lines.append(f"bucket {b.name} (batch {b.min_batch}..{b.max_batch}, {len(b.cases)} cases, "
                     f"{b.n_trials} trials; study {b.study_name})")
        lines.append(f"  tuned: min_tokens_per_cta={p.min_tokens_per_cta} max_waves={p.max_waves} "
                     f"max_splits={p.max_splits} ctas_per_sm={p.ctas_per_sm} schedule={p.schedule}")
        if b.family:
            extra = f", max_chunk_tokens={b.max_chunk_tokens}" if b.max_chunk_tokens else ""
            if b.piece_cost_tokens is not None:
                extra += f", piece_cost_tokens={b.piece_cost_tokens}"
            if b.family == "defer":  # the knobs are the validated winner's, which does not ship
                extra = ""
            ships = " (the engine's own planner ships)" if b.family == "defer" else ""
            lines.append(f"  family: {b.family}{extra}{ships}")
        lines.append(f"  score (tuned / best baseline): geomean {b.score:.3f}, worst case {b.worst:.3f}")
        lines.append("  speedup of tuned over   geomean    worst")
        for base, sp in s["speedup"].items():
            lines.append(f"    {base:<22} {sp['geomean']:7.3f}x {sp['worst']:7.3f}x")
        lines.append("  finalists (re-measured interleaved; score median [p10..p90], spread, CTAs)")
        for f, fs in zip(b.finalists, s["finalists"]):
            mark = "*" if f.chosen else " "
            fp = f.params
            lines.append(f"   {mark} {fp.min_tokens_per_cta:>5}/{fp.max_waves:>2}w/{fp.max_splits:>3}s/"
                         f"{fp.ctas_per_sm}c/{fp.schedule:<22} {f.score_median:.4f} "
                         f"[{f.score_p10:.4f}..{f.score_p90:.4f}] spread {fs['spread']:.2%} "
                         f"ctas {f.ctas}" + (f" {f.family}" if f.family else ""))
        if b.regret_geomean is not None:
            regrets = [c.tuned_us / c.oracle_us for c in b.cases if c.oracle_us]
            lines.append(f"  regret (tuned / oracle): geomean {b.regret_geomean:.3f}, worst "
                         f"{max(regrets):.3f}")
        lines.extend(_validation_lines(b))
        if b.pareto_front:
            lines.append("  Pareto front (geomean, worst): " + ", ".join(
                f"({e['geomean']:.3f}, {e['worst']:.3f}) #{e['trial']}" for e in b.pareto_front))
    return "\n".join(lines)


def _validation_lines(b: BucketResult) -> list[str]:
    v = b.validation
    if not v:
        return ["  validation: none (no held-out case in this bucket)"]
    where = "training cases (--validate none)" if v.get("source") == "training" else "held-out cases"
    out = [(f"  validation on {v['cases']} {where}: score geomean {v['score_geomean']:.3f}, worst "
            f"{v['worst']:.3f} (training: {b.score:.3f}, {b.worst:.3f})")]
    tv, vs = v.get("tuned_vs_default") or {}, v.get("vs_default") or {}
    if tv:
        out.append(f"  tuned vs the engine default: x{tv['geomean']:.3f} geomean, worst "
                   f"x{tv['worst']:.3f} (noise {v['noise']:.2%})")
    ship = "the engine's own planner (defer)" if v.get("deferred") else "the tuned rule"
    out.append(f"  ships {ship}: {v.get('reason', '')}; vs default x{vs.get('geomean', float('nan')):.3f}")
    runner = v.get("runner_up")
    if runner:
        out.append(f"  runner-up {runner['position']} ships ({runner['label']}): the winner "
                   f"({runner['replaces']}) deferred: {runner['winner_reason']}; {runner['note']}")
    for base, sp in v.get("speedup", {}).items():
        out.append(f"    {base:<22} {sp['geomean']:7.3f}x {sp['worst']:7.3f}x  (validation)")
    return out


def regret_geomean(cases) -> float | None:
    pairs = [(c.tuned_us, c.oracle_us) for c in cases if c.oracle_us]
    if not pairs:
        return None
    return geomean(np.array([t for t, _ in pairs]) / np.array([o for _, o in pairs]))


__all__ = ["SUMMARY_FILE", "build_summary", "format_report", "regret_geomean", "speedups"]

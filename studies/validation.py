"""Held-out validation of a tuned bucket, and the "defer to the engine's own planner" choice.

Cases (chosen before anything is measured, in `split_cases`):
- `--validate SPEC` (repeatable): a suite name (`prod-mix`, `threshold`, ...), `distribution:NAME`
  (that distribution at the training suite's batch sizes, seeds 100 and 101), or `trace:FILE`
  (the `trace` distribution of FILE at the training batch sizes, seeds 100 and 101). These cases
  never reach the search: only the winner, the engine default and the baselines run on them.
- no `--validate`: a deterministic held-out share of the training suite's seeds: the last
  third (at least one) of its distinct seeds when it has two or more, otherwise every training
  case drawn again with seed + 1000 (a fresh draw of the same recipe). The report says which.
- `--validate none`: no validation; the defer choice is then made on the training cases.
Stress share (the robust objective): training also gets, at each of its batch sizes, the two
extremes of the threshold suite (262,144 tokens): its most skewed batch (skew80), which a rule
that splits too little loses on, and the evenly spread one (uniform), which a rule that splits
too much loses on; plus long-tail draws of short contexts (lognormal, median 2,048 tokens,
sigma 1), the chat-like batches a suite of long requests lacks. Unless the training suite is the
threshold suite itself or `--no-stress` is given. Production mixes need not contain any of these,
yet a deployed rule meets them all.

Per bucket, once the finalists have chosen the tuned configuration on training cases, the tuned
rule, the engine default (kernels.parametric.engine_default_policy: FlashInfer's own planner, on
FlashInfer fixed_split_size=None, on the Triton kernel the same plan) and every baseline are
measured on the bucket's validation cases, interleaved over `rounds` rounds (round r starts at
series r, so that none is always measured first). Where the tuned rule launches exactly what the
default launches, both get the pooled samples of the two (pool_identical_launches). The tuned
rule ships only if it beats the default by more than the measured noise in geometric mean and is
never more than REGRESSION_LIMIT slower on any case (plus the noise); otherwise the bucket defers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from kvtune.harness.heuristic_verdict import REGRESSION_LIMIT
from kvtune.studies.objective import geomean

DEFAULT_LABEL = "default"
HOLDOUT_SEED_OFFSET = 1000
VALIDATE_SEEDS = (100, 101)
STRESS_DISTRIBUTIONS = ("skew80", "uniform")
# Long-tail draws of short contexts (median 2,048 tokens, about 2.5% above 15k): a training suite
# of long requests only (prod-mix: 4K..128K) would otherwise never show a rule the many-short-
# requests batches of chat traffic, where splitting a few moderately long requests costs.
STRESS_LONG_TAIL = ("lognormal", (("median_tokens", 2048), ("sigma", 1.0), ("max_kv_len", 131072)))


@dataclass
class CaseSplit:
    """Training and validation cases (Suite Case objects) and how validation was chosen."""

    train: list
    validation: list
    how: str
    stress: list = field(default_factory=list)


def split_cases(suite, validate: tuple, shape, *, stress: bool = True) -> CaseSplit:
    """Choose training and validation cases (see the module docstring). ValueError for a bad spec."""
    from kvtune.workloads.suites import THRESHOLD_TOTAL_TOKENS, Case, get_suite, make_suite

    train = list(suite.cases)
    sizes = sorted({c.batch_size for c in train})
    specs = [s.strip() for s in validate if str(s).strip()]
    if specs == ["none"]:
        validation, how = [], "none (--validate none): the defer choice uses the training cases"
    elif "none" in specs:
        raise ValueError("validate: 'none' cannot be combined with other specs")
    elif specs:
        validation = []
        for spec in specs:
            validation += _spec_cases(spec, sizes, shape, get_suite, make_suite)
        how = "--validate " + " ".join(specs)
    else:
        seeds = sorted({c.seed for c in train})
        if len(seeds) >= 2:
            held = seeds[len(seeds) - max(1, len(seeds) // 3):]
            validation = [c for c in train if c.seed in held]
            train = [c for c in train if c.seed not in held]
            how = (f"held out seeds {', '.join(map(str, held))} of the training suite "
                   f"({len(validation)} cases never searched)")
        else:
            validation = [Case(c.distribution, c.params, c.batch_size, c.shape,
                               c.seed + HOLDOUT_SEED_OFFSET) for c in train]
            how = (f"the training cases drawn again with seed + {HOLDOUT_SEED_OFFSET} (the suite has "
                   "one seed; deterministic distributions repeat their batch)")
    ids = {c.case_id for c in train}
    validation = [c for c in _unique(validation) if c.case_id not in ids]
    extra = []
    if stress and suite.name != "threshold":
        extra = [Case(d, {"total_tokens": THRESHOLD_TOTAL_TOKENS}, b, shape, 0)
                 for d in STRESS_DISTRIBUTIONS for b in sizes]
        extra += [Case(STRESS_LONG_TAIL[0], dict(STRESS_LONG_TAIL[1]), b, shape, 0) for b in sizes]
        extra = [c for c in extra if c.case_id not in ids]
    return CaseSplit(train + extra, validation, how, extra)


def _unique(cases):
    seen, out = set(), []
    for c in cases:
        if c.case_id not in seen:
            seen.add(c.case_id)
            out.append(c)
    return out


def _spec_cases(spec: str, sizes, shape, get_suite, make_suite) -> list:
    kind, sep, rest = spec.partition(":")
    if not sep:
        return list(get_suite(spec, shape=shape).cases)
    batch = ",".join(map(str, sizes))
    if kind == "distribution" and rest:
        return list(make_suite(rest, batch, {}, seeds=VALIDATE_SEEDS, shape=shape).cases)
    if kind == "trace" and rest:
        if not Path(rest).is_file():
            raise ValueError(f"validate: trace file {rest} does not exist")
        return list(make_suite("trace", batch, {"path": rest}, seeds=VALIDATE_SEEDS, shape=shape).cases)
    raise ValueError(f"validate: {spec!r} not allowed; allowed: a suite name, distribution:NAME, "
                     "trace:FILE, or none")


def assign_to_buckets(cases, buckets, size=lambda c: c.batch.batch_size) -> dict:
    """{bucket name: [case]}: each case goes to the bucket holding its batch size, or the nearest
    one (a tie to the smaller batches), as the exported table plans it."""
    out = {b.name: [] for b in buckets}
    for case in cases:
        b = size(case)
        nearest = min(buckets, key=lambda k: (max(k.min_batch - b, 0, b - k.max_batch), k.min_batch))
        out[nearest.name].append(case)
    return out


@dataclass
class ValidationOutcome:
    """One bucket's validation. case_us: {series: {case_id: median us}}; noise: relative p10..p90
    spread over the rounds of the geomean of tuned / default; deferred: the bucket ships the
    engine default."""

    cases: list
    case_us: dict
    noise: float
    deferred: bool
    reason: str
    source: str

    def chosen(self) -> str:
        return DEFAULT_LABEL if self.deferred else "tuned"

    def to_dict(self, baselines: list[str]) -> dict:
        """The `validation` entry of summary.json / tuning.json / the export's evidence."""
        return validation_summary(self.cases, self.case_us, baselines, self.chosen(), self.noise,
                                  self.deferred, self.reason, self.source)


def validation_summary(cases, case_us: dict, baselines: list[str], chosen: str, noise: float,
                       deferred: bool, reason: str, source: str) -> dict:
    rows = []
    for c in cases:
        cid = c.case_id
        base = {k: case_us[k][cid] for k in baselines if cid in case_us.get(k, {})}
        rows.append({"case_id": cid, "batch_size": int(c.batch.batch_size),
                     "tuned_us": case_us["tuned"][cid], "default_us": case_us[DEFAULT_LABEL][cid],
                     "chosen_us": case_us[chosen][cid], "baselines_us": base})
    out = {"source": source, "cases": len(rows), "deferred": deferred, "reason": reason,
           "noise": noise, "case_list": rows}
    if not rows:
        out.update(score_geomean=None, worst=None, speedup={}, vs_default=None, tuned_vs_default=None)
        return out
    best = [min(r["baselines_us"].values()) if r["baselines_us"] else r["default_us"] for r in rows]
    ratios = [r["chosen_us"] / b for r, b in zip(rows, best)]
    out["score_geomean"] = geomean(ratios)
    out["worst"] = max(ratios)
    speedup = {}
    for label in baselines:
        s = [r["baselines_us"][label] / r["chosen_us"] for r in rows if label in r["baselines_us"]]
        if s:
            speedup[label] = {"geomean": geomean(s), "worst": min(s)}
    out["speedup"] = speedup
    vs = [r["default_us"] / r["chosen_us"] for r in rows]
    tv = [r["default_us"] / r["tuned_us"] for r in rows]
    out["vs_default"] = {"geomean": geomean(vs), "worst": min(vs)}
    out["tuned_vs_default"] = {"geomean": geomean(tv), "worst": min(tv)}
    return out


def measure_validation(runner, cases, tuned_policy, baselines, recorder, *, study_name: str,
                       bucket: str, rounds: int, default_policy=None,
                       attempt: int = 0) -> tuple[dict, float]:
    """Measure the tuned rule, the engine default and every baseline on `cases`, interleaved
    over `rounds` rounds (round r starts at series r). Returns ({series: {case_id: median us}},
    noise); where the tuned rule and the default launched the same kernel, both medians are of
    their pooled samples (pool_identical_launches). A series that fails on a case is left out of
    that case (the tuned rule or the default failing is a ValueError). default_policy: the
    engine's own planner (None: kernels.parametric.engine_default_policy(), the decode one; a
    hybrid tune passes hybrid-serial). attempt: which finalist the "tuned" series is, 0 the
    winner and k its k-th runner-up (studies/validation_step.py), stored with every row as
    `validation_attempt` so the rows of each tried finalist stay apart."""
    from kvtune.harness.fidelity import launch_key
    from kvtune.kernels.parametric import engine_default_policy

    default = engine_default_policy() if default_policy is None else default_policy
    series = [("tuned", tuned_policy), (DEFAULT_LABEL, default), *baselines]
    lat = {label: {c.case_id: [] for c in cases} for label, _ in series}
    keys = {label: {c.case_id: set() for c in cases} for label in ("tuned", DEFAULT_LABEL)}
    for r in range(rounds):
        for case in cases:
            # Round r starts at series r (mod n): no series is always measured first after a
            # case's inputs are built (H200, graph replays: an identical launch read 11% slower
            # when it came first in both rounds).
            for i in np.roll(np.arange(len(series)), -r).tolist():
                label, policy = series[i]
                row, _ = runner.measure_one(case, policy, series=label)
                row = {**row, "validation_attempt": int(attempt)}
                recorder.add(row, phase="validation", study=study_name, bucket=bucket,
                             round_index=r, candidate=i)
                if row["status"] == "ok" and row["latency_us"] > 0:
                    lat[label][case.case_id].append(float(row["latency_us"]))
                    if label in keys:
                        keys[label][case.case_id].add(launch_key(row))
                elif label in ("tuned", DEFAULT_LABEL):
                    raise ValueError(f"validation: {label} is {row['status']} on {case.case_id} "
                                     f"({row.get('message', '')})")
    per_round = [geomean([lat["tuned"][c.case_id][r] / lat[DEFAULT_LABEL][c.case_id][r]
                          for c in cases]) for r in range(rounds)] if cases else []
    noise = 0.0
    if len(per_round) > 1:
        med = float(np.median(per_round))
        noise = float((np.percentile(per_round, 90) - np.percentile(per_round, 10)) / med)
    pool_identical_launches(lat, keys)  # after the noise, which identical launches measure too
    median = {label: {cid: float(np.median(v)) for cid, v in per.items() if v}
              for label, per in lat.items()}
    return median, noise


def pool_identical_launches(lat: dict, keys: dict) -> None:
    """Where the tuned rule and the default launched the same kernel on the same pieces in every
    round of a case (harness.fidelity.launch_key), give both the pooled samples of the two: their
    difference there is the GPU's run-to-run noise, not the rule's (H200, 2026-11-26: one such
    launch read 285 us first in its round and 256 us second), and a rule must not be deferred,
    or shipped, on it. lat: {series: {case_id: [us]}}, changed in place; keys: {"tuned" and
    DEFAULT_LABEL: {case_id: set of launch keys}}."""
    for cid, tuned_keys in keys["tuned"].items():
        same = tuned_keys == keys[DEFAULT_LABEL][cid] and len(tuned_keys) == 1
        if same and None not in tuned_keys:
            pooled = lat["tuned"][cid] + lat[DEFAULT_LABEL][cid]
            lat["tuned"][cid] = list(pooled)
            lat[DEFAULT_LABEL][cid] = list(pooled)


def defer_decision(cases, case_us: dict, noise: float) -> tuple[bool, str]:
    """(deferred, why): the tuned rule ships only if its geomean gain over the default exceeds the
    noise and no case is more than REGRESSION_LIMIT (+ noise) slower than the default."""
    if not cases:
        return False, "no validation case in this bucket"
    ratios = [case_us["tuned"][c.case_id] / case_us[DEFAULT_LABEL][c.case_id] for c in cases]
    gain = 1.0 / geomean(ratios)
    worst = max(ratios)
    if gain - 1.0 <= noise:
        return True, (f"tuned is x{gain:.3f} as fast as the default in geomean, not above the noise "
                      f"({noise:.2%})")
    if worst > REGRESSION_LIMIT + noise:
        return True, (f"tuned is {worst:.3f}x the default's latency on one case (allowed "
                      f"{REGRESSION_LIMIT:.2f} + noise {noise:.2%})")
    return False, f"tuned beats the default: x{gain:.3f} geomean, worst case {worst:.3f}x its latency"


__all__ = [
    "DEFAULT_LABEL",
    "REGRESSION_LIMIT",
    "CaseSplit",
    "ValidationOutcome",
    "assign_to_buckets",
    "defer_decision",
    "measure_validation",
    "pool_identical_launches",
    "split_cases",
    "validation_summary",
]

"""Held-out validation of a tuned hybrid bucket against the engine's serial step.

A hybrid bucket's winner (studies/hybrid_tune.py) is chosen on its training cases. Before it
ships it is measured on cases the search never saw, interleaved with `hybrid-serial` (the
engine's own way: the prefill launch, then the decode launch planned by FlashInfer's rule) over
`rounds` rounds, and it ships only where it is faster than serial by more than the measured
noise in geometric mean and never more than REGRESSION_LIMIT (+ noise) slower on any case
(studies/validation.py: defer_decision, the same rule as the split-knob study's), measured on
at least MIN_SHIP_CASES cases (bucket_defer_decision). Otherwise the
bucket defers: the heuristic file lists it under `deferred_buckets`, and every planner of the
file (kvtune's `hybrid-tuned`, the vendored kernels/tuned_planner.plan_hybrid) plans such a
batch as the engine would.

Validation cases (`--validate`, chosen before anything is measured):
- default: the `hybrid-holdout` suite (workloads/hybrid.py: contexts, chunks, decode batches and
  mixes off every tuning suite's grid) and every case of the `hybrid` suite that is not a
  training case (all 104 of them after a `hybrid-quick` tune). Why both: on the H200 (ninth
  session, docs/PERFORMANCE.md, calls 3 and 4) a winner that passed hybrid-holdout alone
  (contexts 6K/12K) was 2-3% slower than serial on sweep cases of the hybrid suite it had not
  seen (64 decodes beside 16K and 20K contexts); `--validate hybrid-holdout` keeps the quick
  check;
- one or more hybrid suite names (hybrid, hybrid-quick, hybrid-holdout); cases that are also
  training cases are dropped;
- `none`: each bucket is checked on its own training cases, re-measured in rounds (the result
  says so: source "training").
A bucket that no validation case falls in is checked on its training cases the same way.
"""

from __future__ import annotations

from kvtune.studies.objective import geomean
from kvtune.studies.validation import DEFAULT_LABEL, defer_decision, measure_validation

DEFAULT_VALIDATION = ("hybrid-holdout", "hybrid")

# The fewest measured cases a hybrid bucket (or half) ships on. Why: on an H200 (twenty-seventh
# session, docs/PERFORMANCE.md) a serial fallback for 1-16 decodes beside up to 1,024 prefill
# tokens passed on its two hybrid-holdout cases (1.009x over serial) and then ran 2.0-2.6%
# slower than serial on three sweep cases it had not seen; a bucket spans every decode count and
# chunk of its range, and two cases cannot show how its rule does across them.
MIN_SHIP_CASES = 4


def bucket_defer_decision(cases, case_us: dict, noise: float) -> tuple[bool, str]:
    """(deferred, why) for a hybrid bucket: studies/validation.py defer_decision, and deferred
    as well where fewer than MIN_SHIP_CASES cases were measured."""
    deferred, reason = defer_decision(cases, case_us, noise)
    if not deferred and len(cases) < MIN_SHIP_CASES:
        return True, (f"only {len(cases)} measured case(s), at least {MIN_SHIP_CASES} to ship "
                      f"({reason})")
    return deferred, reason


def validation_cases(validate: tuple, shape, train_ids) -> tuple[list, str]:
    """(held-out Case objects, how they were chosen) for the specs of `--validate` (empty: the
    default). ValueError naming `validate` for a spec that is not a hybrid suite or `none`."""
    from kvtune.workloads.hybrid import HYBRID_SUITES
    from kvtune.workloads.suites import get_suite

    specs = [str(s).strip() for s in (validate or DEFAULT_VALIDATION) if str(s).strip()]
    if specs == ["none"]:
        return [], "none (--validate none): each bucket is re-checked on its training cases"
    if "none" in specs:
        raise ValueError("validate: 'none' cannot be combined with other specs")
    cases, seen = [], set(train_ids)
    for spec in specs:
        if spec not in HYBRID_SUITES:
            raise ValueError(f"validate: {spec!r} not allowed for a hybrid tune; allowed: "
                             f"{', '.join(HYBRID_SUITES)} or none")
        for c in get_suite(spec, shape=shape).cases:
            if c.case_id not in seen:
                seen.add(c.case_id)
                cases.append(c)
    return cases, f"--validate {' '.join(specs)} ({len(cases)} cases the search never measured)"


def validate_bucket(runner, cases, tuned_policy, serial_policy, recorder, *, study: str,
                    bucket: str, rounds: int, source: str) -> dict:
    """Measure the tuned rule and serial on `cases` (CaseRun objects) over `rounds` interleaved
    rounds and decide. Returns {"deferred", "reason", "source", "noise", "cases": [{"case_id",
    "tuned_us", "serial_us"}], "tuned_vs_serial": {"geomean", "worst"}} where tuned_vs_serial is
    serial us / tuned us (above 1: the tuned rule is faster; worst is the smallest)."""
    case_us, noise = measure_validation(runner, cases, tuned_policy, [], recorder,
                                        study_name=study, bucket=bucket, rounds=rounds,
                                        default_policy=serial_policy)
    deferred, reason = bucket_defer_decision(cases, case_us, noise)
    rows = [{"case_id": c.case_id, "tuned_us": case_us["tuned"][c.case_id],
             "serial_us": case_us[DEFAULT_LABEL][c.case_id]} for c in cases]
    speedups = [r["serial_us"] / r["tuned_us"] for r in rows]
    return {"deferred": bool(deferred), "reason": reason, "source": source, "noise": noise,
            "cases": rows, "tuned_vs_serial": {"geomean": geomean(speedups),
                                               "worst": min(speedups)}}


def bucket_key(entry: dict) -> tuple:
    """(min_decodes, max_decodes, min_prefill_tokens, max_prefill_tokens) of a file's bucket."""
    return (entry["min_decodes"], entry["max_decodes"], entry["min_prefill_tokens"],
            entry["max_prefill_tokens"])


def in_bucket(key: tuple, batch) -> bool:
    """Whether a hybrid batch falls in the (min, max decodes, min, max prefill tokens) bucket."""
    dlo, dhi, plo, phi = key
    return dlo <= batch.num_decodes <= dhi and plo <= batch.prefill_tokens <= phi


def decided_entry(entry: dict, verdict: dict, reason_prefix: str = "") -> dict:
    """A file's bucket after a check: its knobs under `params` where `verdict` ships it, under
    `tuned_params` where it defers (then its `reason` starts with reason_prefix), with the
    verdict as its `validation`. entry: the bucket, its knobs under either key."""
    knobs = entry.get("params", entry.get("tuned_params"))
    out = {k: v for k, v in entry.items()
           if k not in ("params", "tuned_params", "validation", "reason")}
    out["validation"] = verdict
    if verdict["deferred"]:
        out.update(tuned_params=knobs, reason=f"{reason_prefix}{verdict['reason']}")
    else:
        out.update(params=knobs, reason=verdict["reason"])
    return out


# The knobs a serial fallback takes from hybrid-serial (kernels/hybrid_policies.py): its
# prefill launch exactly (128-row tiles, split cap one wave, the default split threshold, and
# its 2 CTAs per SM, which also size the prefill splits), so that only the decode plan differs
# from the baseline.
SERIAL_PREFILL_KNOBS = {"schedule": "serial", "prefill_block_m": 128,
                        "prefill_split_cap_waves": 1, "min_prefill_split_tokens": 1024,
                        "ctas_per_sm": 2, "decode_kernel": None}
# The decode rule of a serial fallback: the makespan family (kernels/tuned_planner.py), which
# keeps the engine's own chunk on a uniform batch (UNIFORM_SPREAD) and elsewhere unless another
# chunk's modelled busiest slot is clearly shorter. Why not the bucket's parametric rule: on an
# H200 (twenty-seventh session, docs/PERFORMANCE.md) those fallbacks won 1.25-2.4x on
# continuous-batching steps (a long decode the engine leaves whole) but cut small uniform
# batches at 4K context differently from the engine (8 decodes in 2 pieces where it takes 4)
# and ran 2-4% slower there. The makespan rule before its uniform clause also lost there (4.5%
# on 48 four-token decodes at 8K: 768 tasks where the engine launches 384); with the clause it
# plans every sweep step (uniform decodes) as the engine and splits only skewed decodes.
SERIAL_FALLBACK_DECODE = {"decode_family": "makespan", "piece_cost_tokens": None}


def serial_fallback_knobs(knobs: dict) -> dict | None:
    """A deferred bucket's knobs as a serial step: hybrid-serial's prefill launch
    (SERIAL_PREFILL_KNOBS) with its decodes under the makespan rule (SERIAL_FALLBACK_DECODE)
    over the bucket's own min_tokens_per_cta and max_splits (at hybrid-serial's 2 CTAs per SM,
    which the rule counts too; the other decode knobs are kept but unused by that rule), or None
    where the knobs already are that. Why: a bucket whose co-location loses to serial on one
    case may still win by its decode split alone (continuous-batching steps, where the engine's
    planner leaves a long decode unsplit: 1.7-2.4x on an H100, docs/PERFORMANCE.md, twentieth
    session)."""
    fallback = {**knobs, **SERIAL_PREFILL_KNOBS, **SERIAL_FALLBACK_DECODE}
    return None if fallback == knobs else fallback


# What a bucket's search found for its own knobs: a fallback that replaces them keeps these
# under `fallback_from` (they describe the co-located knobs, not the serial step shipped).
SEARCH_FIELDS = ("score_vs_serial", "pod_score_vs_serial", "checked", "finalist_rank")


def fallback_entry(entry: dict, fallback: dict, verdict: dict, reason_prefix: str = "") -> dict:
    """A deferred bucket after its serial fallback's check: shipped with the fallback knobs
    where `verdict` passes (the knobs it replaces and their search results under
    `fallback_from`), else the bucket as it was with the fallback's knobs and verdict under
    `serial_fallback`."""
    knobs = entry.get("tuned_params", entry.get("params"))
    if verdict["deferred"]:
        return {**entry, "serial_fallback": {"params": fallback, "validation": verdict}}
    base = {k: v for k, v in entry.items()
            if k not in ("tuned_params", "params", *SEARCH_FIELDS)}
    return {**decided_entry({**base, "params": fallback}, verdict, reason_prefix),
            "fallback_from": {"params": knobs, **{k: entry[k] for k in SEARCH_FIELDS
                                                  if k in entry}}}


def check_serial_fallback(entry: dict, cases, runner, serial_policy, recorder, *, study: str,
                          bucket: str, rounds: int, source: str,
                          reason_prefix: str = "") -> tuple[dict, dict | None]:
    """(the bucket after, the fallback's verdict) for a deferred bucket (knobs under
    `tuned_params`): its serial_fallback_knobs measured on `cases` (CaseRun objects) against
    serial_policy by validate_bucket, decided by fallback_entry. (entry, None) unchanged where
    its knobs already are a serial step or there is no case to measure."""
    from kvtune.kernels import policies

    fallback = serial_fallback_knobs(entry.get("tuned_params") or {})
    if fallback is None or not cases:
        return entry, None
    verdict = validate_bucket(runner, cases, policies.get("hybrid-parametric", **fallback),
                              serial_policy, recorder, study=study,
                              bucket=f"{bucket}/serial-fallback", rounds=rounds, source=source)
    return fallback_entry(entry, fallback, verdict, reason_prefix), verdict


def split_edge(entry: dict) -> int | None:
    """The prefill-token edge a failing bucket is split at: the largest power of two below its
    top (1025-4096 -> 2048, 1-1024 -> 512), where that leaves tokens on both sides; else None.
    Fixed by the bucket's range alone, so the measurements decide the halves, never the edge."""
    lo, hi = entry["min_prefill_tokens"], entry["max_prefill_tokens"]
    if hi < 2:
        return None
    edge = 1 << ((hi - 1).bit_length() - 1)
    return edge if lo <= edge < hi else None


def split_verdicts(entry: dict, verdict: dict, cases) -> list[tuple[dict, dict]]:
    """[(half, its verdict)] for the two halves (by prefill tokens, split_edge) of a bucket whose
    knobs (`params`) failed `verdict` (validate_bucket's): each decided by the same rule
    (studies/validation.py defer_decision, the verdict's noise) on the rows of its own cases
    from the same measurement; a half that none of them falls in defers. Each half carries
    `split_from` (the bucket's prefill-token range). [] where the bucket cannot be split.
    cases: the CaseRun objects the verdict measured. Why split: a bucket can lose on its longest
    chunks only while winning below them; the halves have fewer cases each, so their result is
    worth checking on batches no suite holds before relying on it."""
    edge = split_edge(entry)
    if edge is None:
        return []
    rows = {r["case_id"]: r for r in verdict["cases"]}
    whole = [entry["min_prefill_tokens"], entry["max_prefill_tokens"]]
    out = []
    for lo, hi in ((whole[0], edge), (edge + 1, whole[1])):
        half = {**entry, "min_prefill_tokens": lo, "max_prefill_tokens": hi, "split_from": whole}
        sub = [c for c in cases if in_bucket(bucket_key(half), c.batch)]
        mine = [rows[c.case_id] for c in sub]
        if sub:
            case_us = {"tuned": {r["case_id"]: r["tuned_us"] for r in mine},
                       DEFAULT_LABEL: {r["case_id"]: r["serial_us"] for r in mine}}
            deferred, reason = bucket_defer_decision(sub, case_us, verdict["noise"])
            speedups = [r["serial_us"] / r["tuned_us"] for r in mine]
            spread = {"geomean": geomean(speedups), "worst": min(speedups)}
        else:
            deferred, reason, spread = True, "no measured case falls in this half", None
        out.append((half, {"deferred": deferred, "reason": reason, "source": verdict["source"],
                           "noise": verdict["noise"], "cases": mine, "tuned_vs_serial": spread}))
    return out


def overall_summary(buckets: list, deferred: list, how: str, held_ids: list,
                    unbucketed: list) -> dict:
    """Speed-up over serial of what the heuristic plans on the validation cases (held_ids:
    every one of them). A shipped bucket's case runs the tuned rule (its measured ratio); a case
    of a deferred bucket, or of no tuned bucket (unbucketed), is planned as hybrid-serial, the
    same launch, so its ratio is 1.0 by construction (not measured). `measured` is the same over
    the shipped buckets' cases alone (those among held_ids). Nothing is counted when
    validation was on training cases (--validate none)."""
    measured, held = {}, set(held_ids)
    for b in buckets:
        v = b.get("validation") or {}
        # Measured on cases the bucket's search never saw: a tune's held-out check, or a
        # re-validation of a finished file (studies/hybrid_revalidate.py); only this run's
        # (a bucket kept by --keep-shipped carries an earlier run's rows).
        if v.get("source") in ("validation", "revalidation"):
            measured.update({r["case_id"]: r["serial_us"] / r["tuned_us"] for r in v["cases"]
                             if r["case_id"] in held})
    ratios = {cid: measured.get(cid, 1.0) for cid in held_ids}
    return {"how": how, "cases": len(ratios), "speedup_vs_serial": _spread(ratios),
            "shipped_cases": len(measured), "shipped_speedup_vs_serial": _spread(measured),
            "outside_tuned_buckets": list(unbucketed)}


def _spread(ratios: dict) -> dict:
    """{geomean, worst, worst_case} of {case_id: serial / planned} (None when empty)."""
    if not ratios:
        return {"geomean": None, "worst": None, "worst_case": None}
    worst = min(ratios, key=ratios.get)
    return {"geomean": geomean(ratios.values()), "worst": ratios[worst], "worst_case": worst}


__all__ = ["DEFAULT_VALIDATION", "MIN_SHIP_CASES", "SEARCH_FIELDS", "SERIAL_FALLBACK_DECODE",
           "SERIAL_PREFILL_KNOBS", "bucket_defer_decision", "bucket_key", "check_serial_fallback",
           "decided_entry", "fallback_entry", "in_bucket", "overall_summary",
           "serial_fallback_knobs", "split_edge", "split_verdicts", "validate_bucket",
           "validation_cases"]

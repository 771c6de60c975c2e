"""`kvtune tune --suite hybrid`: search the hybrid knobs per (decode batch, chunk) bucket.

The knobs are those of the `hybrid-parametric` policy (kernels/hybrid_policies.py): schedule,
CTAs per SM, SM policy, prefill split cap, prefill tile, and the decode split knobs. Cases are
grouped into buckets by their number of decodes (DECODE_BUCKETS) and prefill tokens
(CHUNK_BUCKETS); each bucket gets its own Optuna study (TPE, seeded; the co-located schedule
with either decode loop, the serial one with the same decode split, the two-stream one and the
`pod` rule's hybrid knobs are enqueued as the first trials: start_points) whose score is the
geometric mean over the bucket's training cases of latency / latency of `hybrid-serial` (the
engine's own step, measured once per case), so < 1 is better than serial. Every configuration
goes through the runner (verified before timed on a GPU).

The winner of a bucket then faces held-out cases (studies/hybrid_validation.py): it ships only
where it beats serial there beyond the noise and is never more than 2% slower on a case; if it
fails, the next-best distinct setting of the training (up to `finalists`, each faster than
serial in training) is checked the same way; when none passes the bucket defers to the
engine's own planner. A bucket with no setting faster than serial in training defers without
that check.

Output, under <out>/<run-id>/: measurements.parquet (every baseline, trial and validation row)
and `hybrid_heuristic.json` (HYBRID_SCHEMA): `buckets` (shipped: params, training score, the
pod knobs' score, validation), `deferred_buckets` (the same with `tuned_params` and the reason),
and `validation` (the speed-up over serial of what the file plans, over the held-out cases);
`kvtune bench --policies hybrid-tuned:path=<file>` plans with it.

A tune writes `hybrid_heuristic.partial.json` after every bucket it decides (the same document,
with `unfinished_buckets`), so a run stopped part-way keeps its decisions; `--resume` then takes
the decided buckets of the newest earlier file of the same study and shape under <out> (partial
or complete) and searches only the others.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from kvtune.harness.bench import DEFAULT_RESULTS_DIR, BackendSettings
from kvtune.kernels.hybrid_policies import (
    CHUNK_BUCKETS,
    DECODE_BUCKETS,
    HYBRID_SCHEMA,
    bucket_key,
)
from kvtune.kernels.policy_common import check_int
from kvtune.workloads.selection import CaseSettings, resolve_shape, resolve_suite

BASELINE = "hybrid-serial"
# The search space: categorical knobs and their choices (min_tokens_per_cta as powers of two).
SPACE = {
    "schedule": ("serial", "streams", "fused", "sm-aware", "partitioned", "colocated"),
    "ctas_per_sm": (2, 4),
    "sm_policy": ("50:50", "proportional"),
    "prefill_split_cap_waves": (1, 2, 4),
    "prefill_block_m": (64, 128),
    "min_tokens_per_cta": (512, 1024, 2048, 4096, 8192),
    "max_waves": (1, 2, 4),
    "max_splits": (8, 16, 32, 64),
    "decode_schedule": ("static", "static-heavy-first"),
    # Decodes' share of SMs under `partitioned` (0: the proportional rule); unused otherwise.
    "decode_sm_share": (0.0, 0.25, 0.5, 0.75),
    # The decode launch's page-ahead loop (two-launch schedules): 4-12% faster where few decode
    # programs run, 3-5% slower at 128 decodes (eighth session, call 2), so tuned per bucket.
    "decode_ahead": (False, True),
    # Single-token decodes through kernels/decode.py instead of the hybrid kernel's items where
    # both can run (serial, streams, colocated): beside a colocated fp8 prefill 1.14-1.47x
    # faster with 32-128 decodes, 1.12-1.22x slower with 8-16 (thirteenth session, call 2).
    "decode_kernel": (False, True),
}


@dataclass(frozen=True)
class HybridTuneSettings:
    """cases: which hybrid cases (a hybrid suite or `--distribution hybrid`). trials: per
    bucket, 1..10,000 (the 5 start points always run). seed: sampler seed. validate: the
    `--validate` specs (studies/hybrid_validation.py; empty: the hybrid-holdout suite and the
    hybrid suite's cases that are not training cases).
    finalist_rounds: interleaved rounds of the validation, 1..20. finalists: the bucket's best
    training settings (faster than serial) that may face the held-out check in turn, 1..20.
    resume: reuse the buckets an earlier run of this study and shape under `out` decided
    (earlier_decisions). split_failing: a bucket whose every finalist fails its held-out check
    is split once by prefill tokens and each half decided on its own held-out rows of the best
    finalist's check (studies/hybrid_validation.py split_verdicts). serial_fallback: a bucket
    (or half) that still defers is measured once more as a serial step with its own decode
    split knobs and ships that where it passes (check_serial_fallback; a tune's held-out check
    or a re-validation). keep_shipped: --revalidate only (studies/hybrid_revalidate.py)."""

    cases: CaseSettings = field(default_factory=lambda: CaseSettings(suite="hybrid"))
    measure: BackendSettings = field(default_factory=BackendSettings)
    trials: int = 24
    seed: int = 0
    out: str = DEFAULT_RESULTS_DIR
    progress: bool = True
    study: str = "hybrid"
    validate: tuple = ()
    finalist_rounds: int = 3
    finalists: int = 2
    resume: bool = False
    split_failing: bool = False
    serial_fallback: bool = False
    keep_shipped: bool = False

    def __post_init__(self) -> None:
        check_int("trials", self.trials, 1, 10_000)
        check_int("seed", self.seed, 0, 2**32 - 1)
        check_int("finalist_rounds", self.finalist_rounds, 1, 20)
        check_int("finalists", self.finalists, 1, 20)


def geomean(xs) -> float:
    xs = np.asarray(list(xs), dtype=np.float64)
    if xs.size == 0 or not np.all(np.isfinite(xs)) or (xs <= 0).any():
        return math.inf
    return float(np.exp(np.log(xs).mean()))


def pod_start_point(bucket_cases, device) -> dict:
    """The pod rule's choice for the bucket's first case, as hybrid-parametric params."""
    from kvtune.kernels import policies

    b = bucket_cases[0].batch
    plan = policies.get("pod").plan_hybrid(b.q_lens, b.kv_lens, b.shape, device)
    return {"schedule": "sm-aware", "ctas_per_sm": plan.ctas_per_sm, "sm_policy": plan.sm_policy,
            "prefill_split_cap_waves": plan.prefill_split_cap_waves,
            "prefill_block_m": plan.prefill_block_m}


# The co-located schedule with the knobs that won it on the H200 (ninth session, call 1: 4 CTAs
# per SM for the decode split, heavy decodes first), once with each decode loop, so that the
# two differ in nothing else.
COLOCATED_START = {"schedule": "colocated", "prefill_block_m": 64, "ctas_per_sm": 4,
                   "sm_policy": "50:50", "prefill_split_cap_waves": 2, "min_tokens_per_cta": 2048,
                   "max_waves": 2, "max_splits": 32, "decode_schedule": "static-heavy-first",
                   "decode_sm_share": 0.0}


def start_points(bucket_cases, device) -> list[dict]:
    """Trials enqueued before the sampler's own, in this order: the co-located schedule with the
    plain and the page-ahead decode loop (the hybrid kernel's decode items, as colocated runs by
    default), the serial schedule (its decodes through kernels/decode.py, its default) with the
    same decode knobs and the
    128-row prefill tile (the decode split alone: on the H200 it gave the continuous mixes 1.67x
    of their 1.79x, ninth session call 3, without co-location's losses on the sweep), the
    two-stream schedule, and last the pod rule's knobs (its score is reported as
    pod_score_vs_serial). Knobs a start does not set are the sampler's."""
    return [{**COLOCATED_START, "decode_ahead": False, "decode_kernel": False},
            {**COLOCATED_START, "decode_ahead": True, "decode_kernel": False},
            {**COLOCATED_START, "schedule": "serial", "prefill_block_m": 128,
             "decode_ahead": False, "decode_kernel": True},
            {"schedule": "streams", "prefill_block_m": 128},
            pod_start_point(bucket_cases, device)]


def bucket_name(key) -> str:
    """"decodes 17-64, prefill 1025-4096" style label of a bucket key."""
    return f"decodes {key[0]}-{key[1]}, prefill {key[2]}-{key[3]}"


def run_hybrid_tune(settings: HybridTuneSettings, command: str = "") -> dict:
    """Run the search and the held-out check (studies/hybrid_validation.py); returns the
    heuristic document (also written next to the rows)."""
    import optuna

    from kvtune.harness.backends.select import check_choices, open_backend
    from kvtune.harness.runner import CaseRun, Runner
    from kvtune.harness.store import RunWriter
    from kvtune.kernels import policies
    from kvtune.studies.hybrid_validation import overall_summary, validation_cases
    from kvtune.studies.records import RowRecorder, finish_complete, finish_failed

    m = settings.measure
    shape = resolve_shape(settings.cases)
    suite = resolve_suite(settings.cases, shape)
    check_choices(m.backend, m.device_model, m.timer, m.stopping)
    cases = [CaseRun(c.case_id, c.batch()) for c in suite.cases]
    if any(not hasattr(c.batch, "q_lens") for c in cases):
        raise ValueError("suite: kvtune tune with hybrid knobs needs hybrid cases (--suite hybrid "
                         "or --distribution hybrid)")
    held, how = validation_cases(settings.validate, shape, {c.case_id for c in cases})
    held_runs = [CaseRun(c.case_id, c.batch()) for c in held]
    groups: dict[tuple, list] = {}
    for c in cases:
        groups.setdefault(bucket_key(c.batch.num_decodes, c.batch.prefill_tokens), []).append(c)
    # Prefill-only cases have no bucket (DECODE_BUCKETS): the engine's prefill launch runs them.
    prefill_only = groups.pop(None, [])
    held_groups: dict[tuple, list] = {}
    for c in held_runs:
        held_groups.setdefault(bucket_key(c.batch.num_decodes, c.batch.prefill_tokens),
                               []).append(c)
    opened = open_backend(m.backend, device_model_name=m.device_model, timer=m.timer,
                          cold_l2=not m.warm_l2, stopping=m.stopping)
    print(f"kvtune tune (hybrid): {opened.notice}", file=sys.stderr)
    print(f"kvtune tune (hybrid): validation: {how}", file=sys.stderr)
    if prefill_only:
        print(f"kvtune tune (hybrid): {len(prefill_only)} prefill-only training cases are in no "
              "bucket (planned as hybrid-serial) and are not searched", file=sys.stderr)
    manifest = {"kind": "tune-hybrid", "command": command, "study": settings.study,
                "suite": suite.name, "cases": [c.to_dict() for c in suite.cases],
                "validation_cases": [c.to_dict() for c in held], "validation_how": how,
                "backend": opened.backend.name, "device": opened.device.to_dict(),
                "simulated": not opened.device.live, "shape": shape.to_dict(),
                "trials": settings.trials, "seed": settings.seed,
                "finalist_rounds": settings.finalist_rounds, "finalists": settings.finalists,
                "space": SPACE}
    writer = RunWriter.create(settings.out, manifest, kind="tune")
    recorder = RowRecorder(writer.root)
    runner = Runner(opened.backend, opened.device, opened.ceiling_bytes_per_s,
                    run_id=writer.run_id)
    serial_policy = policies.get(BASELINE)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shipped, deferred = [], []
    earlier, resumed_from = (earlier_decisions(settings.out, settings.study, shape,
                                               opened.device.name, opened.backend.name)
                             if settings.resume else ({}, None))
    unbucketed = sorted(c.case_id for k, cs in held_groups.items() if k not in groups
                        for c in cs)

    def document() -> dict:
        return {"schema": HYBRID_SCHEMA, "study": settings.study, "run_id": writer.run_id,
                "backend": opened.backend.name, "device": opened.device.to_dict(),
                "shape": shape.to_dict(), "buckets": shipped, "deferred_buckets": deferred,
                "validation": overall_summary(shipped, deferred, how,
                                              [c.case_id for c in held_runs], unbucketed),
                "decode_buckets": [list(b) for b in DECODE_BUCKETS],
                "chunk_buckets": [list(b) for b in CHUNK_BUCKETS],
                "resumed_from": resumed_from}

    partial = writer.root / "hybrid_heuristic.partial.json"
    try:
        for done, key in enumerate(sorted(groups), start=1):
            if key in earlier:
                entries = earlier[key]
                entry, verdict = entries[0], f"kept from {resumed_from}"
            else:
                entry = _search_bucket(key, groups[key], runner, recorder, serial_policy,
                                       opened.device, settings, optuna)
                verdict = _check_bucket(entry, held_groups.get(key), groups[key], runner,
                                        serial_policy, recorder, settings)
                recorder.flush()
                # --split-failing: the bucket's halves take its place (_check_bucket).
                entries = entry.pop("halves", None) or [entry]
            for e in entries:
                (deferred if "tuned_params" in e else shipped).append(e)
            # A bucket shipped by its serial fallback keeps its search's scores there.
            found = entry.get("fallback_from", entry)
            print(f"bucket {bucket_name(key)}: tuned {found['score_vs_serial']:.3f} x serial, "
                  f"pod {found['pod_score_vs_serial']:.3f} x serial ({len(groups[key])} "
                  f"training cases); {verdict}", file=sys.stderr)
            # What is decided so far, on disk before the next bucket starts: a run stopped from
            # outside (a time limit's SIGTERM runs no `finally`) keeps it for --resume.
            left = [bucket_name(k) for k in sorted(groups)[done:]]
            tmp = partial.with_suffix(".tmp")
            tmp.write_text(json.dumps({**document(), "unfinished_buckets": left}, indent=1,
                                      default=float))
            tmp.replace(partial)  # atomic: a kill mid-write leaves the previous partial whole
    except BaseException as exc:
        finish_failed(writer, recorder, exc)
        raise
    finally:
        opened.backend.close()
    doc = document()
    path = writer.root / "hybrid_heuristic.json"
    path.write_text(json.dumps(doc, indent=1, default=float))
    partial.unlink(missing_ok=True)
    finish_complete(writer, recorder)
    doc["path"] = str(path)
    return doc


def earlier_decisions(out: str, study: str, shape, device_name: str | None = None,
                      backend: str | None = None) -> tuple[dict, str | None]:
    """({bucket key: [its entries]}, the file) of the newest hybrid heuristic under `out` (a
    complete `hybrid_heuristic.json` or a run's `hybrid_heuristic.partial.json`) written by
    `study` for `shape` on the device named `device_name` with `backend` (None: any); ({}, None)
    when there is none. Newest: the largest run id (run ids start with their UTC start time).
    Why the device: a bucket decided on an H100 is no decision for an H200 (their bandwidths
    differ by about 1.4x); a resumed tune that got the other card once mixed both in one file."""
    from pathlib import Path

    found = []
    for f in Path(out).glob("*/hybrid_heuristic*.json"):
        try:
            doc = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # a file being written, or not ours: nothing to resume from
        if (str(doc.get("schema", "")).split("/")[0] == HYBRID_SCHEMA.split("/")[0]
                and doc.get("study") == study and doc.get("shape") == shape.to_dict()
                and device_name in (None, (doc.get("device") or {}).get("name"))
                and backend in (None, doc.get("backend"))):
            found.append((str(doc.get("run_id", "")), f.name == "hybrid_heuristic.json", f, doc))
    if not found:
        return {}, None
    _, _, path, doc = max(found, key=lambda t: t[:2])
    entries: dict[tuple, list] = {}
    for b in doc.get("buckets", []) + doc.get("deferred_buckets", []):
        # A half of a split bucket (--split-failing) stands for the bucket searched.
        lo, hi = b.get("split_from") or (b["min_prefill_tokens"], b["max_prefill_tokens"])
        entries.setdefault((b["min_decodes"], b["max_decodes"], lo, hi), []).append(b)
    return entries, str(path)


def _check_bucket(entry: dict, held_cases, train_cases, runner, serial_policy, recorder,
                  settings) -> str:
    """Ship or defer one searched bucket (studies/hybrid_validation.py), in place. The bucket's
    candidates faster than serial in training face the held-out check in order of their
    training score, at most `settings.finalists` of them; the first that passes ships (its
    params, training score, `finalist_rank` and `validation`); when none does, or none was
    faster in training, the bucket defers: the winner's params move to `tuned_params`, with the
    `reason` and the last `validation`. `checked` lists every candidate tried. A bucket no
    held-out case falls in is checked on its training cases. With settings.split_failing a
    bucket that defers after a held-out check is split (split_verdicts on the best finalist's
    check) and its halves go under entry["halves"] instead. With settings.serial_fallback the
    bucket, or each half, that still defers is measured once more as a serial step whose
    decodes follow the makespan rule over its own decode knobs (serial_fallback_knobs) on its
    held-out cases and ships that where it passes
    (hybrid_validation.check_serial_fallback). Returns the verdict line."""
    from kvtune.kernels import policies
    from kvtune.studies.hybrid_validation import (bucket_key, check_serial_fallback,
                                                  decided_entry, in_bucket, split_verdicts,
                                                  validate_bucket)

    key = (entry["min_decodes"], entry["max_decodes"], entry["min_prefill_tokens"],
           entry["max_prefill_tokens"])
    check, source = (held_cases, "validation") if held_cases else (train_cases, "training")
    faster = [(p, s) for p, s in entry.pop("candidates") if s < 1.0][:settings.finalists]
    entry["validation"], entry["checked"] = None, []
    entry["reason"] = (f"the best setting is x{1 / entry['score_vs_serial']:.3f} as fast as "
                       "serial on its training cases")
    first = None  # (params, verdict) of the best finalist: what --split-failing splits
    for rank, (params, score) in enumerate(faster):
        v = validate_bucket(runner, check, policies.get("hybrid-parametric", **params),
                            serial_policy, recorder, study=settings.study,
                            bucket=bucket_name(key), rounds=settings.finalist_rounds,
                            source=source)
        entry["checked"].append({"params": params, "score_vs_serial": score,
                                 "deferred": v["deferred"], "reason": v["reason"]})
        entry["validation"], entry["reason"] = v, v["reason"]
        first = first or (params, v)
        if not v["deferred"]:
            entry.update(params=params, score_vs_serial=score, finalist_rank=rank)
            t = v["tuned_vs_serial"]
            return (f"ships finalist {rank + 1} of {len(faster)}: x{t['geomean']:.3f} over "
                    f"serial on {len(check)} {source} cases, worst x{t['worst']:.3f}")
    entry["tuned_params"] = entry.pop("params")
    halves = []
    if settings.split_failing and source == "validation" and first is not None:
        halves = [decided_entry(half, v)
                  for half, v in split_verdicts({**entry, "params": first[0]}, first[1], check)]
        for h in halves:
            if "params" in h:  # ships the best finalist's knobs
                h["finalist_rank"] = 0
    if settings.serial_fallback and source == "validation":
        # Each part that still defers, measured once more as a serial step with its own
        # decode split knobs on its own held-out cases (check_serial_fallback).
        for i, part in enumerate(halves or [entry]):
            if "tuned_params" not in part:
                continue
            cases = [c for c in check if in_bucket(bucket_key(part), c.batch)]
            new, _ = check_serial_fallback(part, cases, runner, serial_policy, recorder,
                                           study=settings.study,
                                           bucket=bucket_name(bucket_key(part)),
                                           rounds=settings.finalist_rounds, source=source)
            if halves:
                halves[i] = new
            else:
                entry.clear()
                entry.update(new)

    def said(part: dict) -> str:
        how = "ships its serial fallback" if "fallback_from" in part else (
            "defers" if "tuned_params" in part else "ships")
        return f"{how} ({part['reason']})"
    if halves:
        entry["halves"] = halves
        return "split: " + "; ".join(
            f"prefill tokens {h['min_prefill_tokens']}-{h['max_prefill_tokens']} {said(h)}"
            for h in halves)
    return said(entry) if "fallback_from" in entry else f"defers to serial ({entry['reason']})"


def _search_bucket(key, bucket_cases, runner, recorder, serial_policy, device, settings,
                   optuna) -> dict:
    """One bucket's search on its training cases: serial measured once per case, then the
    start points and the sampler's trials scored as geomean(latency / serial latency)."""
    from kvtune.kernels import policies

    name = bucket_name(key)
    serial = {}
    for c in bucket_cases:
        row, _ = runner.measure_one(c, serial_policy)
        recorder.add(row, phase="baseline", study=settings.study, bucket=name)
        serial[c.case_id] = row["latency_us"] if row["status"] == "ok" else math.nan
    trial_no = [-1]

    def score(params) -> float:
        pol = policies.get("hybrid-parametric", **params)
        ratios = []
        for c in bucket_cases:
            row, _ = runner.measure_one(c, pol)
            recorder.add(row, phase="trial", study=settings.study, bucket=name,
                         trial=trial_no[0])
            if row["status"] != "ok":
                return math.inf
            ratios.append(row["latency_us"] / serial[c.case_id])
        return geomean(ratios)

    starts = start_points(bucket_cases, device)
    sampler = optuna.samplers.TPESampler(seed=settings.seed, multivariate=True)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    for start in starts:
        study.enqueue_trial(dict(start))

    def objective(trial):
        trial_no[0] = trial.number
        params = {k: trial.suggest_categorical(k, list(v)) for k, v in SPACE.items()}
        return score(params)

    # Rows reach the disk after every trial: a run killed mid-bucket keeps what it measured.
    study.optimize(objective, n_trials=max(settings.trials, len(starts)),
                   show_progress_bar=False, callbacks=[recorder.on_trial])
    pod = study.trials[len(starts) - 1]
    ranked = ranked_candidates(study.trials)
    return {"min_decodes": key[0], "max_decodes": key[1], "min_prefill_tokens": key[2],
            "max_prefill_tokens": key[3], "params": ranked[0][0],
            "score_vs_serial": ranked[0][1], "pod_score_vs_serial": pod.value,
            "cases": [c.case_id for c in bucket_cases], "candidates": ranked}


def ranked_candidates(trials) -> list[tuple[dict, float]]:
    """[(params, training score)] of the finished trials, best (lowest) score first, each
    distinct setting once (its best score); params completed with the space's first choices."""
    defaults = {k: v[0] for k, v in SPACE.items()}
    best: dict[str, tuple[dict, float]] = {}
    for t in trials:
        if t.value is None or not math.isfinite(t.value):
            continue
        params = {**defaults, **t.params}
        key = json.dumps(params, sort_keys=True)
        if key not in best or t.value < best[key][1]:
            best[key] = (params, float(t.value))
    ranked = sorted(best.values(), key=lambda pv: pv[1])
    return ranked or [({**defaults, "schedule": "serial"}, math.inf)]


__all__ = ["BASELINE", "SPACE", "HybridTuneSettings", "run_hybrid_tune"]

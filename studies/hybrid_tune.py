"""`kvtune tune --suite hybrid`: search the hybrid knobs per (decode batch, chunk) bucket.

The knobs are those of the `hybrid-parametric` policy (kernels/hybrid_policies.py): schedule,
CTAs per SM, SM policy, prefill split cap, prefill tile, and the decode split knobs. Cases are
grouped into buckets by their number of decodes (DECODE_BUCKETS) and prefill tokens
(CHUNK_BUCKETS); each bucket gets its own Optuna study (TPE, seeded; the `pod` rule's settings
are enqueued as the first trial) whose score is the geometric mean over the bucket's cases of
latency / latency of `hybrid-serial` (the baseline, measured once per case), so < 1 is better
than serial. Every configuration goes through the runner (verified before timed on a GPU).

Output, under <out>/<run-id>/: measurements.parquet (every baseline and trial row) and
`hybrid_heuristic.json` (HYBRID_SCHEMA): per bucket the best params and their score next to the
`pod` rule's; `kvtune bench --policies hybrid-tuned:path=<file>` plans with it.
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
}


@dataclass(frozen=True)
class HybridTuneSettings:
    """cases: which hybrid cases (the `hybrid` suite or `--distribution hybrid`). trials: per
    bucket, 1..10,000. seed: sampler seed."""

    cases: CaseSettings = field(default_factory=lambda: CaseSettings(suite="hybrid"))
    measure: BackendSettings = field(default_factory=BackendSettings)
    trials: int = 24
    seed: int = 0
    out: str = DEFAULT_RESULTS_DIR
    progress: bool = True
    study: str = "hybrid"

    def __post_init__(self) -> None:
        check_int("trials", self.trials, 1, 10_000)
        check_int("seed", self.seed, 0, 2**32 - 1)


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


def run_hybrid_tune(settings: HybridTuneSettings, command: str = "") -> dict:
    """Run the search; returns the heuristic document (also written next to the rows)."""
    import optuna

    from kvtune.harness.backends.select import check_choices, open_backend
    from kvtune.harness.runner import CaseRun, Runner
    from kvtune.harness.store import RunWriter
    from kvtune.kernels import policies

    m = settings.measure
    shape = resolve_shape(settings.cases)
    suite = resolve_suite(settings.cases, shape)
    check_choices(m.backend, m.device_model, m.timer, m.stopping)
    cases = [CaseRun(c.case_id, c.batch()) for c in suite.cases]
    if any(not hasattr(c.batch, "q_lens") for c in cases):
        raise ValueError("suite: kvtune tune with hybrid knobs needs hybrid cases (--suite hybrid "
                         "or --distribution hybrid)")
    groups: dict[tuple, list] = {}
    for c in cases:
        groups.setdefault(bucket_key(c.batch.num_decodes, c.batch.prefill_tokens), []).append(c)
    opened = open_backend(m.backend, device_model_name=m.device_model, timer=m.timer,
                          cold_l2=not m.warm_l2, stopping=m.stopping)
    print(f"kvtune tune (hybrid): {opened.notice}", file=sys.stderr)
    manifest = {"kind": "tune-hybrid", "command": command, "study": settings.study,
                "suite": suite.name, "cases": [c.to_dict() for c in suite.cases],
                "backend": opened.backend.name, "device": opened.device.to_dict(),
                "simulated": not opened.device.live, "shape": shape.to_dict(),
                "trials": settings.trials, "seed": settings.seed, "space": SPACE}
    writer = RunWriter.create(settings.out, manifest, kind="tune")
    rows: list[dict] = []
    runner = Runner(opened.backend, opened.device, opened.ceiling_bytes_per_s,
                    run_id=writer.run_id, on_row=rows.append)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    buckets = []
    try:
        for key in sorted(groups):
            bucket_cases = groups[key]
            serial = {}
            for c in bucket_cases:
                row, _ = runner.measure_one(c, policies.get(BASELINE))
                serial[c.case_id] = row["latency_us"] if row["status"] == "ok" else math.nan

            def score(params) -> float:
                pol = policies.get("hybrid-parametric", **params)
                ratios = []
                for c in bucket_cases:
                    row, _ = runner.measure_one(c, pol)
                    if row["status"] != "ok":
                        return math.inf
                    ratios.append(row["latency_us"] / serial[c.case_id])
                return geomean(ratios)

            start = pod_start_point(bucket_cases, opened.device)
            pod_score = score(start)
            sampler = optuna.samplers.TPESampler(seed=settings.seed, multivariate=True)
            study = optuna.create_study(direction="minimize", sampler=sampler)
            study.enqueue_trial(dict(start))

            def objective(trial):
                params = {k: trial.suggest_categorical(k, list(v)) for k, v in SPACE.items()}
                return score(params)

            study.optimize(objective, n_trials=settings.trials,
                           show_progress_bar=False)
            best = study.best_trial
            defaults = {k: v[0] for k, v in SPACE.items()}
            if best.value < pod_score:
                best_params, best_value = {**defaults, **best.params}, best.value
            else:  # keep the rule when the search found nothing better
                best_params, best_value = {**defaults, **start}, pod_score
            buckets.append({"min_decodes": key[0], "max_decodes": key[1],
                            "min_prefill_tokens": key[2], "max_prefill_tokens": key[3],
                            "params": best_params, "score_vs_serial": best_value,
                            "pod_score_vs_serial": pod_score,
                            "cases": [c.case_id for c in bucket_cases]})
            print(f"bucket decodes {key[0]}-{key[1]} prefill {key[2]}-{key[3]}: tuned "
                  f"{best_value:.3f} x serial, pod {pod_score:.3f} x serial "
                  f"({len(bucket_cases)} cases)", file=sys.stderr)
        writer.write_rows(rows)
    except BaseException as exc:
        if rows:
            writer.write_rows(rows)
        writer.finish("failed", error=" ".join(f"{type(exc).__name__}: {exc}".split()),
                      rows=len(rows))
        raise
    finally:
        opened.backend.close()
    doc = {"schema": HYBRID_SCHEMA, "study": settings.study, "run_id": writer.run_id,
           "backend": opened.backend.name, "device": opened.device.to_dict(),
           "shape": shape.to_dict(), "buckets": buckets,
           "decode_buckets": [list(b) for b in DECODE_BUCKETS],
           "chunk_buckets": [list(b) for b in CHUNK_BUCKETS]}
    path = writer.root / "hybrid_heuristic.json"
    path.write_text(json.dumps(doc, indent=1, default=float))
    writer.finish("complete", rows=len(rows),
                  failed_rows=sum(1 for r in rows if r["status"] != "ok"))
    doc["path"] = str(path)
    return doc


__all__ = ["BASELINE", "SPACE", "HybridTuneSettings", "run_hybrid_tune"]

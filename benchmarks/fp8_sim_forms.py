"""Which form of an fp8 term fits the decode simulator: a share of the bandwidth, a per-CTA cap,
or both? A what-if on GPU rows, fitted on some and judged on others; changes nothing shipped.

    python benchmarks/fit_fp8_sim.py ...           # the shipped one-parameter fit (share only)
    python benchmarks/fp8_sim_forms.py --train-runs RUN [RUN ...] --train-sweep SWEEP/results.json \
        --held-out-runs RUN [RUN ...] --held-out-shapes SHAPES.csv

Form: the shipped `fp8_stream_efficiency` (the share of the streaming bandwidth an fp8 launch
reaches) times a per-CTA cap factor for fp8 shapes (1.0 = the shipped model), applied here by
wrapping harness.sim_model.cta_rate_cap_bytes_per_s, since the model has no such constant.
Fit: a grid (share 0.80..1.00 step 0.02, cap 0.50..1.00 step 0.05) minimising the mean of two
median |log(sim / GPU)|: over the --train-runs rows (tune or bench runs, replayed as `kvtune
fidelity` does) and over the --train-sweep rows that ran the table's entry
(benchmarks/fit_fp8_sim.py). Judged, for the bytes-only model, the shipped value and the fit:
`kvtune fidelity`'s summary on --held-out-runs (ranking and level) and the level on the
--held-out-shapes matrix rows, per shape. Runs whose rows are still in part files (a run
stopped before its merge) must be merged first.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import kvtune.harness.sim_model as sim_model_mod
from kvtune.harness import fidelity
from kvtune.harness.device import sim_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fit_fp8_sim  # noqa: E402

_BASE_CAP = sim_model_mod.cta_rate_cap_bytes_per_s
CAP = {"factor": 1.0}


def _cap(plan, shape, device, constants=sim_model_mod.DEFAULT_CONSTANTS):
    cap = _BASE_CAP(plan, shape, device, constants)
    return cap * CAP["factor"] if shape.kv_is_fp8 else cap


def _load(runs, model):
    rows = fidelity.load_rows(runs)
    return fidelity.replay(rows.for_kernel("triton"), rows.devices, model.device.max_ctas_per_sm)


def _simulate(rep, model, share, cap):
    CAP["factor"] = cap
    constants = replace(model.constants, fp8_stream_efficiency=share)
    out, memo = np.full(len(rep.plans), np.nan), {}
    for i, (plan, shape) in enumerate(zip(rep.plans, rep.shapes)):
        if plan is not None:
            if id(plan) not in memo:  # rows of one case and policy share their plan object
                memo[id(plan)] = sim_model_mod.simulate(plan, shape, model.device, constants).time_us
            out[i] = memo[id(plan)]
    return out


def _median_abs_log(err) -> float:
    err = np.asarray(err, dtype=float)
    return float(np.median(np.abs(err[np.isfinite(err)])))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-runs", nargs="+", required=True)
    p.add_argument("--train-sweep", required=True)
    p.add_argument("--held-out-runs", nargs="+", required=True)
    p.add_argument("--held-out-shapes", required=True)
    p.add_argument("--device-model", default="h200")
    args = p.parse_args(argv)
    model = sim_model(args.device_model, "triton")
    sim_model_mod.cta_rate_cap_bytes_per_s = _cap  # simulate() looks it up at call time
    fit_fp8_sim.simulate = sim_model_mod.simulate
    sweep = fit_fp8_sim.keep_default(fit_fp8_sim.sweep_rows(args.train_sweep, model.device),
                                     "train sweep")
    matrix = fit_fp8_sim.keep_default(fit_fp8_sim.shape_rows(args.held_out_shapes, model.device),
                                      "held-out matrix")
    train, held = _load(args.train_runs, model), _load(args.held_out_runs, model)
    gpu = train.frame["latency_us"].to_numpy(float)
    scores = []
    for share in np.round(np.arange(0.80, 1.0001, 0.02), 3):
        for cap in np.round(np.arange(0.50, 1.0001, 0.05), 3):
            share = min(1.0, float(share))
            runs = _median_abs_log(np.log(_simulate(train, model, share, float(cap)) / gpu))
            CAP["factor"] = float(cap)
            err = fit_fp8_sim.errors(sweep, model.device,
                                     replace(model.constants, fp8_stream_efficiency=share))
            sweep_loss = _median_abs_log(np.log1p(err))
            scores.append((0.5 * runs + 0.5 * sweep_loss, runs, sweep_loss, share, float(cap)))
    scores.sort()
    for s in scores[:5]:
        print("train: combined %.4f  runs %.4f  sweep %.4f  at share %.2f cap %.2f" % s)
    best = scores[0][3:]
    shipped = model.constants.fp8_stream_efficiency
    for name, (share, cap) in (("bytes only", (1.0, 1.0)), (f"shipped ({shipped})", (shipped, 1.0)),
                               ("fit", best)):
        out = held.frame.assign(sim_us=_simulate(held, model, share, cap))
        summary = fidelity.compare(out).summary
        keep = ("cases", "top1_share", "regret_geomean", "regret_worst", "median_abs_error",
                "median_error")
        print(f"{name} (share {share}, cap {cap}): held-out runs:",
              {k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()
               if k in keep})
        CAP["factor"] = cap
        err = fit_fp8_sim.errors(matrix, model.device,
                                 replace(model.constants, fp8_stream_efficiency=share))
        print("   held-out matrix:", fit_fp8_sim.fmt(fit_fp8_sim.summary(err)))
        for label in sorted({fit_fp8_sim.shape_label(r) for r in matrix}):
            idx = [i for i, r in enumerate(matrix) if fit_fp8_sim.shape_label(r) == label]
            print(f"     {label}:", fit_fp8_sim.fmt(fit_fp8_sim.summary(err[idx])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

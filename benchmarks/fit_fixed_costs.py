"""Refit a simulator model's fixed costs (launches, CTA start, the merge's launch) to GPU bench
rows of today's kernel, the bandwidth constants held, and judge the refit on runs it never saw.

    python benchmarks/fit_fixed_costs.py --device-model h200 --kernel triton \
        --train RUN [--train RUN ...] --held-out RUN [--held-out RUN ...] \
        [--names launch_us,merge_launch_us,cta_start_us] [--write FILE] [--json OUT]

Why: a calibration fits every constant once, on the kernel of its day; a later change of fixed
cost alone (the merge launched as stage 1's programmatic dependent, which hides most of its
launch) leaves the bandwidth terms right and the small batches wrong. On the H200's fp8 trace
rows of the twenty-sixth session the shipped model (calibrated 2026-11-26) read batches of 8
requests 49% slow and of 16 18% slow, batches of 32 and more within 0-9% (docs/PERFORMANCE.md).

Rows: `kvtune bench` runs (results/<run>/), replayed as `kvtune fidelity` replays them
(harness.fidelity: the batch, the policy's plan on the run's GPU). Fit: harness.calibration's
fit_constants over `--names` only, starting from and anchored to the model's own values (its
prior), every other constant held. Judge: simulated / GPU - 1 on the training and the held-out
rows, before and after, overall and by batch size, and harness.fidelity's ranking summary (top-1,
regret) of the held-out rows. `--write FILE` writes the model with the refitted constants and the
fit's provenance under `source.fixed_cost_fit` (nothing is written without it).
The simulator's numbers are a model, never a measurement; the GPU times are the rows'.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
from kvtune.harness.calibration import fit_constants
from kvtune.harness.device import sim_model, write_calibration
from kvtune.harness.fidelity import compare, fidelity, load_rows, replay

DEFAULT_NAMES = ("launch_us", "merge_launch_us", "cta_start_us")


def errors(runs: list[str], kernel: str, model, constants) -> pd.DataFrame:
    """The rows of `kernel` in `runs` replayed by harness.fidelity under `constants` (sim_us),
    with err = sim / GPU - 1."""
    rows = load_rows(runs)
    if rows.for_kernel(kernel).empty:
        raise SystemExit(f"runs: no row of kernel {kernel!r} in {runs}")
    _, out = fidelity(rows, kernel, replace(model, constants=constants))
    return out.assign(err=out["sim_us"] / out["latency_us"] - 1)


def run_records(runs: list[str]) -> list[dict]:
    """Each run as its id, GPU, start time and command (from its manifest), not a local path."""
    out = []
    for run_id, manifest in load_rows(runs).manifests.items():
        env = manifest.get("environment") or {}
        out.append({"run_id": run_id, "gpu": env.get("gpu_name") or manifest.get("device"),
                    "started": manifest.get("created_at") or manifest.get("started_at"),
                    "command": manifest.get("command")})
    return out


def summary(frame: pd.DataFrame) -> dict:
    """Median and median absolute error, overall and by batch size; top-1 and regret."""
    by_batch = {int(b): {"median": float(g["err"].median()), "abs": float(g["err"].abs().median()),
                         "rows": int(len(g))}
                for b, g in frame.groupby("batch_size")}
    ranking = compare(frame).summary
    return {"rows": int(len(frame)), "median": float(frame["err"].median()),
            "abs": float(frame["err"].abs().median()), "by_batch": by_batch,
            "top1": ranking.get("top1_share"), "regret_geomean": ranking.get("regret_geomean"),
            "regret_worst": ranking.get("regret_worst")}


def show(label: str, before: dict, after: dict) -> None:
    print(f"{label}: {before['rows']} rows; median error {before['median']:+.1%} -> "
          f"{after['median']:+.1%}, median |error| {before['abs']:.1%} -> {after['abs']:.1%}; "
          f"top-1 {before['top1']} -> {after['top1']}, regret geomean / worst "
          f"{before['regret_geomean']} / {before['regret_worst']} -> "
          f"{after['regret_geomean']} / {after['regret_worst']}")
    for b, v in before["by_batch"].items():
        a = after["by_batch"][b]
        print(f"  B={b:>3}: {v['median']:+.1%} -> {a['median']:+.1%} "
              f"(|error| {v['abs']:.1%} -> {a['abs']:.1%}, {v['rows']} rows)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device-model", default="h200", help="preset or calibration file")
    ap.add_argument("--kernel", default="triton",
                    choices=("triton", "flashinfer-tensor-core", "flashinfer-cuda-core"))
    ap.add_argument("--train", action="append", required=True, help="bench run (repeatable)")
    ap.add_argument("--held-out", action="append", required=True, help="bench run (repeatable)")
    ap.add_argument("--names", default=",".join(DEFAULT_NAMES),
                    help="the constants refitted, comma-separated (default "
                         + ",".join(DEFAULT_NAMES) + ")")
    ap.add_argument("--max-evaluations", type=int, default=60)
    ap.add_argument("--write", help="write the refitted model here (a calibration file)")
    ap.add_argument("--json", help="write the numbers printed here")
    args = ap.parse_args(argv)
    names = [n for n in args.names.split(",") if n]
    model = sim_model(args.device_model, kernel=args.kernel)
    unknown = [n for n in names if not hasattr(model.constants, n)]
    if unknown:
        print(f"fit_fixed_costs: names: {', '.join(unknown)} not constants of the model",
              file=sys.stderr)
        return 2
    train = errors(args.train, args.kernel, model, model.constants)
    rows = load_rows(args.train)
    rep = replay(rows.for_kernel(args.kernel), rows.devices, model.device.max_ctas_per_sm)
    fitted, cost, identified = fit_constants(rep, model.device, rep.frame["latency_us"].to_numpy(),
                                             names, start=model.constants,
                                             max_evaluations=args.max_evaluations)
    print("refitted (the rows identified " + (", ".join(identified) or "none") + "):")
    for n in names:
        print(f"  {n}: {getattr(model.constants, n):.4g} -> {getattr(fitted, n):.4g}")
    out = {"names": names, "identified": identified,
           "before": {n: getattr(model.constants, n) for n in names},
           "after": {n: getattr(fitted, n) for n in names}}
    train_after = errors(args.train, args.kernel, model, fitted)
    held = errors(args.held_out, args.kernel, model, model.constants)
    held_after = errors(args.held_out, args.kernel, model, fitted)
    for label, b, a in (("training", train, train_after), ("held out", held, held_after)):
        sb, sa = summary(b), summary(a)
        show(label, sb, sa)
        out[label] = {"before": sb, "after": sa}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.write:
        source = dict(model.source or {})
        source["fixed_cost_fit"] = {
            "names": names, "before": out["before"], "after": out["after"],
            "train_runs": run_records(args.train), "held_out_runs": run_records(args.held_out),
            "held_out_abs_error": {"before": out["held out"]["before"]["abs"],
                                   "after": out["held out"]["after"]["abs"]},
            "command": "python benchmarks/fit_fixed_costs.py " + " ".join(
                Path(a).name if Path(a).is_dir() else a
                for a in (sys.argv[1:] if argv is None else argv))}
        write_calibration(replace(model, constants=fitted, source=source), args.write)
        print(f"written: {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

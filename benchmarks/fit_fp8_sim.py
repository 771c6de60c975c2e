"""Fit the decode simulator's fp8 term (SimConstants.fp8_stream_efficiency) to fp8 GPU rows of
kvtune's Triton kernel, and judge it on fp8 rows it was not fitted on.

    python benchmarks/fit_fp8_sim.py --train-sweep SWEEP/results.json [--train-shapes S.csv ...]
        --held-out SHAPES.csv [--held-out ...] [--device-model h200] [--json OUT.json]
    python benchmarks/fit_fp8_sim.py --kernel flashinfer-tensor-core --device-model h100
        --train-shapes S.csv --held-out SHAPES.csv      # FlashInfer's fp8 decode, same plans
        [--fit-cta-factor]      # also SimConstants.fp8_cta_rate_factor, on a joint grid
    python benchmarks/fit_fp8_sim.py --rows product --fit-knee --train-shapes S.csv ...
        --held-out SHAPES.csv   # rows of the product's launch; also fp8_head_dim_knee

Order of work (nothing is written into the project; --json writes the numbers printed):
1. Rows. --train-sweep: bench_kernels.py's `shape-configs` section (results.json); --train-shapes
   and --held-out: its `shapes` section (shapes.csv). Kept: fp8_e4m3 KV, status ok, and the
   configuration the kernel runs by default: with --rows table (the default) CONFIG_TABLE's
   entry for the row's key (kernels/decode_config.py), with --rows product the configuration
   the product launches the plan with today (kernels.decode.launch_config on the model's SMs,
   in the row's launch order: an entry or one of its same-bits twins; shapes.csv rows only);
   every other row is dropped, with a count.
2. Replay. Each row's batch and plan are rebuilt as bench_kernels built them (`matrix_batch`,
   `matrix_plan`, 262,144 tokens, seed 0) on the model's device, and checked against the row's
   chunk and task count; a row that does not rebuild stops the script.
3. Fit. fp8_stream_efficiency alone, the model's other constants held (a 16-bit calibration):
   a grid 0.200, 0.205, .. 1.000, minimising the median |log(simulated / GPU)| over the
   training rows; ties go to the largest value (the smaller change to the bytes-only model).
   --fit-knee fits fp8_head_dim_knee (0, 2, .. 128 head_dim columns) with it on a joint grid,
   refined around the best (ties: the smaller knee, then the larger efficiency).
   --inflight-exponents X,Y,..: the fit above at each SimConstants.inflight_exponent listed (the
   per-CTA cap's scaling with KV bytes per token and head), keeping the value whose fit has the
   lowest training loss (ties: the first listed).
4. Judge. Training and held-out errors (simulated / GPU - 1) before (the model as loaded) and
   after (the fitted value): median, median absolute, range, overall and per shape, and per
   row. Held-out rows that repeat a training case (same shape, distribution, batch and plan,
   measured in another call) are marked, and the held-out summary is also given without them.

The simulator's numbers are a model, never a measurement; the GPU times are the rows'.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from kvtune.harness.device import sim_model
from kvtune.harness.sim_model import SimConstants, simulate
from kvtune.kernels.decode_config import CONFIG_TABLE, config_key

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import rebuild_matrix_case  # noqa: E402

FP8 = "fp8_e4m3"
GRID = np.round(np.arange(0.200, 1.0001, 0.005), 3)


def table_config(shape, plan) -> str:
    """The label of CONFIG_TABLE's entry the kernel runs for this shape and plan by default."""
    key = config_key(shape.head_dim, 1, shape.num_kv_heads, plan.ctas_per_sm, shape.group_size)
    return CONFIG_TABLE[key].label()


def product_config(shape, plan, device, launch_order) -> str:
    """The label of the configuration the product launches `plan` with today on `device`
    (kernels.decode.launch_config on its SMs, tasks in launch_order; None: the product's)."""
    import torch
    from kvtune.kernels.decode import launch_config

    return launch_config(plan, shape, torch.float8_e4m3fn, device.sm_count,
                         launch_order or None).label()


def _row(name, variant, dist, batch, plan_name, gpu_us, config, chunk, tasks, device, source,
         launch_order=None):
    """One replayable row; variant: bench_kernels' (shape name, dtype, kv_dtype, page size)."""
    try:
        shape, plan = rebuild_matrix_case(variant, dist, batch, plan_name, device, chunk, tasks)
    except ValueError as exc:
        raise SystemExit(f"{source}: {name} {exc}") from None
    return {"name": name, "case": (variant, dist, int(batch), plan_name),
            "shape": shape, "plan": plan, "gpu_us": float(gpu_us), "config": config,
            "default": config == table_config(shape, plan),
            "product": config == product_config(shape, plan, device, launch_order),
            "launch_order": launch_order or None, "source": source}


def sweep_rows(path: str, device) -> list[dict]:
    """fp8 rows of a results.json `shape-configs` section (one per configuration tried)."""
    data = json.loads(Path(path).read_text())
    out = []
    for r in data.get("shape-configs", {}).get("rows", []):
        # bench_kernels' variant_label: "llama3-8b bf16/fp8_e4m3 p16"
        shape_name, types, page = r["variant"].split()
        dtype, _, kv = types.partition("/")
        if kv != FP8 or r.get("status") != "ok" or not r.get("us"):
            continue
        variant = (shape_name, dtype, kv, int(page[1:]))
        out.append(_row(f"{shape_name} {r['dist']} B={r['batch']} {r['plan']}", variant,
                        r["dist"], r["batch"], r["plan"], r["us"], r["config"], None,
                        r.get("num_tasks"), device, path))
    return out


def shape_rows(path: str, device, kernel: str = "triton") -> list[dict]:
    """fp8 rows of a shapes.csv (the shape matrix: one row per case), with the time of `kernel`
    (triton, or flashinfer-tensor-core: FlashInfer's decode on the same plan, whose rows all
    count as its default configuration)."""
    col = "triton" if kernel == "triton" else "flashinfer"
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["kv_dtype"] != FP8 or r[f"{col}_status"] != "ok" or not r[f"{col}_us"]:
                continue
            row = _row(f"{r['shape']} {r['dist']} B={r['batch']} {r['plan']}",
                       (r["shape"], r["dtype"], r["kv_dtype"], int(r["page_size"])),
                       r["dist"], r["batch"], r["plan"], r[f"{col}_us"],
                       r["triton_config"] if col == "triton" else kernel, r["chunk_tokens"],
                       r["num_tasks"], device, path, r.get("triton_launch_order"))
            if col != "triton":
                row["default"] = row["product"] = True
            out.append(row)
    return out


def keep_default(rows: list[dict], label: str, which: str = "table") -> list[dict]:
    """The rows that ran the table's entry (which "table") or the product's launch ("product")."""
    kept = [r for r in rows if r["default" if which == "table" else "product"]]
    what = "the table's entry" if which == "table" else "the product's configuration"
    print(f"{label}: {len(kept)} rows run {what}; {len(rows) - len(kept)} other "
          "configurations dropped")
    return kept


def errors(rows: list[dict], device, constants: SimConstants) -> np.ndarray:
    """simulated / GPU - 1 per row (each in the launch order it ran in; None: the product's)."""
    return np.array([simulate(r["plan"], r["shape"], device, constants,
                              r.get("launch_order")).time_us / r["gpu_us"] - 1
                     for r in rows])


def loss(err: np.ndarray) -> float:
    return float(np.median(np.abs(np.log1p(err))))


def fit(rows: list[dict], device, start: SimConstants) -> float:
    """fp8_stream_efficiency on GRID minimising loss over `rows` (ties: the largest value)."""
    scores = [(loss(errors(rows, device, replace(start, fp8_stream_efficiency=float(v)))), -v)
              for v in GRID]
    return float(-min(scores)[1])


COARSE_SHARE = np.round(np.arange(0.20, 1.0001, 0.05), 3)
KNEE_GRID = np.arange(0.0, 128.0001, 2.0)


def _fit_share_with(rows: list[dict], device, start: SimConstants, field: str, coarse, refine,
                    tie) -> tuple[float, float]:
    """(fp8_stream_efficiency, `field`) minimising loss over `rows`: the efficiency on
    COARSE_SHARE and the field on `coarse`, then the efficiency on GRID's 0.005 step within 0.05
    of the best and the field on refine(its best); tie(eff, value) orders equal losses."""
    def score(eff, value):
        c = replace(start, fp8_stream_efficiency=float(eff), **{field: float(value)})
        return (loss(errors(rows, device, c)), *tie(eff, value))

    best = min((score(e, v), e, v) for e in COARSE_SHARE for v in coarse)
    eff0, value0 = best[1], best[2]
    effs = [e for e in GRID if abs(e - eff0) <= 0.05 + 1e-9]
    best = min((score(e, v), e, v) for e in effs for v in refine(value0))
    return float(best[1]), float(best[2])


def fit_with_cta_factor(rows: list[dict], device, start: SimConstants) -> tuple[float, float]:
    """(fp8_stream_efficiency, fp8_cta_rate_factor) minimising loss over `rows`: both on a
    0.05 grid from 0.20 to 1.00, then each refined around the best (efficiency on GRID's 0.005
    step, the factor on 0.01, within 0.05 of it); ties go to the larger values (the smaller
    change to the bytes-only model)."""
    return _fit_share_with(
        rows, device, start, "fp8_cta_rate_factor", COARSE_SHARE,
        lambda f0: np.round(np.arange(max(0.2, f0 - 0.05), min(1.0, f0 + 0.05) + 1e-9, 0.01), 3),
        lambda eff, fac: (-eff, -fac))


def fit_with_knee(rows: list[dict], device, start: SimConstants) -> tuple[float, float]:
    """(fp8_stream_efficiency, fp8_head_dim_knee) minimising loss over `rows`: efficiency on a
    0.05 grid from 0.20 to 1.00 and the knee on KNEE_GRID, then the efficiency on GRID's 0.005
    step within 0.05 of the best and the knee within 4 of it on a step of 0.5; ties go to the
    smaller knee, then the larger efficiency."""
    return _fit_share_with(
        rows, device, start, "fp8_head_dim_knee", KNEE_GRID,
        lambda k0: np.arange(max(0.0, k0 - 4), k0 + 4.0001, 0.5),
        lambda eff, knee: (knee, -eff))


def parse_exponents(text: str | None) -> list[float]:
    """--inflight-exponents: comma-separated numbers in -4..4 ([] without the option)."""
    if text is None:
        return []
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not -4 <= value <= 4:
            raise ValueError(f"--inflight-exponents: {part!r} not allowed; allowed: numbers in "
                             "-4..4, comma-separated")
        out.append(value)
    return out


def summary(err: np.ndarray) -> dict:
    if not len(err):
        return {"rows": 0}
    return {"rows": len(err), "median_error": float(np.median(err)),
            "median_abs_error": float(np.median(np.abs(err))),
            "median_abs_log_error": loss(err), "min_error": float(err.min()),
            "max_error": float(err.max())}


def fmt(s: dict) -> str:
    if not s["rows"]:
        return "no rows"
    return (f"{s['rows']:2d} rows  median {s['median_error']:+.1%}  median |err| "
            f"{s['median_abs_error']:.1%}  range {s['min_error']:+.1%} .. {s['max_error']:+.1%}")


def shape_label(r: dict) -> str:
    return r["name"].split()[0]


def report(label: str, rows: list[dict], before: np.ndarray, after: np.ndarray,
           skip: set | None = None) -> dict:
    """Print per-row and per-shape errors before and after; return the summaries."""
    print(f"\n{label}: simulated / GPU - 1 (before -> after)")
    for r, b, a in zip(rows, before, after):
        mark = "  (also a training case)" if skip and r["case"] in skip else ""
        print(f"  {r['name']:<42s} {r['config']:<18s} GPU {r['gpu_us']:7.1f} us  "
              f"{b:+6.1%} -> {a:+6.1%}{mark}")
    out = {"all": {"before": summary(before), "after": summary(after)}, "per_shape": {}}
    print(f"  all      before {fmt(out['all']['before'])}")
    print(f"           after  {fmt(out['all']['after'])}")
    for name in sorted({shape_label(r) for r in rows}):
        m = np.array([shape_label(r) == name for r in rows])
        out["per_shape"][name] = {"before": summary(before[m]), "after": summary(after[m])}
        print(f"  {name:<8s} before {fmt(out['per_shape'][name]['before'])}")
        print(f"  {'':<8s} after  {fmt(out['per_shape'][name]['after'])}")
    if skip:
        m = np.array([r["case"] not in skip for r in rows])
        out["not_training_cases"] = {"before": summary(before[m]), "after": summary(after[m])}
        print(f"  without the training cases: before {fmt(out['not_training_cases']['before'])}")
        print(f"  {'':<26s} after  {fmt(out['not_training_cases']['after'])}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-sweep", action="append", default=[],
                    help="bench_kernels results.json with a shape-configs section (repeatable)")
    ap.add_argument("--train-shapes", action="append", default=[],
                    help="bench_kernels shapes.csv fitted on (repeatable)")
    ap.add_argument("--held-out", action="append", default=[], required=True,
                    help="bench_kernels shapes.csv judged on, never fitted (repeatable)")
    ap.add_argument("--device-model", default="h200",
                    help="preset or calibration file the replay runs on (default h200: the "
                         "shipped Triton calibration)")
    ap.add_argument("--kernel", choices=("triton", "flashinfer-tensor-core"), default="triton",
                    help="whose times to fit: kvtune's Triton kernel (default) or FlashInfer's "
                         "tensor-core decode on the same plans (shapes.csv rows only)")
    ap.add_argument("--fit-cta-factor", action="store_true",
                    help="also fit fp8_cta_rate_factor (the per-CTA cap's share for fp8), with "
                         "fp8_stream_efficiency on a joint grid")
    ap.add_argument("--fit-knee", action="store_true",
                    help="also fit fp8_head_dim_knee (a per-key cost in head_dim columns), with "
                         "fp8_stream_efficiency on a joint grid")
    ap.add_argument("--inflight-exponents", default=None, metavar="X,Y",
                    help="also choose SimConstants.inflight_exponent (the per-CTA cap scales "
                         "with (KV bytes per token and head / 512) ** x) among these values "
                         "(each in -4..4): the fp8 terms are fitted at each, and the value "
                         "whose fit has the lowest training loss is kept (ties: the one "
                         "listed first); default: the model's own, not refitted")
    ap.add_argument("--rows", choices=("table", "product"), default="table",
                    help="keep rows that ran the table's entry (default) or the configuration "
                         "the product launches today (entries and their same-bits twins)")
    ap.add_argument("--json", help="write the fitted value and every summary here")
    args = ap.parse_args(argv)
    if not args.train_sweep and not args.train_shapes:
        ap.error("give --train-sweep or --train-shapes")
    if args.kernel != "triton" and args.train_sweep:
        ap.error("--train-sweep holds Triton configurations only; give --train-shapes")
    if args.fit_knee and args.fit_cta_factor:
        ap.error("--fit-knee and --fit-cta-factor: give one")
    if args.rows == "product" and args.train_sweep:
        ap.error("--rows product: give --train-shapes (a sweep's rows are not the product's)")

    try:
        exponents = parse_exponents(args.inflight_exponents)
    except ValueError as exc:
        ap.error(str(exc))
    model = sim_model(args.device_model, args.kernel)
    device, loaded = model.device, model.constants
    print(f"model: {model.label}; fp8_stream_efficiency as loaded {loaded.fp8_stream_efficiency}")
    train = [r for p in args.train_sweep for r in sweep_rows(p, device)]
    train += [r for p in args.train_shapes for r in shape_rows(p, device, args.kernel)]
    train = keep_default(train, "training", args.rows)
    held = keep_default([r for p in args.held_out for r in shape_rows(p, device, args.kernel)],
                        "held out", args.rows)
    if not train:
        raise SystemExit("training: no fp8 row with the table's configuration")

    # "before" = the bytes-only model
    base = replace(loaded, fp8_stream_efficiency=1.0, fp8_cta_rate_factor=1.0,
                   fp8_head_dim_knee=0.0)
    choices = []
    for exponent in exponents or [loaded.inflight_exponent]:
        at = replace(base, inflight_exponent=exponent)
        knee = 0.0
        if args.fit_cta_factor:
            value, factor = fit_with_cta_factor(train, device, at)
        elif args.fit_knee:
            (value, knee), factor = fit_with_knee(train, device, at), 1.0
        else:
            value, factor = fit(train, device, at), 1.0
        candidate = replace(at, fp8_stream_efficiency=value, fp8_cta_rate_factor=factor,
                            fp8_head_dim_knee=knee)
        choices.append((loss(errors(train, device, candidate)), len(choices), candidate))
        if exponents:
            print(f"inflight_exponent {exponent:g}: training loss {choices[-1][0]:.4f} "
                  f"(efficiency {value:.3f}, knee {knee:.1f}, cta factor {factor:.2f})")
    fitted = min(choices, key=lambda c: c[:2])[2]
    value, factor, knee = (fitted.fp8_stream_efficiency, fitted.fp8_cta_rate_factor,
                           fitted.fp8_head_dim_knee)
    print(f"fitted fp8_stream_efficiency = {value:.3f} (grid {GRID[0]:.3f}..{GRID[-1]:.3f}, "
          f"step 0.005; {len(train)} training rows)"
          + (f", fp8_cta_rate_factor = {factor:.2f}" if args.fit_cta_factor else "")
          + (f", fp8_head_dim_knee = {knee:.1f}" if args.fit_knee else ""))
    result = {"fp8_stream_efficiency": value, "kernel": args.kernel, "device_model": model.label,
              "train_files": args.train_sweep + args.train_shapes, "held_out_files": args.held_out}
    if args.fit_cta_factor:
        result["fp8_cta_rate_factor"] = factor
    if args.fit_knee:
        result["fp8_head_dim_knee"] = knee
    if exponents:
        result["inflight_exponent"] = fitted.inflight_exponent
        print(f"chosen inflight_exponent = {fitted.inflight_exponent:g} (as loaded "
              f"{loaded.inflight_exponent:g}; 16-bit shapes of other KV bytes per token move too)")
    result["rows"] = args.rows
    result["train"] = report("training", train, errors(train, device, base),
                             errors(train, device, fitted))
    train_cases = {r["case"] for r in train}
    result["held_out"] = report("held out", held, errors(held, device, base),
                                errors(held, device, fitted), skip=train_cases)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

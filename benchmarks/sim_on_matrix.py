"""The decode simulator on shape-matrix rows it was not calibrated on: latency error per shape,
for both kernels, and whether it picks the faster plan of each case.

    python benchmarks/sim_on_matrix.py SHAPES.csv [SHAPES.csv ...] --device-model h100
        [--json OUT.json] [--total-tokens 196608] [--triton-launch-order longest-first]

SHAPES.csv: bench_kernels.py's `shapes` section (one row per case: Triton's and FlashInfer's
time with the same plan). Every row with both kernels ok is rebuilt as bench_kernels built it
(`matrix_batch`, `matrix_plan`: --total-tokens, default 262,144, seed 0, on the model's
device; a row whose chunk or task count does not rebuild stops the script) and simulated with
the model of each kernel (`sim_model(device_model, "triton")` and
`sim_model(device_model, "flashinfer-tensor-core")`, the shipped calibrations where there are
some), kvtune's kernel in the launch order the row ran (its triton_launch_order; "plan" where
it records none: rows from before the twenty-ninth session, whose kernel launched every plan in
its own order; --triton-launch-order overrides). Reported:
- latency error, simulated / GPU - 1, per (shape, KV type) and overall, per kernel;
- the FlashInfer / Triton ratio: simulated against measured (the kernel choice);
- plan choice: for every (variant, distribution, batch) measured under both plans, whether the
  simulator's faster plan is the GPU's (within --tie, a relative margin under which either is
  right), and the GPU latency lost where it is not (regret).

The calibrations were fitted on llama3-8b bf16 rows of `kvtune bench` (docs/PERFORMANCE.md); the
matrix's other shapes, KV types and this plan pair were never part of a fit. The simulator's
numbers are a model, never a measurement; the GPU times are the rows'.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from kvtune.harness.device import sim_model
from kvtune.harness.sim_model import simulate
from kvtune.kernels.plan import LAUNCH_ORDERS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import TOTAL_TOKENS, rebuild_matrix_case  # noqa: E402

KERNELS = (("triton", "triton_us"), ("flashinfer-tensor-core", "flashinfer_us"))


def load_rows(paths: list[str], device, total_tokens: int = TOTAL_TOKENS,
              triton_launch_order: str | None = None) -> list[dict]:
    """Rows with both kernels ok, each with its rebuilt shape and plan (matrix batches of
    total_tokens) and the launch order kvtune's kernel ran it in (triton_launch_order, else the
    row's, else "plan")."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r["triton_status"] != "ok" or r["flashinfer_status"] != "ok":
                    continue
                variant = (r["shape"], r["dtype"], r["kv_dtype"], int(r["page_size"]))
                try:
                    shape, plan = rebuild_matrix_case(variant, r["dist"], r["batch"], r["plan"],
                                                      device, r["chunk_tokens"], r["num_tasks"],
                                                      total_tokens)
                except ValueError as exc:
                    raise SystemExit(f"{path}: {r['variant']} {r['dist']} B={r['batch']} "
                                     f"{r['plan']} {exc}") from None
                order = triton_launch_order or r.get("triton_launch_order") or "plan"
                rows.append({"variant": r["variant"], "dist": r["dist"], "batch": int(r["batch"]),
                             "plan_name": r["plan"], "shape": shape, "plan": plan,
                             "launch_order": order,
                             "gpu_us": {k: float(r[col]) for k, col in KERNELS}})
    return rows


def summary(err) -> dict:
    err = np.asarray(err, dtype=float)
    return {"rows": int(err.size), "median_error": float(np.median(err)),
            "median_abs_error": float(np.median(np.abs(err))),
            "min_error": float(err.min()), "max_error": float(err.max())}


def fmt(s: dict) -> str:
    return (f"{s['rows']:3d} rows  median {s['median_error']:+6.1%}  median |err| "
            f"{s['median_abs_error']:5.1%}  range {s['min_error']:+6.1%} .. "
            f"{s['max_error']:+6.1%}")


def plan_choice(rows: list[dict], kernel: str, tie: float) -> dict:
    """Per case measured under several plans: the simulator's pick against the GPU's."""
    cases = defaultdict(list)
    for r in rows:
        cases[(r["variant"], r["dist"], r["batch"])].append(r)
    agree, regret, lines = 0, [], []
    n = 0
    for key, rs in cases.items():
        if len(rs) < 2:
            continue
        n += 1
        gpu = {r["plan_name"]: r["gpu_us"][kernel] for r in rs}
        sim = {r["plan_name"]: r["sim_us"][kernel] for r in rs}
        pick, best = min(sim, key=sim.get), min(gpu, key=gpu.get)
        loss = gpu[pick] / gpu[best] - 1
        ok = loss <= tie
        agree += ok
        regret.append(loss)
        if not ok:
            lines.append(f"  {key[0]} {key[1]} B={key[2]}: sim picks {pick}, GPU's best {best} "
                         f"({loss:+.1%})")
    return {"cases": n, "agree": agree, "median_regret": float(np.median(regret)) if regret
            else 0.0, "max_regret": float(max(regret)) if regret else 0.0, "misses": lines}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="+", help="shapes.csv of bench_kernels --sections shapes")
    ap.add_argument("--device-model", default="h100")
    ap.add_argument("--tie", type=float, default=0.02,
                    help="plan choice: a pick within this relative margin of the best is right")
    ap.add_argument("--json", default=None)
    ap.add_argument("--total-tokens", type=int, default=TOTAL_TOKENS,
                    help="the tokens the rows' batches were built with (bench_kernels.py "
                         "--total-tokens; default %(default)s)")
    ap.add_argument("--triton-launch-order", choices=LAUNCH_ORDERS, default=None,
                    help="the order kvtune's kernel ran every row in (default: each row's "
                         "triton_launch_order, 'plan' where it has none)")
    args = ap.parse_args(argv)
    models = {k: sim_model(args.device_model, k) for k, _ in KERNELS}
    device = models["triton"].device
    rows = load_rows(args.shapes, device, args.total_tokens, args.triton_launch_order)
    if not rows:
        print("sim_on_matrix: error: no row with both kernels ok", file=sys.stderr)
        return 2
    for r in rows:
        r["sim_us"] = {k: simulate(r["plan"], r["shape"], m.device, m.constants,
                                   launch_order=r["launch_order"] if k == "triton" else None
                                   ).time_us
                       for k, m in models.items()}
    out = {"device_model": args.device_model, "rows": len(rows),
           "models": {k: m.label for k, m in models.items()}, "kernels": {}}
    for k, _ in KERNELS:
        print(f"\n{k} ({models[k].label}): simulated / GPU - 1")
        err = [r["sim_us"][k] / r["gpu_us"][k] - 1 for r in rows]
        per = {}
        for name in dict.fromkeys(r["variant"] for r in rows):
            per[name] = summary([e for e, r in zip(err, rows) if r["variant"] == name])
            print(f"  {name:<34s} {fmt(per[name])}")
        out["kernels"][k] = {"all": summary(err), "per_variant": per,
                             "plan_choice": plan_choice(rows, k, args.tie)}
        print(f"  {'all':<34s} {fmt(out['kernels'][k]['all'])}")
        pc = out["kernels"][k]["plan_choice"]
        print(f"  plan choice: {pc['agree']} of {pc['cases']} cases right (tie {args.tie:.0%}); "
              f"regret median {pc['median_regret']:+.1%}, worst {pc['max_regret']:+.1%}")
        for line in pc["misses"]:
            print(line)
    ratio = [(r["sim_us"]["flashinfer-tensor-core"] / r["sim_us"]["triton"])
             / (r["gpu_us"]["flashinfer-tensor-core"] / r["gpu_us"]["triton"]) - 1 for r in rows]
    out["fi_over_triton_ratio_error"] = summary(ratio)
    print(f"\nFlashInfer / Triton, simulated over measured - 1: {fmt(summary(ratio))}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The hybrid simulator's decode launch order against two GPU runs of the same hybrid batches.

CPU only; the simulator's columns are a model, not a measurement. Given the run folders of one
`kvtune bench` of hybrid batches with `--launch-order plan` and one with `--launch-order
longest-first` (benchmarks/gpu_calls/hybrid_launch_order_check.sh writes both), it plans each
batch of POLICY's rows again (harness/fidelity.py replay), simulates it with the decodes of
kernels/decode.py started in either order (harness/sim_hybrid.py decode_start_order) and
prints, per batch, the GPU's ratio longest first / plan order beside the model's, and the
model's error on each run.

  python benchmarks/hybrid_order_model.py --plan-runs DIR... --longest-first-runs DIR...
      [--policy hybrid-serial] [--device-model h200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from kvtune.harness.device import sim_model
from kvtune.harness.fidelity import replay, simulate_replay

ORDERS = ("plan", "longest-first")


def median_rows(dirs: list[str], policy: str) -> pd.DataFrame:
    """One row per case of `policy` (its first row's lengths and shape, the median latency over
    every row of the case in the folders' measurements.parquet), indexed by case_id."""
    frames = [pd.read_parquet(p) for d in dirs for p in Path(d).rglob("measurements.parquet")]
    if not frames:
        raise SystemExit(f"no measurements.parquet under {dirs}")
    rows = pd.concat(frames)
    rows = rows[(rows["policy"] == policy) & (rows["status"] == "ok")]
    first = rows.drop_duplicates("case_id").set_index("case_id")
    first["latency_us"] = rows.groupby("case_id")["latency_us"].median()
    return first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan-runs", nargs="+", required=True)
    ap.add_argument("--longest-first-runs", nargs="+", required=True)
    ap.add_argument("--policy", default="hybrid-serial")
    ap.add_argument("--device-model", default="h200")
    args = ap.parse_args()
    model = sim_model(args.device_model, "triton")
    runs = {"plan": median_rows(args.plan_runs, args.policy),
            "longest-first": median_rows(args.longest_first_runs, args.policy)}
    cases = runs["plan"].index.intersection(runs["longest-first"].index)
    # Each batch planned again on the model's device (harness/fidelity.py replay) and simulated
    # with its decodes in either order (the rows' launch_order column, as simulate_replay reads it).
    frame = runs["plan"].loc[cases].reset_index()
    rep = replay(frame, {run: model.device for run in frame["run_id"].unique()})
    sim = {}
    for order in ORDERS:
        rep.frame["launch_order"] = order
        sim[order] = simulate_replay(rep, model.device, model.constants)
    print("| batch | GPU LF / plan | model LF / plan | model / GPU, plan | model / GPU, LF |")
    print("|---|---|---|---|---|")
    for i, case_id in enumerate(cases):
        gpu = {o: float(runs[o].loc[case_id, "latency_us"]) for o in ORDERS}
        print(f"| {case_id} | {gpu['longest-first'] / gpu['plan']:.3f} | "
              f"{sim['longest-first'][i] / sim['plan'][i]:.3f} | "
              f"{sim['plan'][i] / gpu['plan']:.3f} | "
              f"{sim['longest-first'][i] / gpu['longest-first']:.3f} |")


if __name__ == "__main__":
    main()

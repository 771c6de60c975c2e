"""The hybrid simulator's decode launch order against two GPU runs of the same hybrid batches.

CPU only; the simulator's columns are a model, not a measurement. Given the run folders of one
`kvtune bench` of hybrid batches with `--launch-order plan` and one with `--launch-order
longest-first` (benchmarks/gpu_calls/hybrid_launch_order_check.sh writes both), it plans each
batch again with POLICY, simulates it with the decodes of kernels/decode.py started in either
order (harness/sim_hybrid.py decode_start_order) and prints, per batch, the GPU's ratio
longest first / plan order beside the model's, and the model's error on each run.

  python benchmarks/hybrid_order_model.py --plan-runs DIR... --longest-first-runs DIR...
      [--policy hybrid-serial] [--device-model h200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from kvtune.harness.device import sim_model
from kvtune.harness.sim_hybrid import simulate_hybrid
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape

ORDERS = ("plan", "longest-first")


def median_rows(dirs: list[str], policy: str) -> pd.DataFrame:
    """One row per case of `policy` (its first row's lengths and shape, the median latency over
    every row of the case in the folders' measurements.parquet)."""
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
    policy = policies.get(args.policy)
    print("| batch | GPU LF / plan | model LF / plan | model / GPU, plan | model / GPU, LF |")
    print("|---|---|---|---|---|")
    for case_id in runs["plan"].index.intersection(runs["longest-first"].index):
        row = runs["plan"].loc[case_id]
        shape = AttentionShape(num_qo_heads=int(row["num_qo_heads"]),
                               num_kv_heads=int(row["num_kv_heads"]),
                               head_dim=int(row["head_dim"]), page_size=int(row["page_size"]),
                               dtype=row["dtype"], kv_dtype=row["kv_dtype"])
        plan = policy.plan_hybrid(np.asarray(row["q_lens"]), np.asarray(row["kv_lens"]), shape,
                                  model.device)
        sim = {o: simulate_hybrid(plan, shape, model.device, model.constants,
                                  decode_launch_order=o).time_us for o in ORDERS}
        gpu = {o: float(runs[o].loc[case_id, "latency_us"]) for o in ORDERS}
        print(f"| {case_id} | {gpu['longest-first'] / gpu['plan']:.3f} | "
              f"{sim['longest-first'] / sim['plan']:.3f} | {sim['plan'] / gpu['plan']:.3f} | "
              f"{sim['longest-first'] / gpu['longest-first']:.3f} |")


if __name__ == "__main__":
    main()

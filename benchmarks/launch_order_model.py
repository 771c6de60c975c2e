"""What the simulator predicts for stage 1's launch order on the shape matrix's skewed plans.

CPU only; a model, not a measurement. For each case (bench_kernels.py's fixed-split plans at
262,144 tokens) the calibrated simulator (harness/sim_model.py, default the shipped H200 Triton
model) runs the plan with its tasks in the plan's launch order (kernels/decode.py MODE 0: the
items of KV head 0, then head 1, ...) and "longest-first" (MODE 3: every KV head of the longest
item first), and prints both stage-1 times. It was written to choose what the GPU should time
(benchmarks/gpu_calls/launch_order_check.sh), not to replace that.

  python benchmarks/launch_order_model.py [--device-model PATH_OR_NAME]
"""

from __future__ import annotations

import argparse
import os
import sys

from kvtune.harness.device import device_model, is_calibration_path, load_calibration
from kvtune.harness.sim_model import simulate
from kvtune.workloads.shapes import get_shape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kernels  # noqa: E402  - the matrix's plans

DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness",
                             "calibrations", "h200-triton.json")
TOTAL_TOKENS = 262_144
# (shape, distribution, batch, chunk: tokens or "balanced" for the matrix's balanced-2x)
CASES = (("llama3-8b", "skew80", 64, "balanced"), ("llama3-8b", "uniform", 64, "balanced"),
         ("llama3-8b", "skew80", 8, "balanced"), ("llama3-8b", "skew80", 256, "balanced"),
         ("yi-6b", "skew80", 64, "2048"), ("g16", "skew80", 64, "2048"),
         ("hd256", "skew80", 64, "balanced"), ("mha-32", "skew80", 8, "balanced"),
         ("llama3-70b-tp8", "skew80", 64, "2048"))


def case_rows(model_name: str = DEFAULT_MODEL) -> list[dict]:
    """One row per case: the plan's programs and the simulated stage-1 time in each order."""
    if is_calibration_path(model_name):
        model = load_calibration(model_name)
        device, constants = model.device, model.constants
    else:
        device, constants = device_model(model_name), None
    rows = []
    for name, dist, batch, chunk in CASES:
        shape = get_shape(name)
        kv = bench_kernels.matrix_kv_lens(dist, batch, TOTAL_TOKENS)
        plan = bench_kernels.fixed_split_plan(kv, shape, device, chunk)[0]
        kw = {} if constants is None else {"constants": constants}
        times = {order: simulate(plan, shape, device, launch_order=order, **kw).stage1_us
                 for order in ("plan", "longest-first")}
        rows.append({"case": f"{name} {dist} B={batch} {chunk}", "programs": plan.num_tasks,
                     **times})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device-model", default=DEFAULT_MODEL,
                    help="a calibration file (default: the shipped H200 Triton model) or a "
                         "device model name")
    args = ap.parse_args(argv)
    try:
        rows = case_rows(args.device_model)
    except ValueError as exc:
        print(f"launch_order_model: error: {exc}", file=sys.stderr)
        return 2
    print("stage 1, simulated us (a model, not a measurement)")
    for r in rows:
        print(f"{r['case']:34s} {r['programs']:5d} programs: plan {r['plan']:8.1f}  "
              f"longest-first {r['longest-first']:8.1f}  ({r['plan'] / r['longest-first']:.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

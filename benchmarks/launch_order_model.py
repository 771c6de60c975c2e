"""A model of how a one-program-per-task decode launch shares the GPU, for stage 1's launch order.

CPU only; not a measurement. Programs enter the slots (SMs x programs per SM) in launch order:
the first wave round-robin over the SMs, then each into the slot its SM's finished program left.
All active programs share the device's bandwidth evenly, but one program streams at most
`program_cap` of an SM's even share (its bytes in flight bound it). The efficiency printed is the
launch's keys over (SMs x its end time): 1.0 is every SM busy at its share to the end.

It compares the plan's launch order (kernels/decode.py MODE 0: the plan's items for KV head 0,
then head 1, ...) with "longest-first" (MODE 3: every KV head of the longest item first) on the
shape matrix's plans (bench_kernels.py's fixed-split plans at 262,144 tokens), at the programs
per SM of the table entry and of the configuration the product launches
(decode_config.RESIDENT_PER_SM). It was written to choose what the GPU should time
(benchmarks/gpu_calls/launch_order_check.sh), not to replace that.

  python benchmarks/launch_order_model.py [--sms 132] [--caps 0.5,1.0]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from kvtune.kernels.decode import launch_config
from kvtune.kernels.decode_config import RESIDENT_PER_SM, default_config
from kvtune.kernels.plan import DeviceSpec, KV_DTYPE_BYTES
from kvtune.workloads.distributions import fixed_total_kv_lens
from kvtune.workloads.shapes import get_shape

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench_kernels  # noqa: E402  - the matrix's plans

CASES = (("llama3-8b", "skew80", 64, "balanced"), ("llama3-8b", "uniform", 64, "balanced"),
         ("llama3-8b", "skew80", 8, "balanced"), ("llama3-8b", "skew80", 256, "balanced"),
         ("yi-6b", "skew80", 64, "2048"), ("g16", "skew80", 64, "2048"),
         ("hd256", "skew80", 64, "balanced"), ("mha-32", "skew80", 8, "balanced"),
         ("llama3-70b-tp8", "skew80", 64, "2048"))


def launch_keys(item_keys: np.ndarray, num_kv_heads: int, order: str) -> np.ndarray:
    """Keys per program in launch order: "plan" (items of head 0, then head 1, ...) or
    "longest-first" (each item's KV heads together, longest item first, ties in plan order)."""
    if order == "plan":
        return np.tile(item_keys, num_kv_heads)
    return np.repeat(item_keys[np.argsort(-item_keys, kind="stable")], num_kv_heads)


def efficiency(keys: np.ndarray, sms: int, per_sm: int, program_cap: float) -> float:
    """Keys over (sms x end time) of the launch under the sharing model (module docstring); the
    device streams `sms` keys per time unit when every program gets its share."""
    remaining = keys.astype(float).copy()
    slots = [[] for _ in range(sms)]
    nxt = 0
    for _ in range(per_sm):
        for s in range(sms):
            if nxt < len(keys):
                slots[s].append(nxt)
                nxt += 1
    t = 0.0
    while any(slots):
        active = [p for sl in slots for p in sl]
        rate = min(program_cap, sms / len(active))
        step = min(remaining[active]) / rate
        t += step
        remaining[active] -= step * rate
        for sl in slots:
            done = [p for p in sl if remaining[p] <= 1e-9]
            for p in done:
                sl.remove(p)
                if nxt < len(keys):
                    sl.append(nxt)
                    nxt += 1
    return float(keys.sum()) / (sms * t)


def case_rows(sms: int, caps) -> list[dict]:
    device = DeviceSpec("model", sms, 60 << 20, 4.25e12, live=True)
    rows = []
    for name, dist, batch, chunk in CASES:
        shape = get_shape(name)
        kv = fixed_total_kv_lens(batch, 262144, () if dist == "uniform" else (80,))
        tokens = (bench_kernels.balanced_chunk_tokens(kv, shape, sms) if chunk == "balanced"
                  else int(chunk))
        plan = bench_kernels.policy_plan("fixed-split", kv, shape, device, chunk_tokens=tokens)
        item_keys = np.asarray(plan.work_kv_end - plan.work_kv_start)
        nbytes = KV_DTYPE_BYTES[shape.kv_dtype]
        configs = {"entry": default_config(shape.head_dim, torch.bfloat16, shape.page_size,
                                           plan.ctas_per_sm, num_kv_heads=shape.num_kv_heads,
                                           group_size=shape.group_size),
                   "product": launch_config(plan, shape, torch.bfloat16, sms)}
        for which, config in configs.items():
            per_sm = RESIDENT_PER_SM.get((shape.head_dim, nbytes, config))
            if per_sm is None:
                continue
            for cap in caps:
                row = {"case": f"{name} {dist} B={batch} {chunk}", "config": which,
                       "label": config.label(), "per_sm": per_sm, "cap": cap}
                for order in ("plan", "longest-first"):
                    row[order] = efficiency(launch_keys(item_keys, plan.num_kv_heads, order),
                                            sms, per_sm, cap)
                rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--caps", default="0.5,1.0")
    args = ap.parse_args(argv)
    for r in case_rows(args.sms, [float(c) for c in args.caps.split(",")]):
        print(f"{r['case']:34s} {r['config']:7s} {r['label']:16s} {r['per_sm']}/SM "
              f"cap {r['cap']:.2f}: plan {r['plan']:.3f}  longest-first {r['longest-first']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

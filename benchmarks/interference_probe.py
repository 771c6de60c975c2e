"""Does a decode's time drift while it is timed again and again? And does the interference guard
(harness/interference.py) keep such drift out of the numbers?

Not a test: it needs a CUDA GPU. One case (named shape, uniform batch, fixed-split plan) and a
few stage-1 configurations are checked against the float64 reference, then timed every
--period-s seconds for --duration-s seconds from process start, each round three ways: the
guard's latency probe (hops per second, one dependent-load chain per SM), the 30-pair event loop of bench_kernels without the
guard (`raw_us`) with the SM / memory clocks and clock-event reasons NVML reads right after
it, the same loop after 50 ms of back-to-back guard probes keep the GPU busy (`busy_first_us`), and
the loop under the guard (`guarded_us`, with its retries and quiet ratio). One JSON line per
round and configuration.

    PYTHONPATH=/tmp/site python3 benchmarks/interference_probe.py --shape llama3-70b-tp8 \
        --batch 64 --chunk 2048 --configs bn128-w8-s3-pa,bn64-w4-s4-pa --duration-s 150
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

T0 = time.time()

from kvtune.harness.interference import guard_for  # noqa: E402
from kvtune.kernels.decode import prepare_decode, run_decode  # noqa: E402
from kvtune.kernels.decode_config import KernelConfig  # noqa: E402
from kvtune.kernels.paged import PagedKVCache, make_queries  # noqa: E402
from kvtune.kernels.reference import decode_reference  # noqa: E402
from kvtune.workloads.distributions import fixed_total_kv_lens  # noqa: E402
from kvtune.workloads.shapes import get_shape  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench_kernels as bk  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama3-70b-tp8")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=2048)
    ap.add_argument("--configs", default="bn128-w8-s3-pa")
    ap.add_argument("--duration-s", type=float, default=120.0)
    ap.add_argument("--period-s", type=float, default=4.0)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("interference_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    from kvtune.harness.telemetry import NvmlReader

    timer = bk.Timer(30)
    guard = guard_for()
    reader = NvmlReader(0)
    shape = get_shape(args.shape)
    kv = fixed_total_kv_lens(args.batch, bk.TOTAL_TOKENS, ())
    plan = bk.policy_plan("fixed-split", kv, shape, bk.device_spec(), chunk_tokens=args.chunk)
    cache = PagedKVCache.from_lengths(kv, shape, device="cuda", seed=0)
    q = make_queries(args.batch, shape, device="cuda", seed=0)
    ref = decode_reference(q, cache)
    out = torch.empty_like(q)
    launches = {}
    for label in args.configs.split(","):
        launch = prepare_decode(plan, cache, config=KernelConfig.from_label(label))
        err, ok = bk.checked_run(launch, q, cache, ref, q.dtype)
        if not ok:
            print(json.dumps({"config": label, "ok": False, "rel_error": err}))
            return 1
        launches[label] = launch
    while time.time() - T0 < args.duration_s:
        for label, launch in launches.items():
            def run(launch=launch):
                run_decode(launch, q, cache, out=out)
            copy = guard.probe()
            raw = timer.once(run)
            sample = reader.read()
            busy_until = time.time() + 0.05
            while time.time() < busy_until:
                guard.probe()
            busy = timer.once(run)
            guarded = timer(run)
            print(json.dumps({
                "t_s": round(time.time() - T0, 1), "config": label,
                "probe_hops_per_s": copy, "raw_us": round(raw["median_us"], 1),
                "sm_clock_mhz": getattr(sample, "sm_clock_mhz", None),
                "mem_clock_mhz": getattr(sample, "mem_clock_mhz", None),
                "clock_events": list(sample.clock_event_reasons) if sample else None,
                "busy_first_us": round(busy["median_us"], 1),
                "guarded_us": round(guarded["median_us"], 1),
                "retries": guarded["interference_retries"],
                "quiet_ratio": round(guarded["quiet_ratio"], 3), "quiet": guarded["quiet"],
                "gpu": torch.cuda.get_device_name(0)}), flush=True)
        time.sleep(args.period_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())

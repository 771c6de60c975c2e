"""Probe: do the matrix timer's event pairs measure the host's launch time on short decodes?

bench_kernels.Timer enqueues, per iteration, the L2 flush, a start event, the decode's launches
(stage 1 and the merge: two Triton launches from Python) and an end event, and synchronises
after the last. If the host needs longer to enqueue one iteration than the GPU needs to run it
(flush + decode), the GPU waits between the start event and the launches, and the pair
measures the host. llama3-70b-tp8 decodes take 50-70 us (the shortest of the matrix) and have
read 1.3-4x slow in many calls, while a one-launch read of the same pages in the same process
did not (docs/PERFORMANCE.md, twenty-second session).

Per case, alternated over --rounds rounds, decode.py's launch (checked against the float64
reference first) timed by:
- `matrix`: bench_kernels.Timer as the matrix uses it;
- `lead-in`: the same loop after a torch.cuda._sleep long enough for the host to enqueue every
  iteration before the GPU reaches the first;
- `graph`: the launches captured once in a CUDA graph, events around each replay;
and the host's own time to enqueue one iteration (flush + launches, no synchronisation), median
over the reps.

    python3 benchmarks/host_gap_probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import (Timer, checked_decode, event_stats, matrix_case,  # noqa: E402
                           probe_start, write_probe_rows)

from kvtune.kernels.decode import run_decode  # noqa: E402

# About 10 ms at 2 GHz: longer than the host needs to enqueue 30 iterations of any case here.
LEAD_IN_CYCLES = 20_000_000


def events_loop(timer: Timer, fn, lead_in: bool) -> dict:
    """Timer.once's loop, optionally behind a long GPU sleep; also the host's enqueue time."""
    for _ in range(timer.warmup):
        fn()
    torch.cuda.synchronize()
    n = timer.reps
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    host = []
    if lead_in:
        torch.cuda._sleep(LEAD_IN_CYCLES)
    for i in range(n):
        t0 = time.perf_counter()
        timer.flusher.flush()
        starts[i].record()
        fn()
        ends[i].record()
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return {**event_stats(starts, ends), "host_us": float(np.median(host))}


def graph_loop(timer: Timer, fn) -> dict:
    """fn's launches captured in a CUDA graph; events around each replay, L2 flushed before."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    n = timer.reps
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda._sleep(LEAD_IN_CYCLES)
    for i in range(n):
        timer.flusher.flush()
        starts[i].record()
        g.replay()
        ends[i].record()
    torch.cuda.synchronize()
    return event_stats(starts, ends)


CASES = (
    (("llama3-70b-tp8", "bf16", "bf16", 16), "uniform", 8, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "skew80", 256, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "skew80", 64, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "uniform", 256, "fixed-2048"),
    (("llama3-70b-tp8", "bf16", "fp8_e4m3", 16), "uniform", 8, "balanced-2x"),
    (("llama3-8b", "bf16", "bf16", 16), "uniform", 64, "balanced-2x"),
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "host_gap_out"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    timer, cp, spec = probe_start(args.reps)
    rows = []
    for variant, dist, batch, plan_name in CASES:
        shape, kv_lens, plan, _ = matrix_case(variant, dist, batch, plan_name, spec)
        cache, q, launch, out, err, ok = checked_decode(plan, kv_lens, shape)
        case = f"{variant[0]} {variant[2]} {dist} B={batch} {plan_name} ({plan.num_tasks} tasks)"
        if not ok:
            print(f"{case}: not ok ({err:.2e})", flush=True)
            continue

        def fn(launch=launch, q=q, cache=cache, out=out):
            run_decode(launch, q, cache, out=out)
        for rnd in range(args.rounds):
            r = {"case": case, "round": rnd, "rel_error": err,
                 "matrix": timer(fn), "lead_in": events_loop(timer, fn, True),
                 "no_lead_in": events_loop(timer, fn, False), "graph": graph_loop(timer, fn)}
            rows.append(r)
            print(f"{case:62s} r{rnd} matrix {r['matrix']['median_us']:6.1f} "
                  f"(p90 {r['matrix']['p90_us']:6.1f})  no-lead-in "
                  f"{r['no_lead_in']['median_us']:6.1f} host {r['no_lead_in']['host_us']:5.1f}  "
                  f"lead-in {r['lead_in']['median_us']:6.1f} (p90 {r['lead_in']['p90_us']:6.1f}) "
                  f"host {r['lead_in']['host_us']:5.1f}  graph {r['graph']['median_us']:6.1f}",
                  flush=True)
        write_probe_rows(os.path.join(args.out, "host_gap_probe.json"), cp, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

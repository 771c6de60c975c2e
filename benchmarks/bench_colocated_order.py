"""GPU benchmark: the colocated hybrid step launched in order (one stream, programmatic dependent
launch) against the same step on two streams, where the launch order is a race.

The colocated schedule holds one persistent prefill program per SM and lets the decode grid fill
the rest; on two streams the decode grid sometimes reaches the SMs first, and the step is then
much slower (the eighth to tenth sessions saw 248 against 436 us for one batch, within one
measurement and across calls). HybridConfig.ordered_launch launches the decode grid as the
programmatic dependent of the prefill grid, so it starts only once every prefill program is
resident. Per case of the `hybrid` suite (the paper's sweep first), in one process and
interleaved over --rounds rounds:
  serial        kvtune's serial step (the baseline);
  two-streams   `hybrid-colocated` as it runs by default: two streams;
  ordered       the same with HybridConfig.ordered_launch on where the GPU has programmatic
                dependent launch (opt-in; the two-stream path elsewhere);
  heuristic     `hybrid-tuned` with --heuristic (optional), as it runs by default.
Every variant is checked against the float64 reference before it is timed. Timer: bench_hybrid.py's
CUDA-event pairs, L2 flushed before each, median of --reps per round; the spread across rounds
(max / min of the round medians) and p90 / p10 within them show a bimodal step.

  PYTHONPATH=/tmp/site python3 benchmarks/bench_colocated_order.py --max-cases 36 --out $OUT
  python benchmarks/bench_colocated_order.py --dry-run --out /tmp/co    # CPU, interpreter
Writes results.json and results.md to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import math
import os
import sys
import time
import traceback

if "--dry-run" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from bench_hybrid import (BatchData, EventTimer, WallTimer, check_launch,  # noqa: E402
                          copy_bandwidth, dry_cases, geomean, time_launch)
from kvtune.kernels import policies  # noqa: E402
from kvtune.kernels.hybrid import has_programmatic_launch, prepare_hybrid  # noqa: E402
from kvtune.kernels.plan import AttentionShape, DeviceSpec  # noqa: E402

VARIANTS = ("serial", "two-streams", "ordered", "heuristic")


def launches(data: BatchData, spec, heuristic: str | None) -> dict:
    """The HybridLaunch of every variant for one batch."""
    b = data.batch

    def prep(name, **kw):
        plan = policies.get(name, **kw).plan_hybrid(b.q_lens, b.kv_lens, b.shape, spec)
        return prepare_hybrid(plan, data.cache, b.q_lens)
    two = prep("hybrid-colocated")
    out = {"serial": prep("hybrid-serial"), "two-streams": two,
           "ordered": dataclasses.replace(two, config=dataclasses.replace(
               two.config, ordered_launch=has_programmatic_launch(data.cache.device)))}
    if heuristic:
        out["heuristic"] = prep("hybrid-tuned", path=heuristic)
    return out


def run_case(case, device, dtype, spec, timer, rounds, heuristic) -> dict:
    data = BatchData(case.batch(), device, dtype)
    lch = launches(data, spec, heuristic)
    entry = {"case_id": case.case_id, "ordered_launch": lch["ordered"].config.ordered_launch,
             "variants": {}}
    for name, launch in lch.items():
        print(f"  check {name}", flush=True)  # where a hung launch stopped, in the log
        entry["variants"][name] = {**check_launch(launch, data), "rounds": []}
    for _ in range(rounds):  # interleaved, so a slow window hits every variant alike
        for name, launch in lch.items():
            row = entry["variants"][name]
            if row["ok"]:
                row["rounds"].append(time_launch(launch, data, timer))
    for row in entry["variants"].values():
        med = [r["median_us"] for r in row["rounds"]]
        if med:
            row["median_us"] = sorted(med)[len(med) // 2]
            row["round_spread"] = max(med) / min(med)
            row["p90_over_p10"] = max(r["p90_us"] / r["p10_us"] for r in row["rounds"])
    return entry


def summarize(cases: list[dict]) -> dict:
    def us(c, name):
        return c["variants"].get(name, {}).get("median_us")
    s = {"cases": len(cases)}
    for name in VARIANTS[1:]:
        sp = [us(c, "serial") / us(c, name) for c in cases if us(c, name) and us(c, "serial")]
        if sp:
            s[f"{name}_over_serial_geomean"] = geomean(sp)
            s[f"{name}_over_serial_min"] = min(sp)
            s[f"{name}_round_spread_max"] = max(c["variants"][name]["round_spread"]
                                                 for c in cases if us(c, name))
    return s


def markdown(results: dict) -> str:
    lines = [f"copy bandwidth {results['copy']['bytes_per_s'] / 1e12:.3f} TB/s; "
             f"timer: {results['timer']}; rounds {results['rounds']}", "",
             "| case | serial us | two-streams us (spread) | ordered us (spread) | "
             "heuristic us | serial / two-streams | serial / ordered |",
             "|---|---|---|---|---|---|---|"]
    for c in results["cases"]:
        v = c["variants"]

        def cell(name, spread=True):
            r = v.get(name, {})
            if not r.get("median_us"):
                return "-" if name not in v else f"not ok: {r.get('message', '')}"
            return f"{r['median_us']:.1f}" + (f" ({r['round_spread']:.2f})" if spread else "")
        s = v["serial"].get("median_us", math.nan)
        t = v["two-streams"].get("median_us", math.nan)
        o = v["ordered"].get("median_us", math.nan)
        lines.append(f"| {c['case_id']} | {cell('serial', False)} | {cell('two-streams')} | "
                     f"{cell('ordered')} | {cell('heuristic', False)} | {s / t:.3f} | "
                     f"{s / o:.3f} |")
    lines += ["", json.dumps(results["summary"], default=float)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_colocated_order_out"))
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny cases")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--skip-cases", type=int, default=0)
    ap.add_argument("--max-cases", type=int, default=36)
    ap.add_argument("--heuristic", metavar="FILE", default=None)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.skip_cases < 0 or args.max_cases < 1:
        print("bench_colocated_order: error: --rounds / --max-cases must be >= 1, --skip-cases "
              ">= 0", file=sys.stderr)
        return 2
    if args.heuristic:
        try:
            policies.get("hybrid-tuned", path=args.heuristic)
        except ValueError as exc:
            print(f"bench_colocated_order: error: --heuristic: {exc}", file=sys.stderr)
            return 2
    dry = args.dry_run or not torch.cuda.is_available()
    device = "cpu" if dry else "cuda"
    if dry:
        shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=16,
                               dtype="fp16")
        dtype, timer = torch.float16, WallTimer()
        spec = DeviceSpec("interpreter", sm_count=4, l2_bytes=0, hbm_bytes_per_s=1e11)
        cases = dry_cases(shape)
    else:
        from kvtune.harness.device import live_device
        from kvtune.workloads.suites import get_suite

        shape, dtype, timer = AttentionShape(), torch.bfloat16, EventTimer(args.reps)
        spec = live_device()
        cases = list(get_suite("hybrid", shape=shape).cases)
    cases = cases[args.skip_cases:args.skip_cases + args.max_cases]
    os.makedirs(args.out, exist_ok=True)
    if not dry:  # a launch that never returns shows where it hangs in the log, then exits
        faulthandler.dump_traceback_later(args.budget_s + 60, exit=True)
    results = {"device": spec.to_dict(), "dry_run": dry, "timer": timer.name,
               "rounds": args.rounds, "cases": [], "skipped": []}
    results["copy"] = copy_bandwidth(timer, device)
    t0 = time.time()
    for case in cases:
        if time.time() - t0 > args.budget_s:
            results["skipped"].append(case.case_id)
            continue
        try:
            results["cases"].append(run_case(case, device, dtype, spec, timer, args.rounds,
                                             args.heuristic))
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            results["cases"].append({"case_id": case.case_id, "variants": {},
                                     "error": f"{type(exc).__name__}: {exc}"})
            traceback.print_exc()
        print(f"[{time.time() - t0:6.1f}s] {case.case_id}", flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        save(args.out, results, t0)
    md = save(args.out, results, t0)
    print(md)
    return 0


def save(out_dir: str, results: dict, t0: float) -> str:
    """Write results.json and results.md of the cases so far (after every case, so that a run
    stopped by a time limit keeps them); returns the markdown."""
    done = [c for c in results["cases"] if c["variants"]]
    results["summary"] = summarize(done)
    results["wall_s"] = time.time() - t0
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=float)
    md = markdown({**results, "cases": done})
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(md)
    return md


if __name__ == "__main__":
    sys.exit(main())

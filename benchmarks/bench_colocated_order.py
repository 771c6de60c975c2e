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
  two-streams   `hybrid-colocated` on two streams (HybridConfig.ordered_launch off; the default
                before the thirteenth session);
  ordered       the same with HybridConfig.ordered_launch on where the GPU has programmatic
                dependent launch (the default since; the two-stream path elsewhere);
  heuristic     `hybrid-tuned` with --heuristic (optional), as it runs by default;
  ordered-pS    (--shares S,...) ordered with a persistent prefill grid of round(S x sm_count)
                programs instead of one per SM (S in (0, 1]): the decode grid then has whole
                SMs on the rest until the tail (one program per SM) joins; a probe for a
                prefill share by the decode part's weight, as POD's proportional policy.
  ordered-wgNsS (--colocated-wgmma N:S,...) ordered with the persistent prefill grid and tail
                through kernels/prefill_wgmma.py's Gluon tile (HybridConfig.colocated_wgmma)
                at N keys per step and S K/V buffers; only where the Gluon tile can run
                (kernels.hybrid.prefill_wgmma_ok: an sm_90 GPU), never under the interpreter.
  ordered-dk-L  (--decode-kernel L,...) ordered with the decodes through kernels/decode.py in
                its configuration L (a KernelConfig label, e.g. bn32-w4-s4-pa) instead of the
                hybrid kernel's decode items; L+wgN:S also runs the prefill grid through the
                Gluon tile as ordered-wgNsS. A footprint small enough for two decode programs
                beside each persistent prefill program is the point (decode.py's default for
                the shape holds about 104 KB, so only one fits beside the 112 KB prefill tile).
Every variant is checked against the float64 reference before it is timed. Timer: bench_hybrid.py's
CUDA-event pairs, L2 flushed before each, median of --reps per round; the spread across rounds
(max / min of the round medians) and p90 / p10 within them show a bimodal step.

--replays N (0: off) then checks that the step replays: for each variant that passed its check,
one CUDA graph of run_hybrid is captured (after one warm-up run on a side stream) and replayed N
times back to back, with no host sync between replays. Before each replay the output and the
launch's partial_out / partial_lse are filled with NaN (what a next launch racing ahead would
read stale); each replay's output must equal the checked run's output bit for bit, and after
the last one launch.counter must be all zeros (the step's last program resets it; a nonzero
counter would start the next step wrong). The variant row gets "replays": {n, mismatches,
first_bad (replay index or None), max_abs_diff (output units; NaN where a replay left NaN),
counter_zero}, or {error} where the capture or a replay raised; a variant that fails is not ok
and not timed. On the CPU (the interpreter has no graphs) the same loop calls run_hybrid
directly, at most 2 times with --dry-run.

  PYTHONPATH=/tmp/site python3 benchmarks/bench_colocated_order.py --max-cases 36 --out $OUT
  python benchmarks/bench_colocated_order.py --replays 200 --max-cases 36 --out $OUT
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
from kvtune.kernels.decode import prepare_decode  # noqa: E402
from kvtune.kernels.decode_config import KernelConfig  # noqa: E402
from kvtune.kernels.hybrid import (has_programmatic_launch, prefill_wgmma_ok,  # noqa: E402
                                   prepare_hybrid, run_hybrid)
from kvtune.kernels.plan import AttentionShape, DeviceSpec  # noqa: E402

VARIANTS = ("serial", "two-streams", "ordered", "heuristic")
DRY_REPLAYS = 2  # --dry-run runs at most this many replays (each is a run under the interpreter)


def launches(data: BatchData, spec, heuristic: str | None, shares=(), wgmma=(),
             decode_kernels=()) -> dict:
    """The HybridLaunch of every variant for one batch (shares: the ordered-pS probes; wgmma:
    (keys per step, buffers) of the ordered-wgNsS probes; decode_kernels: the ordered-dk-L
    specs)."""
    b = data.batch

    def prep(name, **kw):
        plan = policies.get(name, **kw).plan_hybrid(b.q_lens, b.kv_lens, b.shape, spec)
        return prepare_hybrid(plan, data.cache, b.q_lens)
    col = prep("hybrid-colocated")
    out = {"serial": prep("hybrid-serial"),
           "two-streams": dataclasses.replace(col, config=dataclasses.replace(
               col.config, ordered_launch=False)),
           "ordered": dataclasses.replace(col, config=dataclasses.replace(
               col.config, ordered_launch=has_programmatic_launch(data.cache.device)))}
    if heuristic:
        out["heuristic"] = prep("hybrid-tuned", path=heuristic)
    for share in shares:
        programs = max(1, round(share * spec.sm_count))
        out[f"ordered-p{share:g}"] = dataclasses.replace(col, config=dataclasses.replace(
            out["ordered"].config, persistent_prefill_programs=programs))
    if prefill_wgmma_ok(col.plan, data.cache, data.cache.device):
        for block_n, stages in wgmma:
            out[f"ordered-wg{block_n}s{stages}"] = dataclasses.replace(
                col, config=dataclasses.replace(
                    out["ordered"].config, colocated_wgmma=True, colocated_wgmma_block_n=block_n,
                    colocated_wgmma_stages=stages))
    if b.num_decodes and b.num_prefills and int(b.q_lens[~b.is_prefill].max()) == 1:
        for text in decode_kernels:
            out[f"ordered-dk-{text}"] = decode_kernel_variant(col, data, out["ordered"].config,
                                                              text)
    return out


def decode_kernel_variant(col, data: BatchData, ordered_config, text: str):
    """The ordered colocated launch `col` with its decodes through kernels/decode.py in the
    configuration of `text` ("LABEL" or "LABEL+wgN:S": also the Gluon prefill grid)."""
    label, _, wg = text.partition("+wg")
    base = prepare_hybrid(col.plan, data.cache, data.batch.q_lens, decode_kernel=True)
    dk = prepare_decode(col.plan.decode_plan, base.decode_cache,
                        config=KernelConfig.from_label(label), merge_pdl=False)
    config = ordered_config
    if wg:
        if not prefill_wgmma_ok(col.plan, data.cache, data.cache.device):
            raise ValueError(f"--decode-kernel {text}: the Gluon tile cannot run here")
        block_n, stages = (int(x) for x in wg.split(":"))
        config = dataclasses.replace(config, colocated_wgmma=True,
                                     colocated_wgmma_block_n=block_n,
                                     colocated_wgmma_stages=stages)
    return dataclasses.replace(base, decode_kernel=dk, config=config)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """t viewed as integers of its element size: != on them compares bit patterns (a NaN
    never matches a number, -0.0 does not match 0.0)."""
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(ints[t.element_size()])


def replay_check(launch, data: BatchData, ref_out: torch.Tensor, n: int) -> dict:
    """{n, mismatches, first_bad, max_abs_diff, counter_zero}: n runs of a checked launch,
    `out`, partial_out and partial_lse NaN-filled before each, compared bitwise with ref_out.

    On CUDA the runs are replays of one CUDA graph of run_hybrid, enqueued back to back: the
    comparisons stay on the device and the host syncs once, after the last replay, since a
    sync per replay would let a launch that leaves late finish before the next one starts.
    Elsewhere (the interpreter has no graphs) run_hybrid is called directly. first_bad: the
    index of the first mismatching run (None: none); max_abs_diff: the largest |out - ref_out|
    over the runs, in the output's units (NaN where a run left NaN); counter_zero:
    launch.counter all zeros after the last run. Raises where the capture or a run fails."""
    q, cache = data.q, data.cache
    out = torch.empty_like(q)
    if q.device.type == "cuda":
        # One warm-up run outside the capture, on a side stream (torch.cuda.graphs): compiles
        # every kernel, so the capture holds launches only.
        main, side = torch.cuda.current_stream(q.device), torch.cuda.Stream(q.device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            run_hybrid(launch, q, cache, out=out)
        main.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run_hybrid(launch, q, cache, out=out)
        step = graph.replay
    else:
        def step():
            run_hybrid(launch, q, cache, out=out)
    bad = torch.zeros(n, dtype=torch.bool, device=q.device)
    diff = torch.zeros(n, dtype=torch.float32, device=q.device)
    ref_bits = _bits(ref_out)
    for i in range(n):
        # On the current stream, so that each replay follows its fills and the previous
        # replay's comparisons.
        for t in (out, launch.partial_out, launch.partial_lse):
            t.fill_(float("nan"))
        step()
        bad[i] = (_bits(out) != ref_bits).any() | torch.isnan(out).any()
        diff[i] = (out.float() - ref_out.float()).abs().amax()
    if q.device.type == "cuda":
        torch.cuda.synchronize(q.device)
    bad, diff = bad.cpu(), diff.cpu()
    k = int(bad.sum())
    return {"n": n, "mismatches": k,
            "first_bad": int(bad.nonzero()[0, 0]) if k else None,
            "max_abs_diff": (math.nan if bool(diff.isnan().any()) else float(diff.max()))
            if n else 0.0,
            "counter_zero": not bool(launch.counter.any())}


def add_replays(row: dict, name: str, launch, data: BatchData, ref_out: torch.Tensor,
                n: int) -> None:
    """row["replays"] of replay_check (or {error}: the exception's first line), one log line;
    a failed or raising check makes the row not ok, so that it is not timed."""
    try:
        r = replay_check(launch, data, ref_out, n)
    except Exception as exc:  # noqa: BLE001 - recorded, never timed
        lines = str(exc).splitlines()
        r = {"error": f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"}
        traceback.print_exc()
    row["replays"] = r
    if "error" in r:
        row["ok"], row["message"] = False, f"replays: {r['error']}"
        print(f"  replays {name}: error {r['error']}", flush=True)
        return
    if r["mismatches"] or not r["counter_zero"]:
        why = [f"{r['mismatches']}/{r['n']} mismatched (first {r['first_bad']})"] \
            if r["mismatches"] else []
        why += [] if r["counter_zero"] else ["counter nonzero after the last"]
        row["ok"], row["message"] = False, "replays: " + ", ".join(why)
    print(f"  replays {name}: n {r['n']}, mismatches {r['mismatches']}, first bad "
          f"{r['first_bad']}, max abs diff {r['max_abs_diff']:.3g}, counter zero "
          f"{r['counter_zero']}", flush=True)


def run_case(case, device, dtype, spec, timer, rounds, heuristic, replays=0, shares=(),
             wgmma=(), drop=(), decode_kernels=()) -> dict:
    data = BatchData(case.batch(), device, dtype)
    lch = {k: v for k, v in launches(data, spec, heuristic, shares, wgmma,
                                     decode_kernels).items() if k not in drop}
    entry = {"case_id": case.case_id, "ordered_launch": lch["ordered"].config.ordered_launch,
             "variants": {}}
    refs = {}
    for name, launch in lch.items():
        print(f"  check {name}", flush=True)  # where a hung launch stopped, in the log
        refs[name] = torch.empty_like(data.q)  # the checked output: the replays' reference
        entry["variants"][name] = {**check_launch(launch, data, out=refs[name]), "rounds": []}
    for name, launch in lch.items():
        if replays and entry["variants"][name]["ok"]:
            print(f"  replay {name}", flush=True)
            add_replays(entry["variants"][name], name, launch, data, refs[name], replays)
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
    names = list(VARIANTS[1:]) + sorted({n for c in cases for n in c["variants"]
                                         if n not in VARIANTS})
    for name in names:
        sp = [us(c, "serial") / us(c, name) for c in cases if us(c, name) and us(c, "serial")]
        if sp:
            s[f"{name}_over_serial_geomean"] = geomean(sp)
            s[f"{name}_over_serial_min"] = min(sp)
            s[f"{name}_round_spread_max"] = max(c["variants"][name]["round_spread"]
                                                 for c in cases if us(c, name))
    rep = [r["replays"] for c in cases for r in c["variants"].values() if "replays" in r]
    if rep:  # variants that raised, mismatched or left the counter nonzero on replay
        s["replay_failures"] = sum("error" in r or bool(r["mismatches"]) or not r["counter_zero"]
                                   for r in rep)
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
        t = v.get("two-streams", {}).get("median_us", math.nan)
        o = v["ordered"].get("median_us", math.nan)
        lines.append(f"| {c['case_id']} | {cell('serial', False)} | {cell('two-streams')} | "
                     f"{cell('ordered')} | {cell('heuristic', False)} | {s / t:.3f} | "
                     f"{s / o:.3f} |")
    lines += share_markdown(results)
    lines += replay_markdown(results)
    lines += ["", json.dumps(results["summary"], default=float)]
    return "\n".join(lines) + "\n"


def share_markdown(results: dict) -> list[str]:
    """serial / variant per case for the ordered-pS probes (no lines without --shares)."""
    names = sorted({n for c in results["cases"] for n in c["variants"] if n not in VARIANTS})
    if not names:
        return []
    lines = ["", "Persistent prefill share (serial / variant; round spread in parentheses):", "",
             "| case | ordered | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
    for c in results["cases"]:
        v = c["variants"]
        s = v["serial"].get("median_us", math.nan)

        def cell(name):
            r = v.get(name, {})
            if not r.get("median_us"):
                return "-" if name not in v else "not ok"
            return f"{s / r['median_us']:.3f} ({r['round_spread']:.2f})"
        lines.append(f"| {c['case_id']} | {cell('ordered')} | "
                     + " | ".join(cell(n) for n in names) + " |")
    return lines


def replay_markdown(results: dict) -> list[str]:
    """The replay section of results.md (no lines where no variant replayed)."""
    rows = [(c["case_id"], name, r["replays"]) for c in results["cases"]
            for name, r in c["variants"].items() if "replays" in r]
    if not rows:
        return []
    lines = ["", ("Replays (one CUDA graph, or direct calls on the CPU; output and partials "
                  "NaN-filled before each, compared bitwise with the checked run):"), "",
             "| case | variant | replays | mismatches | first bad | max abs diff | counter zero |",
             "|---|---|---|---|---|---|---|"]
    for case_id, name, r in rows:
        if "error" in r:
            lines.append(f"| {case_id} | {name} | error: {r['error']} | - | - | - | - |")
        else:
            first = "-" if r["first_bad"] is None else r["first_bad"]
            lines.append(f"| {case_id} | {name} | {r['n']} | {r['mismatches']} | {first} | "
                         f"{r['max_abs_diff']:.3g} | {'yes' if r['counter_zero'] else 'NO'} |")
    return lines


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
    ap.add_argument("--shares", default="", metavar="S,...",
                    help="ordered-pS variants: persistent prefill programs = S x SMs, S in (0, 1]")
    ap.add_argument("--colocated-wgmma", default="", metavar="N:S,...",
                    help="ordered-wgNsS variants: the Gluon persistent prefill grid at N keys "
                         "per step (32, 64 or 128) and S K/V buffers (2-4)")
    ap.add_argument("--decode-kernel", default="", metavar="L[+wgN:S],...",
                    help="ordered-dk-L variants: the decodes through kernels/decode.py in "
                         "configuration L (e.g. bn32-w4-s4-pa), +wgN:S with the Gluon prefill "
                         "grid")
    ap.add_argument("--no-two-streams", action="store_true",
                    help="leave out the two-streams variant (the default before the thirteenth "
                         "session), to fit more cases in the budget")
    ap.add_argument("--replays", type=int, default=0, metavar="N",
                    help="replays of each checked variant before timing (0: off; at most "
                         f"{DRY_REPLAYS} with --dry-run)")
    args = ap.parse_args(argv)
    try:
        shares = tuple(float(x) for x in args.shares.split(",") if x.strip())
    except ValueError:
        shares = (-1.0,)
    if any(not 0 < x <= 1 for x in shares):
        print(f"bench_colocated_order: error: --shares must be numbers in (0, 1], got "
              f"{args.shares!r}", file=sys.stderr)
        return 2
    try:
        wgmma = tuple(tuple(int(v) for v in x.split(":")) for x in args.colocated_wgmma.split(",")
                      if x.strip())
    except ValueError:
        wgmma = ((0, 0),)
    if any(len(w) != 2 or w[0] not in (32, 64, 128) or not 2 <= w[1] <= 4 for w in wgmma):
        print(f"bench_colocated_order: error: --colocated-wgmma must be N:S pairs with N in "
              f"32, 64, 128 and S in 2..4, got {args.colocated_wgmma!r}", file=sys.stderr)
        return 2
    decode_kernels = tuple(x.strip() for x in args.decode_kernel.split(",") if x.strip())
    for text in decode_kernels:
        label, _, wg = text.partition("+wg")
        try:
            KernelConfig.from_label(label)
            if wg and len([int(v) for v in wg.split(":")]) != 2:
                raise ValueError(f"+wg{wg}: need N:S")
        except ValueError as exc:
            print(f"bench_colocated_order: error: --decode-kernel {text!r}: {exc}",
                  file=sys.stderr)
            return 2
    if args.rounds < 1 or args.skip_cases < 0 or args.max_cases < 1 or args.replays < 0:
        print("bench_colocated_order: error: --rounds / --max-cases must be >= 1, --skip-cases "
              "/ --replays >= 0", file=sys.stderr)
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
    replays = min(args.replays, DRY_REPLAYS) if dry else args.replays
    results = {"device": spec.to_dict(), "dry_run": dry, "timer": timer.name,
               "rounds": args.rounds, "replays": replays, "cases": [], "skipped": []}
    results["copy"] = copy_bandwidth(timer, device)
    t0 = time.time()
    for case in cases:
        if time.time() - t0 > args.budget_s:
            results["skipped"].append(case.case_id)
            continue
        try:
            results["cases"].append(run_case(case, device, dtype, spec, timer, args.rounds,
                                             args.heuristic, replays, shares, wgmma,
                                             ("two-streams",) if args.no_two_streams else (),
                                             decode_kernels))
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

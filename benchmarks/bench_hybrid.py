"""GPU benchmark of hybrid batches (issue 15): the Triton hybrid kernel's schedules against serial,
FlashInfer serial and FlashInfer POD, and the max(prefill alone, decode alone) bound.

One invocation:
  copy     device-to-device copy bandwidth (bytes read + written): the ceiling every row is
           reported against (bw_fraction = the batch's minimal bytes / time / copy bandwidth);
  hybrid   per case of a subset of the `hybrid` suite (the paper's sweep at context 4K/16K, chunk
           512/2048, decode batch 16/128, plus chunked-prefill simulator mixes, one speculative):
           Triton serial, streams, fused, sm-aware (the `pod` policy), partitioned (persistent
           decode grid on the rule's share of SMs beside the prefill grid), colocated (a
           persistent grid of one prefill program per SM beside the decode grid), a small
           hybrid-parametric search ("tuned": best of its variants, decode shares 0.25/0.5/0.75
           included), FlashInfer serial (BatchPrefill + BatchDecode) and FlashInfer POD
           (BatchPODWithPagedKVCacheWrapper) on FI_CASE_IDS only (3 representative cases, after
           every Triton case; their JIT is built by 3 background processes from the start), and
           prefill-alone / decode-alone (the two halves as their own batches, serial policy)
           whose max is the overlap bound;
  parity   decode-only batches: the hybrid path against today's decode kernel
           (kernels/decode.py) on the same decode plan (since the thirteenth session the hybrid
           path runs single-token decodes through decode.py itself, so this measures its
           wrapper); a prefill-only batch: the hybrid kernel against FlashInfer's BatchPrefill
           (kvtune has no other prefill kernel).
Every variant's output is checked against the float64 causal reference (NaN-poisoned output,
relative error <= 2e-2) before it is timed; a failed check is recorded and never timed.
Timer: CUDA events around one call, L2 flushed before each (outside the events), median of
--reps. A wall-clock budget (--budget-s, default 165 s; FlashInfer may overrun it by 15 s) skips
what is left once spent (recorded as skipped): about 3 minutes on one H100/H200.

Usage (repository root; on the GPU machine with /tmp/site holding the wheels and the checkout):
  PYTHONPATH=/tmp/site python3 benchmarks/bench_hybrid.py --out $OUT
CPU dry run (Triton interpreter, tiny shapes, FlashInfer skipped when absent):
  python benchmarks/bench_hybrid.py --dry-run --out /tmp/bench_hybrid
Writes results.json and results.md to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback

import numpy as np

DRY = "--dry-run" in sys.argv
if DRY:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from kvtune.kernels import policies  # noqa: E402
from kvtune.kernels.decode import prepare_decode, run_decode  # noqa: E402
from kvtune.kernels.hybrid import make_hybrid_queries, prepare_hybrid, run_hybrid  # noqa: E402
from kvtune.kernels.paged import PagedKVCache  # noqa: E402
from kvtune.kernels.plan import AttentionShape, DeviceSpec  # noqa: E402
from kvtune.kernels.reference import attention_reference, relative_error  # noqa: E402
from kvtune.workloads.batch import AttentionBatch  # noqa: E402
from kvtune.workloads.hybrid import HybridCase  # noqa: E402
from bench_kernels import Timer  # noqa: E402 - the sibling script (this folder is sys.path[0])

BOUND = 2e-2
TRITON_VARIANTS = {
    "serial": ("hybrid-serial", {}),
    "streams": ("hybrid-streams", {}),
    "fused": ("hybrid-fused", {}),
    "pod": ("pod", {}),
    # SM partition: persistent decode grid on the proportional share of SMs, prefill beside it.
    "partitioned": ("hybrid-parametric", {"schedule": "partitioned"}),
    # Co-location: persistent prefill grid (one 64-row program per SM) beside the decode grid.
    "colocated": ("hybrid-colocated", {}),
}
# The "tuned" column: best of these hybrid-parametric settings (a small grid over the paper's
# knobs; `kvtune tune` searches the full space).
TUNED_VARIANTS = [
    dict(schedule="sm-aware", ctas_per_sm=2, sm_policy="proportional", prefill_block_m=128),
    # Decode shares of SMs around the first run's measured optima (decode time / (prefill +
    # decode) alone: 0.1 for B16 beside 2048 tokens .. 0.75 for B128 beside 512).
    dict(schedule="partitioned", decode_sm_share=0.5, prefill_block_m=128),
    dict(schedule="sm-aware", ctas_per_sm=4, sm_policy="proportional", prefill_block_m=64),
    dict(schedule="fused", ctas_per_sm=2, prefill_block_m=128),
    # The two-launch schedules with the parametric decode split (2048 tokens per CTA), so that
    # the tuned column can also pick a plain or co-located two-launch step.
    dict(schedule="streams", ctas_per_sm=2, prefill_block_m=128),
    dict(schedule="colocated", ctas_per_sm=4, prefill_block_m=64),
]
# FlashInfer runs on these representative cases only (its JIT is built meanwhile in background
# processes, --fi-warmup), after every Triton case: a small decode batch beside a short chunk, a
# decode-heavy one and a long-context, long-chunk one.
FI_CASE_IDS = ("hybrid:B16:seed0:chunk_tokens=512,context_tokens=4096",
               "hybrid:B128:seed0:chunk_tokens=512,context_tokens=4096",
               "hybrid:B128:seed0:chunk_tokens=2048,context_tokens=16384")
FI_RESERVE_S = 15.0


def gpu_cases(shape):
    cases = []
    for ctx in (4096, 16384):
        for chunk in (512, 2048):
            for b in (16, 128):
                cases.append(HybridCase({"context_tokens": ctx, "chunk_tokens": chunk}, b, shape))
    cases.append(HybridCase({"source": "continuous", "step_token_budget": 2048}, 256, shape))
    cases.append(HybridCase({"source": "continuous", "step_token_budget": 2048,
                             "draft_tokens": 3}, 64, shape))
    return cases


def dry_cases(shape):
    return [HybridCase({"context_tokens": 64, "chunk_tokens": 40}, 3, shape),
            HybridCase({"context_tokens": 48, "chunk_tokens": 20, "decode_q_len": 3}, 2, shape)]


# ------------------------------------------------------------------------------------ timing

class EventTimer(Timer):
    """bench_kernels.py's timer (CUDA-event pairs, L2 flushed outside them), two warm-up runs."""

    name = "cuda-events, cold L2, paced"

    def __init__(self, reps: int):
        super().__init__(reps, warmup=2)


class WallTimer:
    name = "wall-clock (dry run: interpreter, not a measurement)"

    def __call__(self, fn) -> dict:
        t0 = time.perf_counter()
        fn()
        us = (time.perf_counter() - t0) * 1e6
        return {"median_us": us, "p10_us": us, "p90_us": us}


def copy_bandwidth(timer, device) -> dict:
    nbytes = (1 << 30) if device == "cuda" else (16 << 20)
    src = torch.randint(1, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    r = timer(lambda: dst.copy_(src))
    return {"bytes": 2 * nbytes, **r, "bytes_per_s": 2 * nbytes / (r["median_us"] * 1e-6),
            "ok": bool(torch.equal(dst[:4096], src[:4096]))}


# ------------------------------------------------------------------------------------ runs

class BatchData:
    """One batch on the device: cache, queries, float64 reference."""

    def __init__(self, batch: AttentionBatch, device: str, dtype):
        self.batch = batch
        self.cache = PagedKVCache.from_lengths(batch.kv_lens, batch.shape, device=device,
                                               dtype=dtype, seed=batch.seed)
        self.q = make_hybrid_queries(batch.q_lens, batch.shape, device=device, dtype=dtype,
                                     seed=batch.seed)
        self.ref = attention_reference(self.q, self.cache, batch.q_lens)


def checked(out_fn, ref) -> tuple[bool, float, str]:
    try:
        out = out_fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - recorded, never timed
        return False, float("nan"), f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    err = relative_error(out, ref)
    ok = math.isfinite(err) and err <= BOUND and not bool(torch.isnan(out).any())
    return ok, err, "" if ok else f"rel error {err:.3e}"


def check_launch(launch, data: BatchData, out: torch.Tensor | None = None) -> dict:
    """{ok, rel_error, message, decode_kernel}: one run of a HybridLaunch on data, written into a
    NaN-filled output (`out`, filled here, where the caller keeps the checked output; else a new
    one), against the float64 reference; decode_kernel: whether its decodes ran
    kernels/decode.py (the simulator's fit reads it)."""
    out = torch.full_like(data.q, float("nan")) if out is None else out.fill_(float("nan"))
    ok, err, msg = checked(lambda: run_hybrid(launch, data.q, data.cache, out=out), data.ref)
    return {"ok": ok, "rel_error": err, "message": msg,
            "decode_kernel": launch.decode_kernel is not None}


def time_launch(launch, data: BatchData, timer) -> dict:
    """The timer's row of a launch (median_us, p10_us, ...) into a preallocated output."""
    out = torch.empty_like(data.q)
    return timer(lambda: run_hybrid(launch, data.q, data.cache, out=out))


def check_and_time(launch, data: BatchData, timer) -> dict:
    """check_launch's row, with time_launch's added where the check passed (never timed else)."""
    row = check_launch(launch, data)
    if row["ok"]:
        row.update(time_launch(launch, data, timer))
    return row


def time_triton(data: BatchData, policy, device_spec, timer) -> dict:
    b = data.batch
    plan = policy.plan_hybrid(b.q_lens, b.kv_lens, b.shape, device_spec)
    launch = prepare_hybrid(plan, data.cache, b.q_lens)
    row = check_launch(launch, data)
    row.update({"schedule": plan.schedule, "ctas_per_sm": plan.ctas_per_sm,
                "sm_policy": plan.sm_policy, "prefill_block_m": plan.prefill_block_m,
                "prefill_tasks": plan.num_prefill_tasks, "decode_tasks": plan.num_decode_tasks})
    if row["ok"]:
        row.update(time_launch(launch, data, timer))
    try:  # the simulator's prediction next to the measurement (what its constants are fitted to)
        from kvtune.harness.sim_hybrid import simulate_hybrid

        row["sim_us"] = simulate_hybrid(plan, b.shape, device_spec).time_us
    except Exception as exc:  # noqa: BLE001
        row["sim_error"] = str(exc)
    return row


def time_flashinfer(data: BatchData, mode: str, timer) -> dict:
    from kvtune.harness.backends.flashinfer_hybrid import FlashInferHybrid, HybridUnsupported

    try:
        runner = FlashInferHybrid(data.cache, data.q, data.batch.q_lens, mode)
    except HybridUnsupported as exc:
        return {"ok": False, "message": f"unsupported: {exc}"}
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "message": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}

    def out_fn():
        runner.run()
        return runner.output(data.q)

    ok, err, msg = checked(out_fn, data.ref)
    row = {"ok": ok, "rel_error": err, "message": msg}
    if ok:
        row.update(timer(runner.run))
    return row


# Background JIT builds, one process each (module sets that do not overlap, built in parallel):
# name -> (FlashInferHybrid mode, q_lens, kv_lens) of a tiny batch.
FI_WARMUPS = {"prefill": ("serial", [40], [300]), "decode": ("serial", [1, 1], [200, 100]),
              "pod": ("pod", [40, 1, 1], [300, 200, 100])}


def fi_warmup(name: str) -> int:
    """Build FlashInfer's JIT modules of FI_WARMUPS[name] on a tiny batch of the benchmark's shape
    and dtype (the modules depend on those, not on the lengths); 0 when done, 2 without
    CUDA/FlashInfer."""
    try:
        import flashinfer  # noqa: F401
    except Exception:  # noqa: BLE001
        print("bench_hybrid: error: --fi-warmup needs CUDA and flashinfer", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_hybrid: error: --fi-warmup needs CUDA and flashinfer", file=sys.stderr)
        return 2
    os.nice(10)  # below the timing process, which shares the CPU with these builds
    mode, q_lens, kv_lens = FI_WARMUPS[name]
    batch = AttentionBatch(q_lens, kv_lens, AttentionShape())
    row = time_flashinfer(BatchData(batch, "cuda", torch.bfloat16), mode, lambda fn: {})
    print(json.dumps(row, default=float))
    return 0


def start_fi_warmup(out_dir: str) -> dict:
    """Start one background process per FlashInfer mode that builds its JIT modules while the
    Triton cases run (the JIT took ~190 s serially on a fresh machine)."""
    procs = {}
    # Compile jobs per build (FlashInfer's ninja honours MAX_JOBS; the builds run niced below the
    # timing process): 4 for the prefill and decode modules; the POD module, the long pole, gets
    # all but 4 cores (with 4 jobs it was not built after 360 s on a 16-core H200 machine, ninth
    # session call 4; the eighth built it in about 3 minutes with 16). MAX_JOBS overrides both.
    cores = os.cpu_count() or 8
    for name in FI_WARMUPS:
        jobs = os.environ.get("MAX_JOBS") or str(max(4, cores - 4) if name == "pod" else 4)
        env = dict(os.environ, MAX_JOBS=jobs)
        log_f = open(os.path.join(out_dir, f"fi_warmup_{name}.log"), "w")
        procs[name] = (subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                         "--fi-warmup", name], stdout=log_f, stderr=log_f,
                                        env=env, start_new_session=True),
                       log_f)
    return procs


def wait_fi_warmup(procs: dict, timeout_s: float) -> dict:
    """Wait for the warmup processes up to timeout_s (at least 1 s) in all; one still building
    then is stopped with its compiler children (its own process group) and reported as
    'timeout'."""
    status = {}
    deadline = time.time() + max(1.0, timeout_s)
    for mode, (proc, log_f) in procs.items():
        try:
            rc = proc.wait(timeout=max(0.1, deadline - time.time()))
            status[mode] = "ok" if rc == 0 else f"exit {rc}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group start_fi_warmup created
            proc.wait()
            status[mode] = "timeout"
        log_f.close()
    return status


def sub_batch(batch: AttentionBatch, mask) -> AttentionBatch | None:
    if not mask.any():
        return None
    return AttentionBatch(batch.q_lens[mask], batch.kv_lens[mask], batch.shape, batch.seed)


def geomean(xs) -> float:
    xs = [x for x in xs if x and math.isfinite(x) and x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_hybrid_out"))
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny cases")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=165.0,
                    help="wall-clock budget; what is left after it is skipped")
    ap.add_argument("--max-cases", type=int, default=0, help="only the first N hybrid cases")
    ap.add_argument("--skip-cases", type=int, default=0,
                    help="drop the first N hybrid cases (before --max-cases), so that a suite "
                         "can be spread over device calls")
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--variants", default=None,
                    help="comma-separated Triton variants to time (default: all of "
                         "TRITON_VARIANTS; serial always runs: the baseline)")
    ap.add_argument("--no-tuned", action="store_true", help="skip the tuned grid")
    ap.add_argument("--case-ids", default=None,
                    help="';'-separated substrings (ids hold commas): only the hybrid cases "
                         "whose id holds one")
    ap.add_argument("--suite", default=None,
                    help="GPU: the cases of this kvtune hybrid suite (hybrid, hybrid-quick, "
                         "hybrid-holdout) instead of the built-in subset")
    ap.add_argument("--heuristic", metavar="FILE", default=None,
                    help="also time the `heuristic` variant: hybrid-tuned planning with this "
                         "hybrid_heuristic.json (kvtune tune --suite hybrid)")
    ap.add_argument("--fi-case-ids", default=None,
                    help="';'-separated substrings: FlashInfer runs on the cases whose id holds "
                         "one (default: the 3 representative cases, FI_CASE_IDS)")
    ap.add_argument("--no-checks", action="store_true",
                    help="skip the compiled-kernel checks on other shapes (every timed variant "
                         "is still checked before it is timed)")
    ap.add_argument("--fi-warmup", choices=tuple(FI_WARMUPS), default=None,
                    help="internal: build FlashInfer's JIT modules of one mode on a tiny batch "
                         "and exit (run in background by the main invocation)")
    args = ap.parse_args(argv)
    if args.fi_warmup:
        return fi_warmup(args.fi_warmup)
    from kvtune.workloads.hybrid import HYBRID_SUITES

    if args.suite is not None and args.suite not in HYBRID_SUITES:
        print(f"bench_hybrid: error: --suite: {args.suite!r} not allowed; allowed: "
              f"{', '.join(HYBRID_SUITES)} (the dry run keeps its tiny cases)", file=sys.stderr)
        return 2
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    dry = args.dry_run or not torch.cuda.is_available()
    device = "cpu" if dry else "cuda"
    if dry:
        shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=16,
                               dtype="fp16")
        dtype = torch.float16
        spec = DeviceSpec("interpreter", sm_count=4, l2_bytes=0, hbm_bytes_per_s=1e11)
        timer = WallTimer()
        cases = dry_cases(shape)
        tuned = TUNED_VARIANTS[:2]  # sm-aware and partitioned
    else:
        from kvtune.harness.device import live_device

        shape = AttentionShape()  # llama3-8b: 32 q heads, 8 KV heads, head_dim 128, page 16
        dtype = torch.bfloat16
        spec = live_device()
        timer = EventTimer(args.reps)
        cases = gpu_cases(shape)
        tuned = TUNED_VARIANTS
        if args.suite:
            from kvtune.workloads.suites import get_suite

            cases = list(get_suite(args.suite, shape=shape).cases)
    if args.case_ids:
        wanted_ids = args.case_ids.split(";")
        cases = [c for c in cases if any(w in c.case_id for w in wanted_ids)]
    if args.skip_cases < 0 or args.max_cases < 0:
        print("bench_hybrid: error: --skip-cases / --max-cases: must be >= 0", file=sys.stderr)
        return 2
    cases = cases[args.skip_cases:]
    if args.max_cases:
        cases = cases[: args.max_cases]
    if args.no_tuned:
        tuned = []
    variants = TRITON_VARIANTS
    if args.variants:
        names = ["serial", *(n for n in args.variants.split(",") if n != "serial")]
        unknown = [n for n in names if n not in TRITON_VARIANTS]
        if unknown:
            print(f"bench_hybrid: error: --variants: {', '.join(unknown)} unknown; allowed: "
                  f"{', '.join(TRITON_VARIANTS)}", file=sys.stderr)
            return 2
        variants = {n: TRITON_VARIANTS[n] for n in names}
    if args.heuristic:
        try:  # refused now (one line, exit 2), not after minutes of timing
            policies.get("hybrid-tuned", path=args.heuristic)
        except ValueError as exc:
            print(f"bench_hybrid: error: --heuristic: {exc}", file=sys.stderr)
            return 2
        variants = {**variants, "heuristic": ("hybrid-tuned", {"path": args.heuristic})}
    fi_wanted = (args.fi_case_ids.split(";") if args.fi_case_ids else None)

    def fi_case(case_id: str) -> bool:
        return (case_id in FI_CASE_IDS if fi_wanted is None
                else any(w in case_id for w in fi_wanted))
    have_fi = False
    if not args.no_flashinfer and not dry:
        try:
            import flashinfer  # noqa: F401

            have_fi = True
        except Exception:  # noqa: BLE001
            have_fi = False
    results = {"device": spec.to_dict(), "dry_run": dry, "timer": timer.name,
               "torch": torch.__version__, "shape": shape.to_dict(), "cases": [], "parity": [],
               "skipped": [], "flashinfer": have_fi}
    try:
        import triton

        results["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    results["copy"] = copy_bandwidth(timer, device)
    ceiling = results["copy"]["bytes_per_s"]

    def log(msg):
        print(f"[{time.time() - t_start:6.1f}s] {msg}", flush=True)

    def over_budget() -> bool:
        return time.time() - t_start > args.budget_s

    def save():
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=float)
        with open(os.path.join(args.out, "results.md"), "w") as f:
            f.write(markdown(results))

    log(f"copy bandwidth {ceiling / 1e12:.3f} TB/s; {len(cases)} hybrid cases on {spec.name}")
    warmers = start_fi_warmup(args.out) if have_fi else {}
    results["check"] = [] if args.no_checks else compiled_checks(device, spec, dry, log)
    save()
    for case in cases:
        batch = case.batch()
        entry = {"case_id": case.case_id, **batch.summary(), "batch_size": batch.batch_size,
                 "total_tokens": batch.total_tokens, "min_bytes": batch.min_bytes,
                 "flops": batch.causal_flops, "variants": {}}
        results["cases"].append(entry)
        try:
            data = BatchData(batch, device, dtype)
            for name, (pol, kw) in variants.items():
                if over_budget():
                    results["skipped"].append(f"{case.case_id} {name}")
                    continue
                entry["variants"][name] = time_triton(data, policies.get(pol, **kw), spec, timer)
            best_tuned = None
            for i, kw in enumerate(tuned):
                if over_budget():
                    results["skipped"].append(f"{case.case_id} tuned{i}")
                    continue
                r = time_triton(data, policies.get("hybrid-parametric", **kw), spec, timer)
                r["params"] = kw
                entry["variants"][f"tuned{i}"] = r
                if r.get("ok") and (best_tuned is None
                                    or r["median_us"] < best_tuned["median_us"]):
                    best_tuned = r
            if best_tuned is not None:
                entry["variants"]["tuned"] = best_tuned
            del data
            for part, mask in (("prefill-alone", batch.is_prefill),
                               ("decode-alone", ~batch.is_prefill)):
                sb = sub_batch(batch, mask)
                if sb is None:
                    entry["variants"][part] = {"ok": True, "median_us": 0.0}
                    continue
                if over_budget():
                    results["skipped"].append(f"{case.case_id} {part}")
                    continue
                sd = BatchData(sb, device, dtype)
                entry["variants"][part] = r = time_triton(sd, policies.get("hybrid-serial"),
                                                          spec, timer)
                if r.get("ok") and r.get("median_us"):  # the prefill tile's tensor-core rate
                    r["tflops"] = sb.causal_flops / (r["median_us"] * 1e-6) / 1e12
                del sd
        except Exception as exc:  # noqa: BLE001 - one case's failure is recorded, the run goes on
            entry["error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        summarize_case(entry, ceiling)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        log(f"{case.case_id}: " + ", ".join(
            f"{k}={v.get('median_us', float('nan')):.1f}" for k, v in entry["variants"].items()
            if not k.startswith("tuned") or k == "tuned"))
        save()

    # Parity: decode-only against today's decode kernel (before FlashInfer, whose JIT may eat
    # the budget), prefill-only against FlashInfer's BatchPrefill (after it).
    parity_batches = ([("decode-only", AttentionBatch([1] * 64, [8192] * 64, shape)),
                       ("decode-only", AttentionBatch([1] * 256, [4096] * 256, shape)),
                       ("prefill-only", AttentionBatch([2048], [2048 + 8192], shape))]
                      if not dry else
                      [("decode-only", AttentionBatch([1] * 3, [70, 20, 33], shape)),
                       ("prefill-only", AttentionBatch([40], [90], shape))])
    run_parity([p for p in parity_batches if p[0] == "decode-only"], results, device, dtype,
               spec, timer, have_fi, over_budget, log, save)
    # FlashInfer last: its JIT (POD, prefill, decode modules) can take minutes on a fresh machine.
    if have_fi:
        # Wait for the background JIT, leaving FI_RESERVE_S of the budget for the timings, which
        # may overrun the budget by that much (FlashInfer's representative cases only).
        results["fi_warmup"] = wait_fi_warmup(
            warmers, args.budget_s - FI_RESERVE_S - (time.time() - t_start))
        log(f"flashinfer warmup: {results['fi_warmup']}")
        for case, entry in zip(cases, results["cases"]):
            if not fi_case(case.case_id):
                continue
            if time.time() - t_start > args.budget_s + FI_RESERVE_S \
                    or "timeout" in results["fi_warmup"].values():
                results["skipped"].append(f"{case.case_id} flashinfer")
                continue
            try:
                data = BatchData(case.batch(), device, dtype)
                for mode in ("serial", "pod"):
                    entry["variants"][f"flashinfer-{mode}"] = time_flashinfer(data, mode, timer)
                # kvtune's launches again, now that FlashInfer's JIT no longer loads the CPU:
                # the first pass over the cases ran beside the JIT's compilers, where a launch
                # that waits on the host (two launches of a split decode) can read slow
                # (session 17: serial 330.6 us then against FlashInfer's 180.8). The side by
                # side compares these with FlashInfer (AFTER_FI).
                for name, (pol, kw) in variants.items():
                    entry["variants"][name + AFTER_FI] = time_triton(
                        data, policies.get(pol, **kw), spec, timer)
                del data
            except Exception as exc:  # noqa: BLE001
                entry["flashinfer_error"] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
            summarize_case(entry, ceiling)
            torch.cuda.empty_cache()
            fi_us = {m: entry["variants"].get(f"flashinfer-{m}", {}).get("median_us", math.nan)
                     for m in ("serial", "pod")}
            log(f"{case.case_id}: flashinfer serial {fi_us['serial']:.1f}, pod {fi_us['pod']:.1f}"
                + "".join(f", {k} {r.get('median_us', float('nan')):.1f}"
                          for k, r in entry["variants"].items() if k.endswith(AFTER_FI)))
            save()
    # The prefill-only baseline is FlashInfer's BatchPrefill: only with its JIT built already.
    fi_ready = have_fi and results.get("fi_warmup", {}).get("prefill") == "ok"
    run_parity([p for p in parity_batches if p[0] != "decode-only"], results, device, dtype,
               spec, timer, fi_ready, over_budget, log, save)
    results["summary"] = summarize(results)
    results["wall_s"] = time.time() - t_start
    save()
    log(json.dumps(results["summary"], default=float))
    return 0


# Compiled-kernel correctness beyond the timed shape: head_dim 64/128/256, GQA groups 1..16,
# pages 1..128, speculative decodes, bf16/fp16, under the serial and sm-aware (%smid) schedules.
CHECKS = [
    # (num_qo_heads, num_kv_heads, head_dim, page_size, dtype, q_lens, kv_lens)
    (2, 2, 64, 1, "fp16", [1, 3, 100], [40, 77, 300]),
    (32, 4, 128, 16, "bf16", [8, 1, 700], [900, 5000, 1200]),
    (8, 2, 256, 128, "bf16", [1, 2, 130], [1000, 129, 400]),
    (16, 1, 128, 32, "fp16", [16, 1, 64], [2000, 3000, 64]),
]


def compiled_checks(device, spec, dry, log) -> list[dict]:
    out = []
    checks = CHECKS[:1] if dry else CHECKS
    for hq, hk, d, page, dt, q_lens, kv_lens in checks:
        shape = AttentionShape(num_qo_heads=hq, num_kv_heads=hk, head_dim=d, page_size=page,
                               dtype=dt)
        if dry:  # keep the interpreter quick
            q_lens, kv_lens = [1, 3, 20], [30, 17, 40]
        batch = AttentionBatch(q_lens, kv_lens, shape)
        data = BatchData(batch, device, torch.bfloat16 if dt == "bf16" else torch.float16)
        for name in ("hybrid-serial", "pod", "hybrid-fused", "partitioned", "colocated"):
            pol = policies.get(name) if name in ("hybrid-serial", "pod") else policies.get(
                "hybrid-parametric", schedule=name.replace("hybrid-", ""),
                min_tokens_per_cta=512, max_waves=4, min_prefill_split_tokens=128,
                prefill_split_cap_waves=8, decode_sm_share=0.1 if name == "partitioned" else 0,
                prefill_block_m=64 if name == "colocated" else 128)
            plan = pol.plan_hybrid(batch.q_lens, batch.kv_lens, shape, spec)
            launch = prepare_hybrid(plan, data.cache, batch.q_lens)
            ok, err, msg = checked(lambda: run_hybrid(
                launch, data.q, data.cache, out=torch.full_like(data.q, float("nan"))), data.ref)
            out.append({"shape": shape.to_dict(), "q_lens": q_lens, "kv_lens": kv_lens,
                        "policy": name, "schedule": plan.schedule, "ok": ok, "rel_error": err,
                        "message": msg, "max_splits": int(plan.splits.max())})
            log(f"check {name} {shape.to_dict()}: {'ok' if ok else 'FAILED ' + msg} ({err:.2e})")
    return out


def run_parity(batches, results, device, dtype, spec, timer, have_fi, over_budget, log,
               save) -> None:
    """Decode-only: the hybrid path (decode.py's launch through run_hybrid) against
    kernels/decode.py on the same decode plan. Prefill-only: the hybrid kernel against
    FlashInfer's BatchPrefill."""
    for kind, pb in batches:
        if over_budget():
            results["skipped"].append(f"parity {kind} B{pb.batch_size}")
            continue
        try:
            data = BatchData(pb, device, dtype)
            hyb = time_triton(data, policies.get("hybrid-serial"), spec, timer)
            row = {"kind": kind, "batch_size": pb.batch_size, "kv_len": int(pb.kv_lens[0]),
                   "q_len": int(pb.q_lens[0]), "hybrid": hyb}
            if kind == "decode-only":
                plan = policies.get("flashinfer-tensor-core").plan(pb.kv_lens, pb.shape, spec)
                launch = prepare_decode(plan, data.cache)
                q2 = data.q  # q_len 1: [B, H, D], the same rows
                ok, err, msg = checked(lambda: run_decode(
                    launch, q2, data.cache, out=torch.full_like(q2, float("nan"))), data.ref)
                base = {"ok": ok, "rel_error": err, "message": msg}
                if ok:
                    out = torch.empty_like(q2)
                    base.update(timer(lambda: run_decode(launch, q2, data.cache, out=out)))
                row["baseline"] = "kernels/decode.py (same plan)"
            else:
                base = time_flashinfer(data, "serial", timer) if have_fi else \
                    {"ok": False, "message": "flashinfer not available"}
                row["baseline"] = "flashinfer BatchPrefill"
            row["base"] = base
            if hyb.get("ok") and base.get("ok"):
                row["hybrid_over_base"] = hyb["median_us"] / base["median_us"]
            results["parity"].append(row)
            log(f"parity {kind} B{pb.batch_size}: hybrid {hyb.get('median_us', float('nan')):.1f}"
                f" us, base {base.get('median_us', float('nan')):.1f} us")
        except Exception as exc:  # noqa: BLE001
            results["parity"].append({"kind": kind, "error": f"{type(exc).__name__}: {exc}"})
            traceback.print_exc()
        save()


# Suffix of kvtune's launches timed again after FlashInfer's on a case (in the same process,
# with FlashInfer's JIT finished): the side by side with FlashInfer uses these where present.
AFTER_FI = "-after-fi"


def summarize_case(entry: dict, ceiling: float) -> None:
    v = entry["variants"]

    def us(name):
        r = v.get(name)
        return r["median_us"] if r and r.get("ok") and "median_us" in r else float("nan")

    def us_fi_side(name):
        """`name`'s time for the comparison with FlashInfer: the after-FlashInfer timing."""
        return us(name + AFTER_FI) if name + AFTER_FI in v else us(name)

    # Every Triton launch timed on this case, the tuned file's (`heuristic`) included: it is a
    # deployable plan like the fixed schedules (before the tenth session "best" left it out).
    triton_names = ["serial", "streams", "fused", "pod", "partitioned", "colocated", "tuned",
                    "heuristic"]
    best_name = min((n for n in triton_names if math.isfinite(us(n))), key=us, default=None)
    entry["best"] = best_name
    entry["best_us"] = us(best_name) if best_name else float("nan")
    pre, dec = us("prefill-alone"), us("decode-alone")
    entry["bound_us"] = max(pre, dec)
    entry["serial_us"] = us("serial")
    entry["best_speedup_vs_serial"] = entry["serial_us"] / entry["best_us"]
    entry["pod_speedup_vs_serial"] = entry["serial_us"] / us("pod")
    entry["tuned_speedup_vs_serial"] = entry["serial_us"] / us("tuned")
    entry["best_over_bound"] = entry["best_us"] / entry["bound_us"]
    entry["fi_pod_over_fi_serial"] = us("flashinfer-pod") / us("flashinfer-serial")
    best_fi_side = min((us_fi_side(n) for n in triton_names if math.isfinite(us_fi_side(n))),
                       default=float("nan"))
    entry["best_over_fi_pod"] = best_fi_side / us("flashinfer-pod")
    # The tuned heuristic (--heuristic) against serial and FlashInfer's POD on this case.
    entry["heuristic_speedup_vs_serial"] = entry["serial_us"] / us("heuristic")
    entry["heuristic_over_fi_pod"] = us_fi_side("heuristic") / us("flashinfer-pod")
    entry["serial_over_fi_serial"] = us_fi_side("serial") / us("flashinfer-serial")
    entry["heuristic_over_bound"] = us("heuristic") / entry["bound_us"]
    entry["best_bw_fraction"] = entry["min_bytes"] / (entry["best_us"] * 1e-6) / ceiling
    entry["best_tflops"] = entry["flops"] / (entry["best_us"] * 1e-6) / 1e12
    entry["prefill_alone_tflops"] = v.get("prefill-alone", {}).get("tflops", float("nan"))


def speedup_vs_serial(cases, name: str) -> float:
    """Geomean of serial / `name` over the cases where that variant ran and was checked."""
    return geomean([c["serial_us"] / c["variants"][name]["median_us"] for c in cases
                    if c.get("variants", {}).get(name, {}).get("ok")
                    and c["variants"][name].get("median_us")])


def summarize(results: dict) -> dict:
    cases = results["cases"]
    s = {
        "cases": len(cases),
        "geomean_best_speedup_vs_serial": geomean([c.get("best_speedup_vs_serial") for c in cases]),
        "min_best_speedup_vs_serial": min((c["best_speedup_vs_serial"] for c in cases
                                           if math.isfinite(c.get("best_speedup_vs_serial",
                                                                  float("nan")))),
                                          default=float("nan")),
        "geomean_tuned_speedup_vs_serial": geomean([c.get("tuned_speedup_vs_serial")
                                                    for c in cases]),
        "geomean_pod_speedup_vs_serial": geomean([c.get("pod_speedup_vs_serial") for c in cases]),
        "geomean_best_over_bound": geomean([c.get("best_over_bound") for c in cases]),
        "prefill_alone_tflops": [c.get("prefill_alone_tflops") for c in cases],
        "geomean_partitioned_speedup_vs_serial": speedup_vs_serial(cases, "partitioned"),
        "geomean_colocated_speedup_vs_serial": speedup_vs_serial(cases, "colocated"),
        "geomean_fi_pod_over_fi_serial": geomean([c.get("fi_pod_over_fi_serial") for c in cases]),
        "geomean_best_over_fi_pod": geomean([c.get("best_over_fi_pod") for c in cases]),
        "geomean_heuristic_speedup_vs_serial": speedup_vs_serial(cases, "heuristic"),
        "geomean_heuristic_over_fi_pod": geomean([c.get("heuristic_over_fi_pod") for c in cases]),
        "geomean_serial_over_fi_serial": geomean([c.get("serial_over_fi_serial") for c in cases]),
        "min_heuristic_speedup_vs_serial": min(
            (c["heuristic_speedup_vs_serial"] for c in cases
             if math.isfinite(c.get("heuristic_speedup_vs_serial", float("nan")))),
            default=float("nan")),
        "geomean_heuristic_over_bound": geomean([c.get("heuristic_over_bound") for c in cases]),
        "parity_hybrid_over_base": [p.get("hybrid_over_base") for p in results["parity"]],
        "checks_ok": sum(bool(c["ok"]) for c in results.get("check", [])),
        "checks_failed": sum(not c["ok"] for c in results.get("check", [])),
        "skipped": len(results["skipped"]),
    }
    s["targets"] = {
        "best >= 1.25x serial (geomean)": s["geomean_best_speedup_vs_serial"] >= 1.25,
        "never slower than serial by > 2%": s["min_best_speedup_vs_serial"] >= 1 / 1.02,
        "within 1.2x of max(prefill, decode) (geomean)": s["geomean_best_over_bound"] <= 1.2,
        "parity within 5%": all(p is not None and p <= 1.05
                                for p in s["parity_hybrid_over_base"]),
    }
    if math.isfinite(s["geomean_heuristic_speedup_vs_serial"]):
        # The same targets for what kvtune deploys: the tuned file alone (--heuristic).
        s["targets"].update({
            "heuristic >= 1.25x serial (geomean)": s["geomean_heuristic_speedup_vs_serial"] >= 1.25,
            "heuristic never slower than serial by > 2%":
                s["min_heuristic_speedup_vs_serial"] >= 1 / 1.02,
            "heuristic within 1.2x of max(prefill, decode) (geomean)":
                s["geomean_heuristic_over_bound"] <= 1.2,
        })
    return s


def markdown(results: dict) -> str:
    cols = ["serial", "streams", "fused", "pod", "partitioned", "colocated", "tuned",
            "heuristic", "flashinfer-serial",
            "flashinfer-pod",
            "prefill-alone", "decode-alone"]
    lines = [f"# bench_hybrid ({results['device']['name']}, timer: {results['timer']}, copy "
             f"{results['copy']['bytes_per_s'] / 1e12:.3f} TB/s)", "",
             "| case | prefill tok | decodes | max q | " + " | ".join(cols)
             + " | best | best/serial | best/bound | best BW frac | FI pod/FI serial "
             "| prefill TFLOP/s |",
             "|" + "---|" * (len(cols) + 10)]
    for c in results["cases"]:
        v = c["variants"]

        def cell(n):
            r = v.get(n)
            if r is None:
                return "-"
            if not r.get("ok"):
                return "FAIL" if "unsupported" not in r.get("message", "") else "n/a"
            return f"{r['median_us']:.1f}"

        lines.append(f"| {c['case_id']} | {c.get('prefill_tokens')} | {c.get('num_decodes')} | "
                     f"{c.get('max_q_len')} | " + " | ".join(cell(n) for n in cols)
                     + f" | {c.get('best')} | {c.get('best_speedup_vs_serial', float('nan')):.3f}x"
                     f" | {c.get('best_over_bound', float('nan')):.3f} | "
                     f"{c.get('best_bw_fraction', float('nan')):.2f} | "
                     f"{c.get('fi_pod_over_fi_serial', float('nan')):.3f} | "
                     f"{c.get('prefill_alone_tflops', float('nan')):.0f} |")
    lines += ["", "## parity", "", "| kind | B | kv_len | q_len | hybrid us | baseline | base us "
              "| hybrid/base |", "|---|---|---|---|---|---|---|---|"]
    for p in results["parity"]:
        if "error" in p:
            lines.append(f"| {p['kind']} | error: {p['error']} |")
            continue
        lines.append(f"| {p['kind']} | {p['batch_size']} | {p['kv_len']} | {p['q_len']} | "
                     f"{p['hybrid'].get('median_us', float('nan')):.1f} | {p['baseline']} | "
                     f"{p['base'].get('median_us', float('nan')):.1f} | "
                     f"{p.get('hybrid_over_base', float('nan')):.3f} |")
    if "summary" in results:
        lines += ["", "## summary", "", "```", json.dumps(results["summary"], indent=1,
                                                          default=float), "```"]
    if results.get("fi_warmup"):
        lines += ["", f"FlashInfer JIT (background builds): {results['fi_warmup']}"]
    if results["skipped"]:
        lines += ["", f"skipped (budget): {', '.join(results['skipped'])}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

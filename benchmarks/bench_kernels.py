"""GPU benchmark of the Triton decode kernels (kernels/decode.py): check, then time, then tabulate.

Not a test: it needs a CUDA GPU. One invocation does, in order,
  env      card, SMs, L2, versions, date;
  copy     the device-to-device copy bandwidth (bytes read + written) that is the ceiling;
  check    compiled-kernel correctness over small random cases (every schedule, head_dim 64/128/256,
           G 1..16, page sizes, bf16/fp16/fp32, both loop variants), batch invariance under
           fixed-split (torch.equal), and one batch whose K cache passes 2^31 elements;
  backend  harness.backends.triton end to end (verify, then measure) under each harness timer;
  configs  a sweep of stage-1 block sizes / warps / stages / register prefetch on a few batches;
  targets  the issue's table: default shape (32 q heads, 8 KV heads, head_dim 128, page 16,
           bf16), 262,144 tokens, uniform and skew80 at batch 16/64/256 under several policies.
Every timed configuration is verified against the float64 reference first. The config sweep
times with a fixed number of CUDA-event pairs (--reps) around one decode (stage 1 + merge), L2
flushed before each (harness.l2_cache.L2Flusher, outside the events); the targets table uses the
project timer, harness.timing.measure_callable (--timer, default auto: CUPTI where cupti-python
imports, else events; cold L2; nvbench's stopping rule), and records which timer ran.

Usage (from the repository root):
  PYTHONPATH=$PWD python benchmarks/bench_kernels.py
      [--sections env,copy,check,backend,configs,targets] [--out DIR] [--reps 30] [--timer auto]
Writes results.json and a markdown table to --out (default: $OUT or ./bench_out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import os
import sys
import time
import traceback

import numpy as np
import torch

from kvtune.kernels.decode import KernelConfig, default_config, prepare_decode, run_decode
from kvtune.kernels.paged import PagedKVCache, make_queries
from kvtune.kernels.plan import AttentionShape, build_plan
from kvtune.kernels.reference import decode_reference, relative_error
from kvtune.workloads.distributions import fixed_total_kv_lens

TOTAL_TOKENS = 262_144
DEFAULT_SHAPE = AttentionShape(num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16)
BOUND = {torch.bfloat16: 2e-2, torch.float16: 2e-2, torch.float32: 1e-5}


# ------------------------------------------------------------------------------------ timing

class Timer:
    """Median of CUDA-event pairs, L2 flushed before each iteration (outside the events) with the
    project's flusher (2 x L2 written, then read back so no dirty lines are left behind)."""

    name = "events-fixed-reps"

    def __init__(self, reps: int, warmup: int = 3):
        from kvtune.harness.l2_cache import L2Flusher

        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 50 << 20) or (50 << 20))
        self.flusher = L2Flusher(l2, "cuda")
        self.reps, self.warmup = reps, warmup

    def __call__(self, fn) -> dict:
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for i in range(self.reps):
            self.flusher.flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        us = np.array([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])
        return {"median_us": float(np.median(us)), "p10_us": float(np.percentile(us, 10)),
                "p90_us": float(np.percentile(us, 90)), "samples": int(us.size)}


class ProjectTimer:
    """kvtune.harness.timing.measure_callable: the timer every kvtune measurement uses (cold L2)."""

    def __init__(self, timer: str = "auto"):
        self.timer = timer
        self.used = None

    def __call__(self, fn) -> dict:
        from kvtune.harness.timing import measure_callable

        r = measure_callable(fn, timer=self.timer, cold_l2=True, telemetry=False)
        self.used = r.timer_used
        return {"median_us": r.median_us, "p10_us": r.p10_us, "p90_us": r.p90_us,
                "samples": r.samples, "timer": r.timer_used, "noise_met": r.noise_met}


def copy_bandwidth(timer: Timer, nbytes: int = 4 << 30) -> dict:
    """Device-to-device copy of nbytes (random data), counted as read + written bytes."""
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def copy():
        dst.copy_(src)

    r = timer(copy)
    ok = bool(torch.equal(dst[: 1 << 20], src[: 1 << 20]))
    return {"bytes": 2 * nbytes, "median_us": r["median_us"], "p10_us": r["p10_us"],
            "p90_us": r["p90_us"], "bytes_per_s": 2 * nbytes / (r["median_us"] * 1e-6), "ok": ok}


# ------------------------------------------------------------------------------------ helpers

def min_bytes(kv_lens, shape: AttentionShape) -> int:
    kv = int(np.sum(kv_lens)) * shape.num_kv_heads * 2 * shape.head_dim * 2
    return kv + 2 * len(kv_lens) * shape.num_qo_heads * shape.head_dim * 2


def checked_run(launch, q, cache, ref, dtype) -> tuple[float, bool]:
    out = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=out)
    torch.cuda.synchronize()
    err = relative_error(out, ref)
    return err, bool(math.isfinite(err) and err <= BOUND[dtype] and not out.isnan().any())


def device_spec():
    from kvtune.harness.device import live_device

    return live_device()


def policy_plan(name: str, kv_lens, shape, device, **params):
    from kvtune.kernels import policies

    return policies.get(name, **params).plan(kv_lens, shape, device)


# ------------------------------------------------------------------------------------ sections

def section_env() -> dict:
    props = torch.cuda.get_device_properties(0)
    import triton

    return {"gpu": props.name, "sm_count": props.multi_processor_count,
            "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
            "memory_bytes": int(props.total_memory), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda,
            "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def section_check(log) -> list[dict]:
    """Compiled kernels against the reference on small random cases (fresh inputs each)."""
    rows = []
    rng = np.random.default_rng(7)
    schedules = ["static", "static-heavy-first", "persistent-round-robin", "persistent-heavy-first"]
    cases = [
        # (hq, hkv, d, page, dtype, prefetch)
        (32, 8, 128, 16, torch.bfloat16, False),
        (32, 8, 128, 16, torch.float16, False),
        (8, 8, 128, 16, torch.bfloat16, False),    # G = 1
        (64, 4, 128, 16, torch.bfloat16, False),   # G = 16
        (28, 4, 128, 1, torch.bfloat16, False),    # G = 7, page 1
        (32, 8, 64, 128, torch.bfloat16, False),
        (16, 2, 256, 32, torch.bfloat16, False),
        (32, 8, 128, 16, torch.bfloat16, True),
        (8, 8, 128, 2, torch.float16, True),
        (32, 8, 128, 16, torch.float32, False),
    ]
    for i, (hq, hkv, d, page, dtype, prefetch) in enumerate(cases):
        shape = AttentionShape(num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page)
        kv = rng.integers(1, 3000, size=int(rng.integers(1, 12)))
        kv[0] = 1
        cache = PagedKVCache.from_lengths(kv, shape, device="cuda", dtype=dtype, seed=100 + i)
        cache.fill_unused_slots(float("nan"))
        q = make_queries(len(kv), shape, device="cuda", dtype=dtype, seed=100 + i)
        ref = decode_reference(q, cache)
        base = default_config(d, dtype, page)
        stages = 1 if prefetch else base.num_stages
        cfg = KernelConfig(base.block_n, base.num_warps, stages, prefetch)
        for sched in schedules:
            for chunk in (page, 4 * page * 16, 1 << 20):
                plan = build_plan(kv, chunk, num_kv_heads=hkv, page_size=page, schedule=sched,
                                  grid_size=37)
                launch = prepare_decode(plan, cache, config=cfg)
                err, ok = checked_run(launch, q, cache, ref, dtype)
                if plan.schedule == "persistent-heavy-first":
                    _, ok2 = checked_run(launch, q, cache, ref, dtype)  # counter reset
                    ok = ok and ok2 and int(launch.counter.abs().sum()) == 0
                rows.append({"case": i, "hq": hq, "hkv": hkv, "d": d, "page": page,
                             "dtype": str(dtype), "prefetch": prefetch, "schedule": sched,
                             "chunk": chunk, "rel_error": err, "ok": ok})
                if not ok:
                    log(f"CHECK FAILED {rows[-1]}")
    # Batch invariance: the first requests of two batches, fixed-split 2048 tokens.
    shape = DEFAULT_SHAPE
    kv_a = np.array([5000, 70, 12000, 2049, 1])
    kv_b = np.concatenate([kv_a, rng.integers(1, 20000, size=40)])
    outs = []
    for kv in (kv_a, kv_b):
        cache = PagedKVCache.from_lengths(kv, shape, device="cuda", seed=3)
        # same data for the shared requests: copy batch a's pages into batch b's table
        outs.append((cache, kv))
    cache_a, cache_b = outs[0][0], outs[1][0]
    for b in range(len(kv_a)):
        pa, pb = cache_a.request_pages(b), cache_b.request_pages(b)
        cache_b.k_pages[pb] = cache_a.k_pages[pa]
        cache_b.v_pages[pb] = cache_a.v_pages[pa]
    q_b = make_queries(len(kv_b), shape, device="cuda", seed=4)
    q_a = q_b[: len(kv_a)].clone()
    res = []
    for sched in schedules:
        plan_a = build_plan(kv_a, 2048, num_kv_heads=8, page_size=16, schedule=sched, grid_size=50)
        plan_b = build_plan(kv_b, 2048, num_kv_heads=8, page_size=16, schedule=sched, grid_size=50)
        o_a = run_decode(prepare_decode(plan_a, cache_a), q_a, cache_a)
        o_b = run_decode(prepare_decode(plan_b, cache_b), q_b, cache_b)
        same = bool(torch.equal(o_a, o_b[: len(kv_a)]))
        res.append(same)
        rows.append({"case": "batch-invariance", "schedule": sched, "ok": same})
        if not same:
            log(f"BATCH INVARIANCE FAILED ({sched})")
    del cache_a, cache_b
    # Past 2^31 elements: three 1M-token requests, 4 KV heads of 256 -> 3 x 2^30 elements per K.
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=4, head_dim=256, page_size=64)
    kv = np.array([1 << 20, 1 << 20, (1 << 20) - 5])
    cache = PagedKVCache.from_lengths(kv, shape, device="cuda", seed=9)
    q = make_queries(3, shape, device="cuda", seed=9)
    for sched in ("static", "persistent-heavy-first"):
        plan = build_plan(kv, 1 << 16, num_kv_heads=4, page_size=64, schedule=sched, grid_size=264)
        out = torch.full_like(q, float("nan"))
        run_decode(prepare_decode(plan, cache), q, cache, out=out)
        errs = []
        for b in range(3):  # float32 reference per request (float64 would need 16 GB per request)
            k, v = cache.request_kv(b)
            qb = q[b].float().reshape(4, 2, 256)
            s = torch.einsum("kgd,lkd->kgl", qb, k.float()) / 16.0
            ref_b = torch.einsum("kgl,lkd->kgd", torch.softmax(s, -1), v.float()).reshape(8, 256)
            errs.append(relative_error(out[b], ref_b))
            del k, v, s
        ok = all(e <= 2e-2 for e in errs)
        rows.append({"case": "int64-offsets", "schedule": sched, "rel_error": max(errs), "ok": ok})
        if not ok:
            log(f"INT64 CASE FAILED {sched} {errs}")
    del cache
    torch.cuda.empty_cache()
    return rows


def time_plan(plan, cache, q, ref, timer, config=None) -> dict:
    launch = prepare_decode(plan, cache, config=config)
    err, ok = checked_run(launch, q, cache, ref, cache.dtype)
    row = {"rel_error": err, "ok": ok, "num_items": plan.num_items, "num_tasks": plan.num_tasks,
           "grid": plan.grid_size, "schedule": plan.schedule,
           "max_splits": int(plan.splits.max()), "split_requests": plan.num_split_requests,
           "launches": launch.num_launches, "ctas_per_sm": plan.ctas_per_sm,
           "config": str(launch.config)}
    if not ok:
        return row
    out = torch.empty_like(q)
    row.update(timer(lambda: run_decode(launch, q, cache, out=out)))
    return row


def make_batch(dist: str, batch: int, shape=DEFAULT_SHAPE, seed=0):
    if dist == "uniform":
        kv = fixed_total_kv_lens(batch, TOTAL_TOKENS, ())
    else:
        kv = fixed_total_kv_lens(batch, TOTAL_TOKENS, (80,))
    cache = PagedKVCache.from_lengths(kv, shape, device="cuda", seed=seed)
    q = make_queries(batch, shape, device="cuda", seed=seed)
    ref = decode_reference(q, cache)
    return kv, cache, q, ref


SWEEP = {
    128: [KernelConfig(64, 4, 3), KernelConfig(128, 4, 2), KernelConfig(128, 8, 2),
          KernelConfig(64, 4, 1, prefetch=True), KernelConfig(64, 8, 1, prefetch=True),
          KernelConfig(128, 8, 1, prefetch=True), KernelConfig(32, 4, 1, prefetch=True)],
    64: [KernelConfig(128, 4, 2), KernelConfig(128, 8, 2), KernelConfig(256, 8, 2),
         KernelConfig(64, 4, 1, prefetch=True), KernelConfig(128, 8, 1, prefetch=True)],
    256: [KernelConfig(64, 8, 2), KernelConfig(32, 4, 2), KernelConfig(64, 4, 2),
          KernelConfig(32, 4, 1, prefetch=True), KernelConfig(64, 8, 1, prefetch=True)],
}
SWEEP_BATCHES = {
    128: [("uniform", 16, "no-split", {}), ("uniform", 64, "fa3", {}),
          ("uniform", 64, "fixed-split", {"chunk_tokens": 2048}),
          ("skew80", 64, "fixed-split", {"chunk_tokens": 2048}),
          ("skew80", 256, "fixed-split", {"chunk_tokens": 2048})],
    64: [("uniform", 16, "no-split", {}), ("uniform", 64, "fixed-split", {"chunk_tokens": 2048})],
    256: [("uniform", 16, "no-split", {}), ("uniform", 64, "fixed-split", {"chunk_tokens": 2048})],
}


def section_configs(timer, ceiling, log) -> list[dict]:
    """Every sweep config on every sweep batch, per head_dim (32 q / 8 KV heads, page 16)."""
    from kvtune.kernels.merge import launch_merge

    rows = []
    device = device_spec()
    for d, batches in SWEEP_BATCHES.items():
        shape = AttentionShape(num_qo_heads=32, num_kv_heads=8, head_dim=d, page_size=16)
        for dist, batch, policy, params in batches:
            kv, cache, q, ref = make_batch(dist, batch, shape)
            plan = policy_plan(policy, kv, shape, device, **params)
            for cfg in SWEEP[d]:
                try:
                    r = time_plan(plan, cache, q, ref, timer, cfg)
                except Exception as exc:  # noqa: BLE001 - a failing config is a result
                    r = {"ok": False, "error": repr(exc)[:300]}
                r.update({"dist": dist, "batch": batch, "policy": policy, "head_dim": d,
                          "config": cfg.__dict__})
                if r.get("median_us"):
                    r["frac_of_copy"] = min_bytes(kv, shape) / (r["median_us"] * 1e-6) / ceiling
                rows.append(r)
                log(f"config d={d} {dist:8s} B={batch:4d} {policy:12s} bn={cfg.block_n:3d} "
                    f"w={cfg.num_warps} st={cfg.num_stages} pf={int(cfg.prefetch)} -> "
                    f"{r.get('median_us', float('nan')):8.1f} us  "
                    f"frac {r.get('frac_of_copy', 0):.3f}"
                    f"  err {r.get('rel_error', float('nan')):.2e} {r.get('error', '')}")
            if d == 128 and dist == "uniform" and policy == "fixed-split":
                # The merge alone: what stage 2 costs on a batch where every request is split.
                launch = prepare_decode(plan, cache)
                out = torch.empty_like(q)
                run_decode(launch, q, cache, out=out)
                r = timer(functools.partial(launch_merge, launch.partial_out,
                                            launch.partial_lse, launch.merge_requests,
                                            launch.merge_row0, launch.merge_count, out))
                r.update({"dist": dist, "batch": batch, "policy": policy, "head_dim": d,
                          "config": "merge-only"})
                rows.append(r)
                log(f"merge only d={d} {dist} B={batch}: {r['median_us']:.1f} us")
            del cache, q, ref
            torch.cuda.empty_cache()
    return rows


TARGET_POLICIES = [
    ("fixed-split-2048", "fixed-split", {"chunk_tokens": 2048}),
    ("fixed-split-2048-phf", "fixed-split",
     {"chunk_tokens": 2048, "schedule": "persistent-heavy-first"}),
    ("no-split", "no-split", {}),
    ("fa3", "fa3", {}),
    ("fa3-2cta", "fa3", {"ctas_per_sm": 2}),
    ("flashinfer-tensor-core", "flashinfer-tensor-core", {}),
]


def section_targets(timer, ceiling, log) -> list[dict]:
    rows = []
    device = device_spec()
    for dist, batch in (("uniform", 16), ("uniform", 64), ("uniform", 256),
                        ("skew80", 16), ("skew80", 64), ("skew80", 256)):
        kv, cache, q, ref = make_batch(dist, batch)
        for label, policy, params in TARGET_POLICIES:
            plan = policy_plan(policy, kv, DEFAULT_SHAPE, device, **params)
            r = time_plan(plan, cache, q, ref, timer)
            r.update({"dist": dist, "batch": batch, "policy": label,
                      "min_bytes": min_bytes(kv, DEFAULT_SHAPE)})
            if r.get("median_us"):
                r["bytes_per_s"] = r["min_bytes"] / (r["median_us"] * 1e-6)
                r["frac_of_copy"] = r["bytes_per_s"] / ceiling
            rows.append(r)
            log(f"target {dist:8s} B={batch:4d} {label:24s} items {r['num_items']:5d} "
                f"-> {r.get('median_us', float('nan')):8.1f} us  "
                f"frac {r.get('frac_of_copy', 0):.3f}"
                f"  err {r['rel_error']:.2e} ok={r['ok']}")
        del cache, q, ref
        torch.cuda.empty_cache()
    return rows


def section_backend(log) -> list[dict]:
    """The harness backend end to end on one batch (skew80, B=64, fixed-split 2048): verify, then
    measure under each timer the harness offers here, cold L2, plus events with a hot L2."""
    from kvtune.harness.backends.triton import TritonBackend
    from kvtune.workloads.batch import DecodeBatch

    batch = DecodeBatch(fixed_total_kv_lens(64, TOTAL_TOKENS, (80,)), DEFAULT_SHAPE, seed=5)
    rows = []
    for timer, cold in (("auto", True), ("events", True), ("graph", True), ("events", False)):
        backend = TritonBackend(timer=timer, cold_l2=cold)
        plan = policy_plan("fixed-split", batch.kv_lens, DEFAULT_SHAPE, backend.device,
                           chunk_tokens=2048)
        ver = backend.verify(batch, plan)
        meas = backend.measure(batch, plan)
        backend.close()
        log(f"backend timer={timer} cold={cold}: {ver.message} | {meas.status} "
            f"{meas.latency_us:.1f} us p10-p90 {meas.p10_us:.1f}-{meas.p90_us:.1f} "
            f"{meas.achieved_bytes_per_s / 1e12:.3f} TB/s timer_used={meas.timer} "
            f"samples={meas.samples} noise_met={meas.noise_met} {meas.message[:80]}")
        rows.append({"timer": timer, "cold_l2": cold, "verification": ver.__dict__,
                     "measurement": meas.to_row()})
    return rows


def markdown_table(rows) -> str:
    header = ("| dist | B | policy | items | grid | launches | median us | p10-p90 us | TB/s "
              "| of copy | rel err |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['dist']} | {r['batch']} | {r['policy']} | {r['num_items']} | {r['grid']} | "
            f"{r['launches']} | "
            f"{r.get('median_us', float('nan')):.1f} | {r.get('p10_us', float('nan')):.1f}-"
            f"{r.get('p90_us', float('nan')):.1f} | "
            f"{r.get('bytes_per_s', float('nan')) / 1e12:.2f} | "
            f"{r.get('frac_of_copy', float('nan')):.3f} | {r['rel_error']:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="env,copy,check,backend,configs,targets")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--reps", type=int, default=30, help="timed runs per config in the sweep")
    ap.add_argument("--timer", default="auto", help="kvtune.harness.timing timer for the targets table")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_kernels: no CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    sections = args.sections.split(",")
    log_path = os.path.join(args.out, "bench_log.txt")

    def log(msg):
        print(msg, flush=True)
        with open(log_path, "a") as f:
            f.write(msg + "\n")

    results = {"command": " ".join(sys.argv)}
    t0 = time.time()
    timer = Timer(args.reps)
    results["env"] = section_env()
    log(json.dumps(results["env"]))
    ceiling = float("nan")
    if "copy" in sections:
        results["copy"] = copy_bandwidth(timer)
        ceiling = results["copy"]["bytes_per_s"]
        log(f"copy: {ceiling / 1e12:.3f} TB/s (read+write) {results['copy']}")

    def save():
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)

    project_timer = ProjectTimer(args.timer)
    for name, fn in (("check", lambda: section_check(log)),
                     ("backend", lambda: section_backend(log)),
                     ("configs", lambda: section_configs(timer, ceiling, log)),
                     ("targets", lambda: section_targets(project_timer, ceiling, log))):
        if name not in sections:
            continue
        ts = time.time()
        try:
            results[name] = fn()
        except Exception:  # noqa: BLE001 - keep the other sections
            results[name + "_error"] = traceback.format_exc()
            log(traceback.format_exc())
        log(f"section {name}: {time.time() - ts:.1f} s")
        save()
    if "check" in results:
        bad = [r for r in results["check"] if not r["ok"]]
        log(f"check: {len(results['check']) - len(bad)}/{len(results['check'])} ok")
    if "targets" in results:
        table = markdown_table(results["targets"])
        with open(os.path.join(args.out, "targets.md"), "w") as f:
            f.write(table + "\n")
        log(table)
    log(f"total {time.time() - t0:.1f} s")
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())

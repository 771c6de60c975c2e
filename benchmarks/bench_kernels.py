"""GPU benchmark of the Triton decode kernels (kernels/decode.py): check, then time, then tabulate.

Not a test: it needs a CUDA GPU. One invocation does, in order,
  env      card, SMs, L2, versions, date;
  copy     the device-to-device copy bandwidth (bytes read + written) that is the ceiling;
  check    compiled-kernel correctness over small random cases (every schedule, head_dim 64/128/256,
           G 1..16, page sizes, bf16/fp16/fp32 and fp8 e4m3 KV, both loop variants), batch
           invariance under
           fixed-split (torch.equal), fp8 with bf16 queries beyond fp16's range (x 2^20,
           x 2^-30), and one batch whose K cache passes 2^31 elements;
  backend  harness.backends.triton end to end (verify, then measure) under each harness timer;
  configs  a sweep of stage-1 block sizes / warps / stages / register prefetch on a few batches;
  targets  the issue's table: default shape (32 q heads, 8 KV heads, head_dim 128, page 16,
           bf16), 262,144 tokens, uniform and skew80 at batch 16/64/256 under several policies;
  shapes   the shape matrix (issue 16) against FlashInfer's tensor-core decode running the same
           plan: named shapes (llama3-8b, llama3-70b-tp8, qwen2.5-7b, yi-6b, mha-32, g16, hd64,
           hd256), KV bf16/fp16/fp8_e4m3, pages 1/16/64, uniform and skew80, batch 8/64/256,
           262,144 tokens, plans fixed-2048 and balanced-2x (one chunk per batch giving about two
           programs per SM, the shape of a tuned plan). Default: one factor at a time from
           llama3-8b / bf16 / page 16 (13 variants, 156 cases); --full: the whole product.
           Both backends verify against the float64 reference before timing (events, cold L2,
           a short stopping rule). Per case: Triton us, FlashInfer us, their ratio, each one's
           fraction of the copy bandwidth (fp8 counted at 1 byte per element), programs per SM;
           with --read-ceiling also the plan's paged-read ceiling (benchmarks/paged_read.py) and
           the Triton kernel's share of it; written to shapes.md and shapes.csv;
  shape-configs  every candidate of kernels.decode_config.CANDIDATES on the few-programs shapes
           (llama3-70b-tp8, g16) and fp8 (llama3-8b, llama3-70b-tp8, hd64, hd256), verified then
           timed, and per CONFIG_TABLE key the candidate with the lowest summed time (the table
           entry the run suggests); --config-kv fp8 keeps only the fp8 shapes (and the fp8
           checks of `check`).
Every timed configuration is verified against the float64 reference first. The config sweep
times with a fixed number of CUDA-event pairs (--reps) around one decode (stage 1 + merge), L2
flushed before each (harness.l2_cache.L2Flusher, outside the events), behind a GPU lead-in that
covers the host's launches (harness.timers_cuda.HostPace); the targets table uses the
project timer, harness.timing.measure_callable (--timer, default auto: CUPTI where cupti-python
imports, else events; cold L2; nvbench's stopping rule), and records which timer ran.

Usage (from the repository root):
  PYTHONPATH=$PWD python benchmarks/bench_kernels.py
      [--sections env,copy,copy-sizes,check,backend,configs,targets,shapes,shape-configs]
      [--out DIR]
      [--reps 30] [--timer auto] [--full] [--variants 0,3] [--total-tokens N]
      [--time-limit-s S] [--config-kv fp8] [--read-ceiling]
  python benchmarks/bench_kernels.py --dry-run --out DIR   # CPU: interpreter, tiny batch
Writes results.json and markdown tables to --out (default: $OUT or ./bench_out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import itertools
import json
import math
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from kvtune.harness.timers_cuda import HostPace, paced_chunks
from kvtune.kernels.decode import (
    KernelConfig,
    default_config,
    launch_config,
    prepare_decode,
    run_decode,
)
from kvtune.kernels.paged import KV_TORCH_DTYPES, PagedKVCache, make_queries
from kvtune.kernels.plan import (DTYPE_BYTES, LAUNCH_ORDERS, AttentionShape, build_plan,
                                 product_launch_order)
from kvtune.kernels.reference import decode_reference, relative_error
from kvtune.workloads.distributions import fixed_total_kv_lens

TOTAL_TOKENS = 262_144
DEFAULT_SHAPE = AttentionShape(num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16)
BOUND = {torch.bfloat16: 2e-2, torch.float16: 2e-2, torch.float32: 1e-5}


# ------------------------------------------------------------------------------------ timing

class Timer:
    """Median of CUDA-event pairs, L2 flushed before each iteration (outside the events) with the
    project's flusher (2 x L2 written, then read back so no dirty lines are left behind), under
    the interference guard (quiet_ratio and interference_retries in the result).

    The pairs are enqueued behind a GPU sleep that covers the host's enqueue of all of them
    (harness/timers_cuda.HostPace, sized from the warm-up's pace): before the twenty-second
    session they were not, and where the host took longer to enqueue an iteration than the GPU
    to run it (llama3-70b-tp8 decodes: 100-270 us of host time against 35-70 us) the pairs
    measured the host (docs/PERFORMANCE.md, twenty-second session)."""

    name = "events-fixed-reps-paced"

    def __init__(self, reps: int, warmup: int = 3):
        from kvtune.harness.l2_cache import L2Flusher

        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 50 << 20) or (50 << 20))
        self.flusher = L2Flusher(l2, "cuda")
        self.reps, self.warmup = reps, warmup
        self.pace = HostPace()

    def __call__(self, fn) -> dict:
        """Median of the event pairs, bracketed by the interference guard's latency probes and
        taken again while they read disturbed (harness/interference.py)."""
        from kvtune.harness.interference import guard_for, measure_quietly

        result, outcome = measure_quietly(lambda: self.once(fn), guard_for(),
                                          key=lambda r: r["median_us"])
        result.update(outcome.to_dict())
        return result

    def once(self, fn) -> dict:
        """One unguarded measurement: warm-up (flush and fn, the host's pace taken), then the
        event pairs behind the lead-in (median, p10, p90 us; host_us: the host's enqueue time
        per iteration)."""
        t0 = time.perf_counter()
        for _ in range(self.warmup):
            self.flusher.flush()
            fn()
        self.pace.learn(time.perf_counter() - t0, self.warmup)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for chunk in paced_chunks(self.reps):  # as many as the launch queue holds ahead
            torch.cuda.synchronize()
            self.pace.lead_in(len(chunk))
            t0 = time.perf_counter()
            for i in chunk:
                self.flusher.flush()
                starts[i].record()
                fn()
                ends[i].record()
            self.pace.learn(time.perf_counter() - t0, len(chunk))
        torch.cuda.synchronize()
        return {**event_stats(starts, ends), "host_us": self.pace.host_us}


def event_stats(starts, ends) -> dict:
    """median, p10 and p90 (us) and the count of CUDA-event pairs (recorded and synchronised)."""
    us = np.array([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])
    return {"median_us": float(np.median(us)), "p10_us": float(np.percentile(us, 10)),
            "p90_us": float(np.percentile(us, 90)), "samples": int(us.size)}


def wall_clock_once(fn) -> dict:
    """--dry-run's stand-in for a GPU timer: one call under the interpreter, wall clock (not a
    measurement)."""
    t0 = time.perf_counter()
    fn()
    return {"median_us": (time.perf_counter() - t0) * 1e6}


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


# Bytes moved (read + written) by the copies of section copy-sizes: from the smallest matrix
# kernel (llama3-70b-tp8 fp8 at 196,608 tokens reads ~50 MB) to the 8 GiB of the ceiling copy.
COPY_SIZES_BYTES = tuple(int(m) << 20 for m in (16, 32, 64, 96, 128, 192, 256, 384, 512, 1024,
                                               2048, 8192))


def section_copy_sizes(timer: Timer, ceiling_bytes_per_s: float, log) -> list[dict]:
    """The device copy at each byte count of COPY_SIZES_BYTES (read + written, cold L2).

    A decode kernel's copy fraction is counted against the 8 GiB copy; a copy of the kernel's
    own byte count shows how much of the gap a kernel of that size cannot close by streaming
    better (launch, ramp-up and the last wave's tail are paid by a copy too)."""
    rows = []
    for moved in COPY_SIZES_BYTES:
        r = copy_bandwidth(timer, moved // 2)
        r["fraction_of_ceiling"] = r["bytes_per_s"] / ceiling_bytes_per_s
        rows.append(r)
        log(f"copy {moved >> 20:6d} MiB moved: {r['median_us']:9.1f} us "
            f"{r['bytes_per_s'] / 1e12:.3f} TB/s = {r['fraction_of_ceiling']:.3f} of the ceiling"
            f"{'' if r['ok'] else ' (copy check FAILED)'}")
    return rows


# ------------------------------------------------------------------------------------ helpers

def min_bytes(kv_lens, shape: AttentionShape) -> int:
    """K and V once (1 byte per element for fp8), q read and out written once."""
    kv = int(np.sum(kv_lens)) * shape.num_kv_heads * shape.kv_bytes_per_token_per_head
    return kv + 2 * len(kv_lens) * shape.num_qo_heads * shape.head_dim * DTYPE_BYTES[shape.dtype]


def checked_run(launch, q, cache, ref, dtype) -> tuple[float, bool]:
    out = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=out)
    if out.is_cuda:
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

def sections_need_ceiling(sections) -> bool:
    """Whether a chosen section counts against the copy ceiling (so section copy runs first)."""
    return bool({"copy", "copy-sizes", "shapes", "shape-configs"} & set(sections))


def section_env() -> dict:
    props = torch.cuda.get_device_properties(0)
    import triton

    return {"gpu": props.name, "sm_count": props.multi_processor_count,
            "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
            "memory_bytes": int(props.total_memory), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda,
            "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def section_check(log, kv_only: str | None = None) -> list[dict]:
    """Compiled kernels against the reference on small random cases (fresh inputs each).

    kv_only: None for every case; a KV type (bf16, fp16, fp8_e4m3; --config-kv) for only the
    cases and batch-invariance checks of that cache type (fp8: also the query-range check; the
    2^31-element case is a bf16 cache and is skipped)."""
    rows = []
    rng = np.random.default_rng(7)
    schedules = ["static", "static-heavy-first", "persistent-round-robin", "persistent-heavy-first"]
    cases = [
        # (hq, hkv, d, page, dtype, prefetch[, kv_dtype])
        (8, 1, 128, 16, torch.bfloat16, False, "fp8_e4m3"),  # fp16 products, bf16 q scaled
        (8, 1, 128, 16, torch.bfloat16, False),     # one KV head: page-ahead bn128-w8-s3
        (16, 1, 64, 64, torch.float16, False),      # page-ahead at head_dim 64
        (8, 1, 256, 1, torch.bfloat16, False),      # page-ahead at head_dim 256, page 1
        (16, 8, 256, 64, torch.float16, False, "fp8_e4m3"),
        (28, 4, 128, 1, torch.bfloat16, False, "fp8_e4m3"),  # G = 7: "many-large-group"
        (32, 8, 128, 16, torch.bfloat16, False),
        (32, 8, 128, 16, torch.float16, False),
        (8, 8, 128, 16, torch.bfloat16, False),    # G = 1
        (64, 4, 128, 16, torch.bfloat16, False),   # G = 16: page-ahead bn64-w4-s4
        (28, 4, 128, 1, torch.bfloat16, False),    # G = 7, page 1
        (32, 8, 64, 128, torch.bfloat16, False),
        (16, 2, 256, 32, torch.bfloat16, False),
        (32, 8, 128, 16, torch.bfloat16, True),
        (8, 8, 128, 2, torch.float16, True),
        (32, 8, 128, 16, torch.float32, False),
        (64, 4, 128, 16, torch.bfloat16, False, "fp8_e4m3"),  # G = 16 on fp8
        (8, 8, 128, 2, torch.float16, True, "fp8_e4m3"),  # register prefetch on fp8
    ]
    for i, (hq, hkv, d, page, dtype, prefetch, *kv_dtype) in enumerate(cases):
        q_name = "fp16" if dtype == torch.float16 else "bf16"  # float32 runs on a bf16 shape
        shape = AttentionShape(num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                               dtype=q_name, kv_dtype=kv_dtype[0] if kv_dtype else None)
        if kv_only is not None and shape.kv_dtype != kv_only:
            continue
        kv = rng.integers(1, 3000, size=int(rng.integers(1, 12)))
        kv[0] = 1
        cache = PagedKVCache.from_lengths(kv, shape, device="cuda", dtype=dtype, seed=100 + i)
        cache.fill_unused_slots(float("nan"))
        q = make_queries(len(kv), shape, device="cuda", dtype=dtype, seed=100 + i)
        ref = decode_reference(q, cache)
        # The table's configuration for this shape (one KV head: a page-ahead variant), or the
        # register-prefetch loop at the table's block size.
        base = default_config(d, cache.kv_dtype, page, None, num_kv_heads=hkv,
                              group_size=hq // hkv)
        cfg = (KernelConfig(base.block_n, base.num_warps, 1, prefetch=True) if prefetch
               else base)
        # fp8 caches: the table's configuration (V read as element pairs, -vp, where it is
        # page-ahead) and the plain loop; with V widened (-vw) too. The inline asm of -vp and -vw
        # runs only in the compiled kernel.
        configs = [cfg]
        if cache.is_fp8:
            plain = replace(cfg, v_pairs=False)
            configs = [cfg, replace(plain, v_widen=True)] + ([plain] if cfg.v_pairs else [])
        for cfg, sched in itertools.product(configs, schedules):
            for chunk in (page, 4 * page * 16, 1 << 20):
                plan = build_plan(kv, chunk, num_kv_heads=hkv, page_size=page, schedule=sched,
                                  grid_size=37)
                launch = prepare_decode(plan, cache, config=cfg)
                err, ok = checked_run(launch, q, cache, ref, dtype)
                if plan.schedule == "persistent-heavy-first":
                    _, ok2 = checked_run(launch, q, cache, ref, dtype)  # counter reset
                    ok = ok and ok2 and int(launch.counter.abs().sum()) == 0
                rows.append({"case": i, "hq": hq, "hkv": hkv, "d": d, "page": page,
                             "dtype": str(dtype), "kv_dtype": shape.kv_dtype,
                             "config": cfg.label(), "schedule": sched,
                             "chunk": chunk, "rel_error": err, "ok": ok})
                if not ok:
                    log(f"CHECK FAILED {rows[-1]}")
    for kv_dtype in ("bf16", "fp8_e4m3"):
        if kv_only in (None, kv_dtype):
            rows += _batch_invariance(kv_dtype, rng, schedules, log)
    if kv_only in (None, "fp8_e4m3"):
        rows += _fp8_query_range(log)
    if kv_only in (None, "bf16"):
        rows += _int64_offsets(log)
    torch.cuda.empty_cache()
    return rows


def _batch_invariance(kv_dtype: str, rng, schedules, log) -> list[dict]:
    """The first requests of two batches, fixed-split 2048 tokens, must give the same bits (fp8:
    both caches quantised with the same fixed scales, as a serving engine's layer keeps them)."""

    rows = []
    shape = replace(DEFAULT_SHAPE, kv_dtype=kv_dtype)
    scales = {"k_scale": 0.011, "v_scale": 0.013} if kv_dtype == "fp8_e4m3" else {}
    kv_a = np.array([5000, 70, 12000, 2049, 1])
    kv_b = np.concatenate([kv_a, rng.integers(1, 20000, size=40)])
    outs = []
    for kv in (kv_a, kv_b):
        cache = PagedKVCache.from_lengths(kv, shape, device="cuda", seed=3, **scales)
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
    # fp8: the table's configuration (-vp) and the same loop with V widened before the product
    # (-vw) instead.
    widen = (False, True) if kv_dtype == "fp8_e4m3" else (False,)
    for sched, vw in itertools.product(schedules, widen):
        plan_a = build_plan(kv_a, 2048, num_kv_heads=8, page_size=16, schedule=sched, grid_size=50)
        plan_b = build_plan(kv_b, 2048, num_kv_heads=8, page_size=16, schedule=sched, grid_size=50)
        cfg = None
        if vw:
            cfg = replace(default_config(shape.head_dim, cache_a.kv_dtype, 16, plan_a.ctas_per_sm,
                                         num_kv_heads=8, group_size=shape.group_size),
                          v_widen=True, v_pairs=False)
        o_a = run_decode(prepare_decode(plan_a, cache_a, config=cfg), q_a, cache_a)
        o_b = run_decode(prepare_decode(plan_b, cache_b, config=cfg), q_b, cache_b)
        same = bool(torch.equal(o_a, o_b[: len(kv_a)]))
        res.append(same)
        rows.append({"case": "batch-invariance", "kv_dtype": kv_dtype, "schedule": sched,
                     "v_widen": vw, "ok": same})
        if not same:
            log(f"BATCH INVARIANCE FAILED ({kv_dtype}, {sched}, v_widen={vw})")
    del cache_a, cache_b
    return rows


def _fp8_query_range(log) -> list[dict]:
    """fp8 pages with bf16 queries far outside fp16's range (x 2^20: inf in fp16; x 2^-30: below
    its subnormals): the kernel's per-row power-of-two scale into fp16 must give the result of
    ordinary queries (k_scale divided by the same factor keeps the scores as they were)."""

    rows = []
    shape = AttentionShape(num_qo_heads=28, num_kv_heads=4, head_dim=128, page_size=16,
                           kv_dtype="fp8_e4m3")
    kv = np.array([1, 700, 3000, 45])
    base = PagedKVCache.from_lengths(kv, shape, device="cuda", seed=21)
    q0 = make_queries(len(kv), shape, device="cuda", seed=21)
    for factor in (2.0**20, 2.0**-30):
        cache = replace(base, k_scale=base.k_scale / factor)
        q = q0 * factor
        ref = decode_reference(q, cache)
        plan = build_plan(kv, 512, num_kv_heads=4, page_size=16)
        err, ok = checked_run(prepare_decode(plan, cache), q, cache, ref, torch.bfloat16)
        rows.append({"case": "fp8-query-range", "factor": factor, "rel_error": err, "ok": ok})
        if not ok:
            log(f"FP8 QUERY RANGE FAILED x{factor}: rel error {err}")
    return rows


def _int64_offsets(log) -> list[dict]:
    rows = []
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


# ------------------------------------------------------------------------------------ shapes

# The shape matrix of issue 16: every listed shape, KV type and page size, each against
# FlashInfer's tensor-core decode running the same plan. The default set varies one factor at a
# time from llama3-8b / bf16 / page 16 (plus fp8 on the one-KV-head shape, where the per-program
# rate matters most); --full runs the whole product.
MATRIX_SHAPES = ("llama3-8b", "llama3-70b-tp8", "qwen2.5-7b", "yi-6b", "mha-32", "g16", "hd64",
                 "hd256")
MATRIX_KV = (("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "fp8_e4m3"))  # (dtype, kv_dtype)
MATRIX_PAGES = (1, 16, 64)
MATRIX_DISTS = ("uniform", "skew80")
MATRIX_BATCHES = (8, 64, 256)
MATRIX_PLANS = ("fixed-2048", "balanced-2x")
SWEEP_PLANS = MATRIX_PLANS + ("fa3",)
BASE_VARIANT = ("llama3-8b", "bf16", "bf16", 16)


def default_variants() -> list[tuple]:
    """(shape name, dtype, kv_dtype, page size): the base, then one factor changed at a time."""
    name, dtype, kv, page = BASE_VARIANT
    out = [BASE_VARIANT]
    out += [(s, dtype, kv, page) for s in MATRIX_SHAPES if s != name]
    out += [(name, d, k, page) for d, k in MATRIX_KV if (d, k) != (dtype, kv)]
    out += [(name, dtype, kv, p) for p in MATRIX_PAGES if p != page]
    out.append(("llama3-70b-tp8", "bf16", "fp8_e4m3", 16))
    return out


def full_variants() -> list[tuple]:
    return [(s, d, k, p) for s in MATRIX_SHAPES for d, k in MATRIX_KV for p in MATRIX_PAGES]


def variant_label(v: tuple) -> str:
    name, dtype, kv, page = v
    kv_text = dtype if kv == dtype else f"{dtype}/{kv}"
    return f"{name} {kv_text} p{page}"


def variant_shape(v: tuple):
    from kvtune.workloads.shapes import get_shape

    name, dtype, kv, page = v
    heads = parse_heads_name(name)
    if heads is not None:  # a --heads shape: llama3-8b's with other heads
        from dataclasses import replace

        qo, kv_heads, head_dim = heads
        return replace(get_shape("llama3-8b", page_size=page, dtype=dtype, kv_dtype=kv),
                       num_qo_heads=qo, num_kv_heads=kv_heads, head_dim=head_dim)
    return get_shape(name, page_size=page, dtype=dtype, kv_dtype=kv)


def parse_heads_name(name: str) -> tuple[int, int, int] | None:
    """(query heads, KV heads, head_dim) of a --heads shape name "QO/KV/HD", else None."""
    parts = name.split("/")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def heads_variants(text: str, full: bool) -> list[tuple]:
    """--heads: shapes outside MATRIX_SHAPES, "QO/KV/HD" comma-separated (e.g. 40/8/128 for
    qwen2.5-14b), each with the matrix's KV types and page sizes (--full) or bf16 and fp8 at
    page 16. Raises ValueError naming the field for a malformed or unsupported shape."""
    out = []
    for name in (t.strip() for t in text.split(",")):
        heads = parse_heads_name(name)
        if heads is None:
            raise ValueError(f"heads: {name!r} not allowed; allowed: QO/KV/HD, e.g. 40/8/128")
        variant_shape((name, "bf16", "bf16", 16))  # AttentionShape's own range checks
        kinds = MATRIX_KV if full else (("bf16", "bf16"), ("bf16", "fp8_e4m3"))
        pages = MATRIX_PAGES if full else (16,)
        out += [(name, d, k, p) for d, k in kinds for p in pages]
    return out


def balanced_chunk_tokens(kv_lens, shape, sm_count: int, programs_per_sm: int = 2) -> int:
    """The 'tuned-like' plan's chunk: one chunk for the batch (FlashInfer runs it too) giving
    about programs_per_sm programs per SM: total tokens x KV heads / (SMs x programs_per_sm),
    rounded up to the page size."""
    want = int(np.sum(kv_lens)) * shape.num_kv_heads / (sm_count * programs_per_sm)
    return max(shape.page_size, int(math.ceil(want / shape.page_size)) * shape.page_size)


def fixed_split_plan(kv_lens, shape, device, chunk) -> tuple:
    """(plan, chunk tokens): the fixed-split plan of `chunk` tokens (an int >= 1), or of the
    matrix's balanced-2x chunk (chunk "balanced": balanced_chunk_tokens on the device's SMs)."""
    tokens = (balanced_chunk_tokens(kv_lens, shape, device.sm_count) if chunk == "balanced"
              else int(chunk))
    return policy_plan("fixed-split", kv_lens, shape, device, chunk_tokens=tokens), tokens


def matrix_plan(plan_name: str, kv_lens, shape, device):
    """(plan, chunk tokens) of fixed-2048, balanced-2x or fa3 (FA3's persistent one-program-per-SM
    plan: Triton only, for the config sweep; chunk None)."""
    if plan_name == "fa3":
        return policy_plan("fa3", kv_lens, shape, device), None
    return fixed_split_plan(kv_lens, shape, device,
                            2048 if plan_name == "fixed-2048" else "balanced")


def matrix_kv_lens(dist: str, batch: int, total_tokens: int):
    """The matrix's kv_lens: `batch` requests of `total_tokens` in all, uniform or skew80 (one
    request of 80% of the tokens)."""
    return fixed_total_kv_lens(batch, total_tokens, () if dist == "uniform" else (80,))


def matrix_batch(dist: str, batch: int, shape, total_tokens: int, seed: int = 0):
    from kvtune.workloads.batch import DecodeBatch

    kv = matrix_kv_lens(dist, batch, total_tokens)
    return DecodeBatch(kv, shape, seed=seed, distribution=dist, label=f"{dist} B={batch}")


def matrix_case(variant: tuple, dist: str, batch: int, plan_name: str, device,
                total_tokens: int = TOTAL_TOKENS) -> tuple:
    """(shape, kv_lens, plan, chunk tokens) of one shape-matrix case (matrix_batch at
    total_tokens, seed 0; matrix_plan on `device`)."""
    shape = variant_shape(variant)
    b = matrix_batch(dist, int(batch), shape, total_tokens)
    plan, chunk = matrix_plan(plan_name, b.kv_lens, shape, device)
    return shape, b.kv_lens, plan, chunk


def checked_decode(plan, kv_lens, shape, seed: int = 0, device: str = "cuda") -> tuple:
    """decode.py's launch of `plan` on a fresh cache and queries of kv_lens (seed), run once and
    checked against the float64 reference (checked_run): (cache, q, launch, out, rel_error, ok);
    `out` is the buffer to time the launch into."""
    cache = PagedKVCache.from_lengths(kv_lens, shape, device=device, seed=seed)
    q = make_queries(len(kv_lens), shape, device=device, seed=seed)
    launch = prepare_decode(plan, cache)
    err, ok = checked_run(launch, q, cache, decode_reference(q, cache), q.dtype)
    return cache, q, launch, torch.full_like(q, float("nan")), err, ok


def probe_start(reps: int) -> tuple:
    """A probe's (Timer of `reps` pairs, copy row of copy_bandwidth, live DeviceSpec at that
    ceiling), the ceiling printed first."""
    from kvtune.harness.device import live_device

    timer = Timer(reps)
    cp = copy_bandwidth(timer)
    print(f"copy ceiling {cp['bytes_per_s'] / 1e12:.3f} TB/s ({torch.cuda.get_device_name(0)})",
          flush=True)
    return timer, cp, live_device(cp["bytes_per_s"])


def write_probe_rows(path, cp: dict, rows: list) -> None:
    """A probe's JSON: the device, the copy row and the rows so far (rewritten after each
    case, so a call cut short keeps what it measured)."""
    with open(path, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(0), "copy": cp, "rows": rows}, fh,
                  indent=1, default=str)


def rebuild_matrix_case(variant: tuple, dist: str, batch: int, plan_name: str, device,
                        chunk=None, tasks=None, total_tokens: int = TOTAL_TOKENS):
    """(shape, plan) of a shape-matrix row rebuilt as the matrix built it (total_tokens, seed 0)
    on `device`; ValueError where the row's chunk or task count (when given) differ, i.e. the
    row was measured with other tokens or another device's SM count."""
    shape, _, plan, plan_chunk = matrix_case(variant, dist, batch, plan_name, device,
                                             total_tokens)
    if (chunk is not None and plan_chunk != int(chunk)) or (tasks is not None
                                                           and plan.num_tasks != int(tasks)):
        raise ValueError(f"does not rebuild (chunk {plan_chunk} vs {chunk}, tasks "
                         f"{plan.num_tasks} vs {tasks}); was it run with other tokens?")
    return shape, plan


class MatrixRunner:
    """The two backends of the shape matrix, one timer setting for both (events, cold L2, a short
    stopping rule), and the copy ceiling; or, with dry_run, the Triton interpreter on the CPU
    (wall clock, one run) and no FlashInfer."""

    def __init__(self, dry_run: bool, ceiling: float, log, deadline: float = math.inf,
                 merge: str = "chunked", merge_pdl: bool = True,
                 launch_order: str | None = None):
        from kvtune.harness.backends import BackendUnavailable
        from kvtune.harness.backends.triton import TritonBackend, WallClockTimer

        self.dry_run, self.ceiling, self.log = dry_run, ceiling, log
        self.launch_order = launch_order  # None: the product's
        self.deadline = deadline  # time.time() after which the matrix sections stop starting cases
        self.cases_skipped = 0
        self.flashinfer = None
        self.flashinfer_reason = "dry run: FlashInfer needs a GPU"
        if dry_run:
            self.device = None
            self.make_triton = lambda config=None: TritonBackend(
                timer=WallClockTimer(reps=1), torch_device="cpu", config=config, merge=merge,
                launch_order=launch_order)
        else:
            from kvtune.harness.device import live_device
            from kvtune.harness.stopping import StoppingRule

            self.device = live_device(hbm_bytes_per_s=ceiling if math.isfinite(ceiling) else None)
            self.stopping = StoppingRule(min_samples=10, min_time_ms=20.0, max_noise=0.01,
                                         timeout_s=1.0)
            self.make_triton = lambda config=None: TritonBackend(
                self.device, timer="events", cold_l2=True, stopping=self.stopping, config=config,
                merge=merge, merge_pdl=merge_pdl, launch_order=launch_order)
            try:
                from kvtune.harness.backends.flashinfer import FlashInferBackend

                self.flashinfer = FlashInferBackend(self.device, timer="events", cold_l2=True,
                                                    stopping=self.stopping, path="tensor-core",
                                                    telemetry=False)
            except BackendUnavailable as exc:
                self.flashinfer_reason = str(exc)
                log(f"flashinfer unavailable: {exc}")
        self.triton = self.make_triton()
        if dry_run:
            self.device = self.triton.device

    def out_of_time(self, cases: int = 1) -> bool:
        """True (and the cases counted as skipped) once the run's --time-limit-s has passed."""
        if time.time() <= self.deadline:
            return False
        self.cases_skipped += cases
        return True

    def close(self):
        self.triton.close()
        if self.flashinfer is not None:
            self.flashinfer.close()


def _measure(backend, batch, plan):
    """backend.measure, with an exception (a kernel that fails to build or plan) turned into a
    failed Measurement, so one broken case does not end the section."""
    from kvtune.harness.backends import Measurement

    try:
        return backend.measure(batch, plan)
    except Exception as exc:  # noqa: BLE001 - recorded as the case's result
        first = (str(exc).strip().splitlines() or [""])[0]
        return Measurement(status="error", message=f"{type(exc).__name__}: {first}"[:300])


def _paged_read():
    """benchmarks/paged_read.py (the paged-read ceiling), imported beside this script."""
    if str(Path(__file__).resolve().parent) not in sys.path:  # loaded from elsewhere (tests)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
    import paged_read

    return paged_read


def _parse_read_configs(labels: str | None):
    """--read-configs as (BLOCK_N, warps, stages) tuples; None without it."""
    return None if labels is None else _paged_read().parse_read_configs(labels)


def _read_fields(batch, plan, read_timer, runner, row, read_configs=None) -> dict:
    """The plan's read ceiling over the batch's pages (the cache the backends build: same kv_lens,
    shape and seed, so the same page table), its tasks handed out in the Triton row's launch
    order: read_us, read_config, read_not_ok, read_frac_of_copy (K and V bytes only) and
    triton_of_read (read_us / triton_us). read_configs: (BLOCK_N, warps, stages) tuples, None
    for paged_read.READ_CONFIGS."""
    paged_read = _paged_read()
    cache = PagedKVCache.from_lengths(batch.kv_lens, batch.shape,
                                      device=runner.triton.torch_device, seed=batch.seed)
    try:
        read = paged_read.read_ceiling(cache, plan, read_timer,
                                       read_configs or paged_read.READ_CONFIGS,
                                       row["triton_launch_order"])
    except Exception as exc:  # noqa: BLE001 - recorded as the case's result
        first = (str(exc).strip().splitlines() or [""])[0]
        return {"read_us": float("nan"), "read_message": f"{type(exc).__name__}: {first}"[:300]}
    finally:
        del cache
    kv_bytes = int(np.sum(batch.kv_lens)) * batch.shape.num_kv_heads \
        * batch.shape.kv_bytes_per_token_per_head
    read["read_frac_of_copy"] = kv_bytes / (read["read_us"] * 1e-6) / runner.ceiling
    read["triton_of_read"] = read["read_us"] / row["triton_us"]
    return read


def settle(timeout_s: float) -> dict:
    """Wait up to timeout_s seconds for five quiet latency probes in a row (the interference
    guard's; a freshly started machine can be disturbed for minutes): {"quiet", "waited_s"}."""
    from kvtune.harness.interference import guard_for, wait_until_quiet

    quiet, waited = wait_until_quiet(guard_for(), timeout_s=timeout_s)
    return {"quiet": quiet, "waited_s": waited}


def _quiet_fields(prefix: str, meas) -> dict:
    """The interference guard's verdict on a measurement (harness/interference.py): the quiet
    ratio of its latency-probe bracket and the retries it took (nan / 0 without a guard)."""
    extra = getattr(meas, "extra", {}) or {}
    return {f"{prefix}_quiet_ratio": float(extra.get("quiet_ratio", float("nan"))),
            f"{prefix}_retries": int(extra.get("interference_retries", 0))}


def _frac(meas, ceiling) -> float:
    if meas.status != "ok" or not ceiling or not math.isfinite(ceiling):
        return float("nan")
    return meas.achieved_bytes_per_s / ceiling


def section_shapes(runner: MatrixRunner, variants, dists, batches, plans, total_tokens,
                   log, read_timer=None, read_configs=None) -> list[dict]:
    """Per variant x distribution x batch x plan: verify then time Triton and FlashInfer on the
    same plan (both check their output against the float64 reference before any timing).
    read_timer (--read-ceiling): also the plan's paged-read ceiling (benchmarks/paged_read.py,
    the best of read_configs or READ_CONFIGS, each checked first, its tasks in the Triton
    launch's order), timed by read_timer(fn) -> {"median_us"}."""
    rows = []
    for v in variants:
        shape = variant_shape(v)
        for dist in dists:
            for batch_size in batches:
                batch = matrix_batch(dist, batch_size, shape, total_tokens)
                for plan_name in plans:
                    if runner.out_of_time():
                        continue
                    plan, chunk = matrix_plan(plan_name, batch.kv_lens, shape, runner.device)
                    cfg = launch_config(plan, shape, KV_TORCH_DTYPES[shape.kv_dtype],
                                        runner.device.sm_count, runner.launch_order)
                    row = {"variant": variant_label(v), "shape": v[0], "dtype": v[1],
                           "kv_dtype": v[2], "page_size": v[3], "dist": dist,
                           "batch": batch_size, "plan": plan_name, "chunk_tokens": chunk,
                           "num_tasks": plan.num_tasks,
                           "programs_per_sm": plan.num_tasks / runner.device.sm_count,
                           "min_bytes": batch.min_bytes}
                    tri = _measure(runner.triton, batch, plan)  # verifies first
                    row.update(_quiet_fields("triton", tri))
                    row.update({"triton_us": tri.latency_us, "triton_status": tri.status,
                                "triton_rel_error": tri.rel_error,
                                # the launch's own, where it ran (a side split shows)
                                "triton_config": (tri.extra or {}).get("kernel_config_label",
                                                                       cfg.label()),
                                "triton_launch_order": (runner.launch_order
                                                        or product_launch_order(plan)),
                                "triton_merge": runner.triton.merge,
                                "triton_merge_pdl": runner.triton.merge_pdl,
                                "triton_frac_of_copy": _frac(tri, runner.ceiling),
                                "triton_message": tri.message[:200]})
                    if runner.flashinfer is not None:
                        fi = _measure(runner.flashinfer, batch, plan)
                        row.update(_quiet_fields("flashinfer", fi))
                        row.update({"flashinfer_us": fi.latency_us, "flashinfer_status": fi.status,
                                    "flashinfer_rel_error": fi.rel_error,
                                    "flashinfer_frac_of_copy": _frac(fi, runner.ceiling),
                                    "flashinfer_message": fi.message[:200]})
                    else:
                        row.update({"flashinfer_us": float("nan"),
                                    "flashinfer_status": "unavailable",
                                    "flashinfer_message": runner.flashinfer_reason})
                    row["speed_vs_flashinfer"] = row["flashinfer_us"] / row["triton_us"]
                    if read_timer is not None:
                        row.update(_read_fields(batch, plan, read_timer, runner, row,
                                                read_configs))
                    rows.append(row)
                    log(f"shapes {row['variant']:28s} {dist:8s} B={batch_size:4d} "
                        f"{plan_name:11s} tasks {plan.num_tasks:6d} ({row['programs_per_sm']:5.2f}"
                        f"/SM) triton {tri.status} {tri.latency_us:9.1f} us "
                        f"frac {row['triton_frac_of_copy']:.3f} | flashinfer "
                        f"{row['flashinfer_status']} {row['flashinfer_us']:9.1f} us | "
                        f"x{row['speed_vs_flashinfer']:.3f} | quiet "
                        f"{row['triton_quiet_ratio']:.2f}/"
                        f"{row.get('flashinfer_quiet_ratio', float('nan')):.2f} retries "
                        f"{row['triton_retries']}/{row.get('flashinfer_retries', 0)}")
                runner.triton.close()  # one batch on the device at a time
    return rows


# Where the config sweep times every CANDIDATES entry: few programs per SM (one KV head; G = 16
# and G = 7 over 4 KV heads) and fp8 under fixed 2048 (uniform B=64: 128 / 512 programs) and
# balanced-2x (skew80 B=256); the base shape (G = 4) as the control of the measured 16-bit
# "many" entry under fixed 2048 and balanced-2x (uniform B=64: 3.88 programs/SM, where it ran
# 0.84x of FlashInfer), and FA3's one-program-per-SM persistent plan (Triton only). Each
# (variant, plan mode) pair compiles every candidate once.
SWEEP_CASES = (("uniform", 64, "fixed-2048"), ("skew80", 256, "balanced-2x"))
SWEEP = ((("llama3-70b-tp8", "bf16", "bf16", 16), SWEEP_CASES + (("skew80", 64, "fixed-2048"),)),
         (("g16", "bf16", "bf16", 16), SWEEP_CASES),
         (("hd64", "bf16", "bf16", 16), (("uniform", 64, "fixed-2048"),
                                         ("uniform", 64, "balanced-2x"))),
         (("qwen2.5-7b", "bf16", "bf16", 16), (("uniform", 64, "fixed-2048"),)),
         (("llama3-8b", "bf16", "bf16", 16), (("uniform", 64, "fixed-2048"),
                                              ("uniform", 64, "balanced-2x"),
                                              ("uniform", 64, "fa3"))),
         (("llama3-8b", "bf16", "fp8_e4m3", 16), SWEEP_CASES),
         (("llama3-70b-tp8", "bf16", "fp8_e4m3", 16), SWEEP_CASES),
         # fp8 at head_dim 64 / 256: the CANDIDATES of (64, 1) and (256, 1) (the widened-V
         # variants) had no case (16 q / 8 KV heads: "many").
         (("hd64", "bf16", "fp8_e4m3", 16), (("uniform", 64, "fixed-2048"),)),
         (("hd256", "bf16", "fp8_e4m3", 16), (("uniform", 64, "fixed-2048"),)))
CONFIG_KV = ("bf16", "fp16", "fp8_e4m3")


def parse_sweep_cases(text: str | None) -> tuple:
    """--sweep-cases: "DIST:BATCH:PLAN,..." -> ((dist, batch, plan), ...); SWEEP_CASES when None.
    ValueError naming the field and the allowed values for anything else."""
    if text is None:
        return SWEEP_CASES
    out = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3:
            raise ValueError(f"sweep-cases: {item!r} not DIST:BATCH:PLAN")
        dist, batch, plan = parts
        if dist not in MATRIX_DISTS:
            raise ValueError(f"sweep-cases: dist {dist!r} not allowed; allowed: "
                             f"{', '.join(MATRIX_DISTS)}")
        if not batch.isdigit() or not 1 <= int(batch) <= 4096:
            raise ValueError(f"sweep-cases: batch {batch!r} out of range; allowed: 1..4096")
        if plan not in SWEEP_PLANS:
            raise ValueError(f"sweep-cases: plan {plan!r} not allowed; allowed: "
                             f"{', '.join(SWEEP_PLANS)}")
        out.append((dist, int(batch), plan))
    return tuple(out)


def filter_sweep(sweep, config_kv: str | None):
    """--config-kv: only the sweep entries whose KV cache type is `config_kv` (fp8 = fp8_e4m3);
    None keeps all. ValueError for another type."""
    if config_kv is None:
        return list(sweep)
    kv = _config_kv_name(config_kv)
    return [(v, cases) for v, cases in sweep if v[2] == kv]


def _config_kv_name(config_kv: str) -> str:
    """--config-kv text -> a MATRIX_KV cache type (fp8 -> fp8_e4m3); ValueError otherwise."""
    kv = "fp8_e4m3" if config_kv == "fp8" else config_kv
    if kv not in CONFIG_KV:
        raise ValueError(f"config-kv: {config_kv!r} not allowed; allowed: bf16, fp16, fp8, "
                         "fp8_e4m3")
    return kv


def section_shape_configs(runner: MatrixRunner, sweep, total_tokens, log) -> dict:
    """Every candidate configuration (kernels.decode_config.CANDIDATES) per (variant, cases) of
    `sweep`, each verified before it is timed; then, per CONFIG_TABLE key, the candidate with the
    lowest summed time over that key's cases (the table entry the run suggests)."""
    from kvtune.kernels.decode_config import CANDIDATES, CONFIG_TABLE, config_key, element_bytes
    from kvtune.kernels.paged import KV_TORCH_DTYPES

    rows = []
    for v, cases in sweep:
        shape = variant_shape(v)
        elem = element_bytes(KV_TORCH_DTYPES[shape.kv_dtype])
        for dist, batch_size, plan_name in cases:
            if runner.out_of_time(len(CANDIDATES[(shape.head_dim, elem)])):
                continue
            batch = matrix_batch(dist, batch_size, shape, total_tokens)
            backend = runner.make_triton()  # one cache and reference for all candidates
            for cfg in CANDIDATES[(shape.head_dim, elem)]:
                # A new plan object per candidate: the backend prepares (and verifies) each plan
                # once, with the configuration it holds at that moment.
                plan, _ = matrix_plan(plan_name, batch.kv_lens, shape, runner.device)
                key = config_key(shape.head_dim, elem, shape.num_kv_heads, plan.ctas_per_sm,
                                 shape.group_size)
                backend.config = cfg
                try:
                    meas = backend.measure(batch, plan)
                except Exception as exc:  # noqa: BLE001 - a config that fails to compile is a result
                    meas = None
                    status, us, msg = "error", float("nan"), repr(exc)[:200]
                else:
                    status, us, msg = meas.status, meas.latency_us, meas.message[:200]
                row = {"variant": variant_label(v), "dist": dist, "batch": batch_size,
                       "plan": plan_name, "num_tasks": plan.num_tasks, "key": list(key),
                       "config": cfg.label(), "is_table_entry": cfg == CONFIG_TABLE[key],
                       "status": status, "us": us, "message": msg,
                       "frac_of_copy": _frac(meas, runner.ceiling) if meas else float("nan")}
                rows.append(row)
                log(f"config {row['variant']:28s} {dist:8s} B={batch_size:4d} {plan_name:11s} "
                    f"{cfg.label():16s}{'*' if row['is_table_entry'] else ' '} {status:7s} "
                    f"{us:9.1f} us frac {row['frac_of_copy']:.3f} {msg if status != 'ok' else ''}")
            backend.close()
    best = suggest_table(rows)
    for key, choice in best.items():
        log(f"suggested CONFIG_TABLE[{key}] = {choice['config']} (sum {choice['sum_us']:.1f} us; "
            f"table entry {choice['table_config']}: {choice['table_sum_us']:.1f} us)")
    return {"rows": rows, "suggested": best}


def suggest_table(rows) -> dict:
    """Per table key, the candidate that was ok on every case of the key with the lowest summed
    time, next to the current entry's sum."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    out = {}
    if frame.empty:
        return out
    frame["key_text"] = frame["key"].map(lambda k: str(tuple(k)))
    for key, group in frame.groupby("key_text"):
        cases = group.groupby(["variant", "dist", "batch", "plan"]).ngroups
        ok = group[group["status"] == "ok"]
        sums = ok.groupby("config")["us"].agg(["sum", "count"])
        sums = sums[sums["count"] == cases]
        table = group[group["is_table_entry"]]
        table_cfg = table["config"].iloc[0] if len(table) else None
        entry = {"table_config": table_cfg,
                 "table_sum_us": float(sums["sum"].get(table_cfg, float("nan")))
                 if table_cfg else float("nan")}
        if len(sums):
            entry.update({"config": sums["sum"].idxmin(), "sum_us": float(sums["sum"].min())})
        else:
            entry.update({"config": None, "sum_us": float("nan")})
        out[key] = entry
    return out


def shapes_table(rows) -> str:
    """The matrix as markdown; with --read-ceiling rows, two more columns: the read ceiling's
    fraction of copy and the Triton kernel's share of it (read us / Triton us)."""
    read = any("read_us" in r for r in rows)
    header = ("| variant | dist | B | plan | programs/SM | Triton us | FlashInfer us | FI/Triton "
              "| Triton of copy | FI of copy | Triton config | quiet (Triton/FI) |"
              + (" read of copy | Triton of read |" if read else ""))
    lines = [header, "|---" * (12 + 2 * read) + "|"]
    nan = float("nan")
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['dist']} | {r['batch']} | {r['plan']} | "
            f"{r['programs_per_sm']:.2f} | {r['triton_us']:.1f} | {r['flashinfer_us']:.1f} | "
            f"{r['speed_vs_flashinfer']:.3f} | {r.get('triton_frac_of_copy', nan):.3f} | "
            f"{r.get('flashinfer_frac_of_copy', nan):.3f} | {r['triton_config']} | "
            f"{r.get('triton_quiet_ratio', nan):.2f}/"
            f"{r.get('flashinfer_quiet_ratio', nan):.2f} |"
            + (f" {r.get('read_frac_of_copy', nan):.3f} | {r.get('triton_of_read', nan):.3f} |"
               if read else ""))
    return "\n".join(lines)


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


def parse_variants(text: str | None, full: bool, variants: list[tuple] | None = None
                   ) -> list[tuple]:
    """--variants: comma-separated indices into the chosen variant list (default: all of it):
    `variants` if given (--heads), else the full or default matrix list."""
    if variants is None:
        variants = full_variants() if full else default_variants()
    if not text:
        return variants
    out = []
    for part in text.split(","):
        if not part.strip().isdigit() or not 0 <= int(part) < len(variants):
            raise ValueError(f"variants: {part!r} not allowed; allowed: indices 0..{len(variants) - 1}"
                             f" of: " + "; ".join(f"{i} {variant_label(v)}"
                                                  for i, v in enumerate(variants)))
        out.append(variants[int(part)])
    return out


DRY_RUN_VARIANTS = "1,12"  # llama3-70b-tp8 bf16 p16 and llama3-70b-tp8 bf16/fp8 p16: one KV head


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="env,copy,check,backend,configs,targets",
                    help="comma-separated: env, copy, copy-sizes (the copy at 16 MiB-8 GiB "
                         "moved), check, backend, configs, targets, shapes, shape-configs")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--reps", type=int, default=30, help="timed runs per config in the sweep")
    ap.add_argument("--timer", default="auto", help="kvtune.harness.timing timer for the targets table")
    ap.add_argument("--full", action="store_true",
                    help="shapes: the whole product (8 shapes x 3 KV types x 3 page sizes) instead "
                         "of the one-factor-at-a-time set")
    ap.add_argument("--merge", choices=("chunked", "blocks", "tail"), default="chunked",
                    help="shapes/shape-configs: the Triton kernel's stage 2 (chunked: "
                         "kernels/merge_chunked.py, the product's; blocks: kernels/merge.py; "
                         "tail: kernels/merge_tail.py, in stage 1's tail)")
    ap.add_argument("--merge-pdl", choices=("on", "off"), default="on",
                    help="shapes/shape-configs: launch the chunked merge as stage 1's "
                         "programmatic dependent where the GPU has it (default, the product's) "
                         "or as an ordinary launch (off)")
    ap.add_argument("--launch-order", choices=LAUNCH_ORDERS, default=None,
                    help="shapes/shape-configs: stage 1's launch order (kernels/decode.py "
                         "LAUNCH_ORDERS: the plan's, or longest item first with the KV heads "
                         "inner, same bits); default the product's (product_launch_order)")
    ap.add_argument("--variants", help="shapes/shape-configs: indices into the variant list "
                    "(see the error message of a bad index for the list)")
    ap.add_argument("--sweep-cases", default=None,
                    help="shape-configs with --variants: comma-separated DIST:BATCH:PLAN cases "
                         "(e.g. skew80:8:balanced-2x; default: uniform:64:fixed-2048,"
                         "skew80:256:balanced-2x)")
    ap.add_argument("--total-tokens", type=int, default=None,
                    help=f"shapes: tokens per batch (default {TOTAL_TOKENS}; dry run 96)")
    ap.add_argument("--settle-s", type=float, default=60.0,
                    help="before timing, wait up to this many seconds for five quiet latency "
                         "probes in a row (harness/interference.py: a freshly started machine "
                         "can be disturbed for minutes); 0: do not wait (default 60)")
    ap.add_argument("--read-ceiling", action="store_true",
                    help="shapes: also each plan's paged-read ceiling (benchmarks/paged_read.py: "
                         "its K/V bytes read through the page table with no attention, best of "
                         "three configurations, checked first) and the Triton kernel's share of it")
    ap.add_argument("--read-configs", default=None,
                    help="with --read-ceiling: the read's configurations, comma-separated "
                         "bnN-wW-sS labels (default paged_read.READ_CONFIGS: bn32-w4-s3, "
                         "bn64-w4-s2, bn64-w4-s3)")
    ap.add_argument("--time-limit-s", type=float, default=math.inf,
                    help="after this many seconds from the start, the shape-configs and shapes "
                         "sections start no new case (the skipped count is logged and stored); "
                         "default: no limit")
    ap.add_argument("--config-kv", default=None,
                    help="check and shape-configs: only the cases / sweep shapes with this KV "
                         "type (bf16, fp16, fp8 = fp8_e4m3); default: all")
    ap.add_argument("--heads", default=None,
                    help="shapes: instead of the matrix's shapes, these (held-out shapes), "
                         "comma-separated QO/KV/HD, e.g. 40/8/128,16/2/128; bf16 and fp8 at "
                         "page 16, or with --full every KV type and page size")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU only: the shapes and shape-configs sections on a tiny batch in "
                         "Triton's interpreter, FlashInfer skipped; checks the script, not speed")
    args = ap.parse_args(argv)
    sections = args.sections.split(",")
    if args.dry_run:
        sections = [s for s in sections if s in ("shapes", "shape-configs")] or ["shapes",
                                                                                 "shape-configs"]
    elif not torch.cuda.is_available():
        print("bench_kernels: no CUDA GPU (torch.cuda.is_available() is False); "
              "--dry-run runs the shapes sections on the CPU", file=sys.stderr)
        return 2
    try:
        if args.heads:
            variants = parse_variants(args.variants, False, heads_variants(args.heads, args.full))
        else:
            variants = parse_variants(args.variants if args.variants or not args.dry_run
                                      else DRY_RUN_VARIANTS, args.full)
        filter_sweep((), args.config_kv)  # a bad --config-kv fails before anything runs
        parse_sweep_cases(args.sweep_cases)
        read_configs = _parse_read_configs(args.read_configs)
    except ValueError as exc:
        print(f"bench_kernels: error: {exc}", file=sys.stderr)
        return 2
    total_tokens = args.total_tokens or (96 if args.dry_run else TOTAL_TOKENS)
    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.out, "bench_log.txt")

    def log(msg):
        print(msg, flush=True)
        with open(log_path, "a") as f:
            f.write(msg + "\n")

    results = {"command": " ".join(sys.argv if argv is None else [sys.argv[0], *argv]),
               "dry_run": args.dry_run, "launch_order": args.launch_order}
    t0 = time.time()
    ceiling = float("nan")
    timer = None
    if not args.dry_run:
        timer = Timer(args.reps)
        results["env"] = section_env()
        log(json.dumps(results["env"]))
        if args.settle_s > 0:
            results["settle"] = settle(args.settle_s)
            log(f"settle: {'quiet' if results['settle']['quiet'] else 'still disturbed'} after "
                f"{results['settle']['waited_s']:.1f} s")
        if sections_need_ceiling(sections):
            results["copy"] = copy_bandwidth(timer)
            ceiling = results["copy"]["bytes_per_s"]
            log(f"copy: {ceiling / 1e12:.3f} TB/s (read+write) {results['copy']}")

    def save():
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)

    runner = None

    def matrix_runner():
        nonlocal runner
        if runner is None:
            runner = MatrixRunner(args.dry_run, ceiling, log, deadline=t0 + args.time_limit_s,
                                  merge=args.merge, merge_pdl=args.merge_pdl == "on",
                                  launch_order=args.launch_order)
        return runner

    batches = (2,) if args.dry_run else MATRIX_BATCHES
    dists = ("skew80",) if args.dry_run else MATRIX_DISTS
    if args.dry_run:
        sweep = [(variants[0], (("skew80", 2, "balanced-2x"),))]
    else:
        cases = parse_sweep_cases(args.sweep_cases)
        sweep = [(v, cases) for v in variants] if args.variants else list(SWEEP)
    sweep = filter_sweep(sweep, args.config_kv)
    project_timer = ProjectTimer(args.timer)
    # the read ceiling's timer: the fixed-reps one on a GPU, one wall-clock run under --dry-run
    read_timer = None if not args.read_ceiling else (
        wall_clock_once if args.dry_run else Timer(args.reps))
    config_kv = None if args.config_kv is None else _config_kv_name(args.config_kv)
    for name, fn in (("copy-sizes", lambda: section_copy_sizes(timer, ceiling, log)),
                     ("check", lambda: section_check(log, config_kv)),
                     ("backend", lambda: section_backend(log)),
                     ("configs", lambda: section_configs(timer, ceiling, log)),
                     ("targets", lambda: section_targets(project_timer, ceiling, log)),
                     # the sweep first: under --time-limit-s it is the part that decides the table
                     ("shape-configs", lambda: section_shape_configs(
                         matrix_runner(), sweep, total_tokens, log)),
                     ("shapes", lambda: section_shapes(matrix_runner(), variants, dists, batches,
                                                       MATRIX_PLANS, total_tokens, log,
                                                       read_timer=read_timer,
                                                       read_configs=read_configs))):
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
    if runner is not None:
        runner.close()
        results["cases_skipped_time_limit"] = runner.cases_skipped
        if runner.cases_skipped:
            log(f"time limit {args.time_limit_s:.0f} s: {runner.cases_skipped} matrix/sweep cases "
                "not run")
    if "check" in results:
        bad = [r for r in results["check"] if not r["ok"]]
        log(f"check: {len(results['check']) - len(bad)}/{len(results['check'])} ok")
    if "targets" in results:
        table = markdown_table(results["targets"])
        with open(os.path.join(args.out, "targets.md"), "w") as f:
            f.write(table + "\n")
        log(table)
    if "shapes" in results:
        import pandas as pd

        table = shapes_table(results["shapes"])
        with open(os.path.join(args.out, "shapes.md"), "w") as f:
            f.write(table + "\n")
        pd.DataFrame(results["shapes"]).to_csv(os.path.join(args.out, "shapes.csv"), index=False)
        log(table)
        bad = [r for r in results["shapes"] if r["triton_status"] != "ok"
               or r["flashinfer_status"] not in ("ok", "unavailable")]
        log(f"shapes: {len(results['shapes']) - len(bad)}/{len(results['shapes'])} cases ok")
    log(f"total {time.time() - t0:.1f} s")
    save()
    failed = [k for k in results if k.endswith("_error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

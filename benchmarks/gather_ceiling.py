"""Probe: how fast can a kernel read a paged KV cache at all, with no attention on top (issue 16)?

The copy ceiling (bench_kernels `copy`) streams one contiguous buffer. A decode kernel reads the
pages of its work items through the page table, and at one KV head per page (llama3-70b-tp8 at
page 16) every page holds one 4 KB run of K and one of V at a random place in the pool. This
probe reads exactly the bytes of a decode plan's stage 1 (one program per work item x KV head,
keys kv_lo .. kv_hi - 1 of the item's request, K and V) the way kernels/decode.py addresses
them (page id per key, BLOCK_N rows per step, Triton's pipeliner over the loop), sums them into
float32 (so no load can be dropped) and writes one head_dim row per program. Its best
configuration is the fastest any stage 1 of that shape and plan could go with this addressing:
if it stays below 0.85 of the copy, so must the decode kernel.

Variants of the read, all with the same bytes and the same sums:
- the Gluon TMA read (sm_90; `--no-tma` leaves it out): one TMA copy per page of K and of V,
  2-8 pages per mbarrier, 2-8 steps in flight;
- `--direct`: the task row carries its request's page-table start (one dependent load less);
- `--stream`: the programs decoupled from the tasks: every task's keys cut into blocks, the
  block list split evenly over 1-8 programs per SM, each one pipelined stream across task
  boundaries (do fewer, equal, longer streams lift the one-KV-head ceiling? Untimed when
  written, twenty-second session: compiled for sm_90, checked under the interpreter).
`--matrix-variants I,J` instead times decode.py's launch beside the read ceiling (best of three
Triton configurations) on every shape-matrix case with >= 2 programs per SM.

Each case runs with pages shuffled (the matrix's cache) and in order (`--layouts`: the same
tasks over a cache whose pages are handed out in order, one request's keys one contiguous run).
Every variant's sums are checked against float64 sums of the same keys before it is timed.

Timer: bench_kernels.Timer (CUDA events, L2 flushed before each run, interference guard; paced
since the twenty-second session's call 6), 30 pairs. Copy ceiling: a 4 GiB device copy in the
same process. Bytes: the K and V the plan reads (1 byte per element for fp8 pages); the sums
written (head_dim floats per task) are not counted.

    python3 benchmarks/gather_ceiling.py --out $OUT
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import (checked_decode, matrix_case, probe_start,  # noqa: E402
                           write_probe_rows)

from kvtune.kernels import triton_mode  # noqa: E402,F401 - before triton
from kvtune.kernels.paged import PagedKVCache  # noqa: E402
from kvtune.kernels.plan import LAUNCH_ORDERS  # noqa: E402
from paged_read import (READ_CONFIGS, STREAM_CONFIGS, parse_read_configs,  # noqa: E402
                        plan_tasks, read_ceiling, reference_sums, stream_launchers,
                        triton_launchers)


try:  # the TMA read needs Gluon's Hopper ops (Triton >= 3.5, NVIDIA backend)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    # The TMA load: `async_load` since Triton 3.7, `async_copy_global_to_shared` in 3.5-3.6.
    tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
    HAS_GLUON = True
except (ImportError, AttributeError):  # pragma: no cover
    HAS_GLUON = False


if HAS_GLUON:

    @gluon.jit
    def _tma_issue(k_desc, v_desc, k_smem, v_smem, bar, page_indices_ptr, base, p_lo, p_hi,
                   step, stage, head, PAGE_SIZE: gl.constexpr, HEAD_DIM: gl.constexpr,
                   PAGES: gl.constexpr):
        """Start the TMA copies of step `step`'s PAGES pages of K and of V into ring slot
        `stage`, all on barrier `bar`. Pages past the task's last are the last page again
        (read and masked), so every step moves the same bytes the barrier expects."""
        nbytes: gl.constexpr = 2 * PAGES * PAGE_SIZE * HEAD_DIM * k_desc.dtype.primitive_bitwidth \
            // 8
        mbarrier.expect(bar, nbytes)
        for p in gl.static_range(PAGES):
            page_no = gl.minimum(p_lo + step * PAGES + p, p_hi - 1)
            page = gl.load(page_indices_ptr + base + page_no)
            tma_load(k_desc, [page * PAGE_SIZE, head * HEAD_DIM], bar,
                     k_smem.index(stage * PAGES + p))
            tma_load(v_desc, [page * PAGE_SIZE, head * HEAD_DIM], bar,
                     v_smem.index(stage * PAGES + p))

    @gluon.jit
    def _tma_read(k_desc, v_desc, page_indptr_ptr, page_indices_ptr, tasks_ptr, out_ptr,
                  k_scale, v_scale, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
                  PAGES: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
        """_gather_read's sums with the pages moved by TMA (one copy per page of K and of V,
        PAGES pages per mbarrier, STAGES steps in flight); descriptors over the pools viewed
        as [pages x PAGE_SIZE, kv heads x HEAD_DIM]."""
        t = gl.program_id(0)
        req = gl.load(tasks_ptr + t * 8)
        lo = gl.load(tasks_ptr + t * 8 + 1)
        hi = gl.load(tasks_ptr + t * 8 + 2)
        head = gl.load(tasks_ptr + t * 8 + 3)
        base = gl.load(page_indptr_ptr + req)
        p_lo = lo // PAGE_SIZE
        p_hi = (hi + PAGE_SIZE - 1) // PAGE_SIZE
        n_steps = (p_hi - p_lo + PAGES - 1) // PAGES
        dtype: gl.constexpr = k_desc.dtype
        k_smem = gl.allocate_shared_memory(dtype, [STAGES * PAGES, PAGE_SIZE, HEAD_DIM],
                                           k_desc.layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES * PAGES, PAGE_SIZE, HEAD_DIM],
                                           v_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(bars.index(s), count=1)
        fence_async_shared()  # the barriers' init is visible to the TMA unit before its copies
        for s in gl.static_range(STAGES):
            if s < n_steps:
                _tma_issue(k_desc, v_desc, k_smem, v_smem, bars.index(s), page_indices_ptr,
                           base, p_lo, p_hi, s, s, head, PAGE_SIZE, HEAD_DIM, PAGES)
        TPW_D: gl.constexpr = HEAD_DIM // 8
        ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [num_warps, 1], [1, 0])
        rows = gl.arange(0, PAGE_SIZE, layout=gl.SliceLayout(1, ld))
        acc = gl.zeros([PAGE_SIZE, HEAD_DIM], gl.float32, ld)
        for j in range(n_steps):
            stage = j % STAGES
            mbarrier.wait(bars.index(stage), (j // STAGES) & 1)
            for p in gl.static_range(PAGES):
                key = (p_lo + j * PAGES + p) * PAGE_SIZE + rows
                seen = gl.expand_dims((key >= lo) & (key < hi), 1)
                k = k_smem.index(stage * PAGES + p).load(ld).to(gl.float32)
                v = v_smem.index(stage * PAGES + p).load(ld).to(gl.float32)
                acc += gl.where(seen, k * k_scale + v * v_scale, 0.0)
            # Every thread has read slot `stage` before the copies that refill it start.
            cta_barrier()
            if j + STAGES < n_steps:
                _tma_issue(k_desc, v_desc, k_smem, v_smem, bars.index(stage), page_indices_ptr,
                           base, p_lo, p_hi, j + STAGES, stage, head, PAGE_SIZE, HEAD_DIM, PAGES)
        for s in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(s))
        offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
        gl.store(out_ptr + t * HEAD_DIM + offs_d, gl.sum(acc, 0))


def tma_launchers(cache, tasks, out, configs):
    """(label, launch) of _tma_read for each (pages per step, stages) in configs."""
    shape, n = cache.shape, tasks.shape[0]
    ps, hd = shape.page_size, shape.head_dim
    gdtype = gl.float8e4nv if shape.kv_is_fp8 else gl.bfloat16 if \
        cache.k_pages.dtype == torch.bfloat16 else gl.float16
    layout = gl.NVMMASharedLayout.get_default_for([ps, hd], gdtype)
    descs = [TensorDescriptor.from_tensor(t.view(t.shape[0] * ps, -1), [ps, hd], layout)
             for t in (cache.k_pages, cache.v_pages)]
    for pages, stages in configs:
        def go(pages=pages, stages=stages):
            _tma_read[(n,)](descs[0], descs[1], cache.page_indptr, cache.page_indices, tasks,
                            out, cache.k_scale, cache.v_scale, HEAD_DIM=hd, PAGE_SIZE=ps,
                            PAGES=pages, STAGES=stages, num_warps=4)
        yield f"tma-p{pages}-s{stages}", go


def run_case(variant, dist, batch, plan_name, configs, tma_configs, timer, ceiling, spec,
             log, direct: bool = False, layouts=("shuffled", "in-order"),
             stream_configs=(), launch_order: str = "plan") -> list[dict]:
    shape, kv_lens, plan, chunk = matrix_case(variant, dist, batch, plan_name, spec)
    tasks_np = plan_tasks(plan, shape.page_size, launch_order)
    tasks = torch.as_tensor(tasks_np, device="cuda")
    nbytes = int(np.sum(kv_lens)) * shape.num_kv_heads * shape.kv_bytes_per_token_per_head
    case = (f"{variant[0]} {variant[2]} p{variant[3]} {dist} B={batch} {plan_name} "
            f"({tasks_np.shape[0]} tasks{', longest first' if launch_order != 'plan' else ''})")
    rows = []
    for layout in layouts:
        cache = PagedKVCache.from_lengths(kv_lens, shape, device="cuda", seed=0,
                                          shuffle_pages=layout == "shuffled")
        ref = reference_sums(cache, tasks_np)
        out = torch.full((tasks_np.shape[0], shape.head_dim), float("nan"), device="cuda")
        launchers = list(triton_launchers(cache, tasks, out, configs))
        if direct:
            launchers += list(triton_launchers(cache, tasks, out, configs, direct=True))
        if tma_configs:
            launchers += list(tma_launchers(cache, tasks, out, tma_configs))
        if stream_configs:
            launchers += list(stream_launchers(cache, tasks_np, out, stream_configs,
                                               spec.sm_count))
        for label, go in launchers:
            try:
                # the stream read adds into out (atomics): it starts from zeros
                out.fill_(0.0 if label.startswith("stream") else float("nan"))
                go()
                torch.cuda.synchronize()
                err = float(((out.double().cpu() - ref).abs().max()
                             / ref.abs().max().clamp_min(1e-30)).item())
                ok = bool(np.isfinite(err) and err < 1e-5)
            except Exception as exc:  # noqa: BLE001 - a config that does not compile is a row
                rows.append({"case": case, "layout": layout, "config": label,
                             "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                log(f"{case} {layout} {label}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            row = {"case": case, "layout": layout, "config": label, "rel_error": err, "ok": ok,
                   "bytes": nbytes, "chunk": chunk}
            if ok:
                row.update(timer(go))
                row["fraction_of_copy"] = nbytes / (row["median_us"] * 1e-6) / ceiling
            rows.append(row)
        for family in ("bn", "direct", "tma", "stream"):
            mine = [r for r in rows if r.get("layout") == layout and r.get("case") == case
                    and r["config"].startswith(family if family != "direct" else "bn")
                    and (family == "direct") == r["config"].endswith("-direct")]
            done = sorted((r for r in mine if "fraction_of_copy" in r),
                          key=lambda r: r["median_us"])
            if mine:
                log(f"{case:58s} {layout:9s} {family:3s} not ok "
                    f"{sum(not r.get('ok', False) for r in mine)}; best "
                    + ", ".join(f"{r['config']} {r['median_us']:.1f} us "
                                f"{r['fraction_of_copy']:.3f}" for r in done[:3]))
        torch.cuda.empty_cache()
    return rows


def run_matrix_case(variant, dist, batch, plan_name, timer, ceiling, spec, log,
                    read_configs=READ_CONFIGS) -> dict | None:
    """decode.py's whole launch (the product's config for the plan, checked against the float64
    reference) beside the read ceiling (best of read_configs, default the three Triton
    configurations of READ_CONFIGS; shuffled pages) for one shape-matrix case with at least two
    programs per SM; None below that."""
    from bench_kernels import min_bytes

    from kvtune.kernels.decode import run_decode

    shape, kv_lens, plan, chunk = matrix_case(variant, dist, batch, plan_name, spec)
    per_sm = plan.num_tasks / spec.sm_count
    if per_sm < 2:
        return None
    case = f"{variant[0]} {variant[2]} p{variant[3]} {dist} B={batch} {plan_name}"
    cache, q, launch, out, err, ok = checked_decode(plan, kv_lens, shape)
    row = {"case": case, "tasks": plan.num_tasks, "programs_per_sm": per_sm, "chunk": chunk,
           "config": str(launch.config), "rel_error": err, "ok": ok}
    if not row["ok"]:
        log(f"{case}: decode.py not ok (error {err:.2e})")
        return row
    dec = timer(lambda: run_decode(launch, q, cache, out=out))
    row["decode_us"] = dec["median_us"]
    row["decode_of_copy"] = min_bytes(kv_lens, shape) / (dec["median_us"] * 1e-6) / ceiling
    kv_bytes = int(np.sum(kv_lens)) * shape.num_kv_heads * shape.kv_bytes_per_token_per_head
    read = read_ceiling(cache, plan, timer, read_configs)
    if read["read_not_ok"]:
        log(f"{case}: {read['read_not_ok']} read configurations not ok")
    if read["read_config"]:
        row.update(read_config=read["read_config"], read_us=read["read_us"],
                   read_of_copy=kv_bytes / (read["read_us"] * 1e-6) / ceiling,
                   decode_over_read=row["decode_us"] / read["read_us"])
        log(f"{case:58s} {plan.num_tasks:5d} tasks {per_sm:5.2f}/SM  decode.py "
            f"{row['decode_us']:7.1f} us {row['decode_of_copy']:.3f}  read "
            f"{read['read_us']:7.1f} us {row['read_of_copy']:.3f} ({read['read_config']})  "
            f"decode/read {row['decode_over_read']:.3f}")
    return row


CASES = (
    (("llama3-70b-tp8", "bf16", "bf16", 16), "uniform", 256, "fixed-2048"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "uniform", 256, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "skew80", 64, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "uniform", 8, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 64), "uniform", 256, "fixed-2048"),
    (("llama3-8b", "bf16", "bf16", 16), "uniform", 64, "balanced-2x"),
    (("llama3-8b", "bf16", "fp8_e4m3", 16), "uniform", 64, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "fp8_e4m3", 16), "uniform", 256, "fixed-2048"),
)


def parse_case(text: str) -> tuple:
    """--case SHAPE:KV_DTYPE:PAGE:DIST:BATCH:PLAN as a CASES entry (queries bf16); ValueError
    naming the field otherwise (the shape itself is checked where the case is built)."""
    parts = text.split(":")
    if len(parts) != 6:
        raise ValueError(f"--case: {text!r} not allowed; allowed: "
                         "SHAPE:KV_DTYPE:PAGE:DIST:BATCH:PLAN")
    shape, kv, page, dist, batch, plan = parts
    if dist not in ("uniform", "skew80") or plan not in ("fixed-2048", "balanced-2x") \
            or not page.isdigit() or not batch.isdigit() or int(page) < 1 or int(batch) < 1:
        raise ValueError(f"--case: {text!r}: DIST uniform or skew80, PLAN fixed-2048 or "
                         "balanced-2x, PAGE and BATCH positive integers")
    return (shape, "bf16", kv, int(page)), dist, int(batch), plan


CONFIGS = tuple(itertools.product((32, 64, 128), (4, 8), (2, 3, 4)))
# (pages per step, stages) of the TMA read: 2-8 pages of K and of V per barrier, 2-6 in flight.
TMA_CONFIGS = ((2, 4), (4, 2), (4, 3), (4, 4), (8, 2), (8, 3), (2, 8))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gather_ceiling_out"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--max-cases", type=int, default=len(CASES))
    ap.add_argument("--triton", default="all", choices=("all", "best"),
                    help="all: CONFIGS; best: the three best of call 1 (bn32-w4-s3, "
                         "bn64-w4-s2, bn64-w4-s3)")
    ap.add_argument("--no-tma", action="store_true", help="leave out the Gluon TMA read")
    ap.add_argument("--direct", action="store_true",
                    help="also the Triton read with each task's page-table start in its task row")
    ap.add_argument("--cases", default="", metavar="I,J", help="indices into CASES")
    ap.add_argument("--case", action="append", default=[],
                    metavar="SHAPE:KV_DTYPE:PAGE:DIST:BATCH:PLAN",
                    help="instead of CASES (repeatable): e.g. hd256:fp8_e4m3:16:uniform:64:"
                         "balanced-2x (queries bf16; PLAN fixed-2048 or balanced-2x)")
    ap.add_argument("--read-configs", default=None,
                    help="the Triton read's configurations, comma-separated bnN-wW-sS labels "
                         "(default: --triton's; with --matrix-variants, READ_CONFIGS)")
    ap.add_argument("--launch-order", default="plan", choices=LAUNCH_ORDERS,
                    help="the order the read hands out its tasks (kernels.plan.launch_tasks; "
                         "the product's for static plans is longest-first)")
    ap.add_argument("--stream", action="store_true",
                    help="also the stream read (STREAM_CONFIGS: the blocks of all tasks spread "
                         "evenly over 1-8 programs per SM)")
    ap.add_argument("--layouts", default="shuffled,in-order")
    ap.add_argument("--matrix-variants", default="", metavar="I,J",
                    help="instead of CASES: every case of these bench_kernels default_variants "
                         "(uniform/skew80 x B 8/64/256 x fixed-2048/balanced-2x) with >= 2 "
                         "programs per SM, decode.py's launch beside the read ceiling")
    args = ap.parse_args(argv)
    try:
        given_cases = [parse_case(c) for c in args.case]
        read_configs = parse_read_configs(args.read_configs) if args.read_configs else None
    except ValueError as exc:
        print(f"gather_ceiling: error: {exc}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    timer, cp, spec = probe_start(args.reps)
    ceiling = cp["bytes_per_s"]
    rows = []
    if args.matrix_variants:
        from bench_kernels import default_variants
        variants = [default_variants()[int(i)] for i in args.matrix_variants.split(",")]
        for variant in variants:
            for dist, batch, plan_name in itertools.product(
                    ("uniform", "skew80"), (8, 64, 256), ("fixed-2048", "balanced-2x")):
                row = run_matrix_case(variant, dist, batch, plan_name, timer, ceiling, spec,
                                      lambda s: print(s, flush=True),
                                      read_configs or READ_CONFIGS)
                if row is not None:
                    rows.append(row)
                    torch.cuda.empty_cache()
            write_probe_rows(os.path.join(args.out, "gather_matrix.json"), cp, rows)
        return 0
    cases = (given_cases if given_cases
             else [CASES[int(i)] for i in args.cases.split(",")] if args.cases else CASES)
    for variant, dist, batch, plan_name in cases[: args.max_cases]:
        configs = (read_configs if read_configs
                   else CONFIGS if args.triton == "all" else READ_CONFIGS)
        tma = () if args.no_tma or not HAS_GLUON else TMA_CONFIGS
        rows += run_case(variant, dist, batch, plan_name, configs, tma, timer, ceiling, spec,
                         lambda s: print(s, flush=True), direct=args.direct,
                         layouts=args.layouts.split(","),
                         stream_configs=STREAM_CONFIGS if args.stream else (),
                         launch_order=args.launch_order)
        write_probe_rows(os.path.join(args.out, "gather_ceiling.json"), cp, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

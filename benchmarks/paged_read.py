"""The paged read of a decode plan's stage 1 with no attention on top: the kernel, its task rows,
the float64 sums that check it, and its best time (the read ceiling of a plan). Shared by
benchmarks/gather_ceiling.py (the probe, twenty-second session) and benchmarks/bench_kernels.py
(`--read-ceiling`: a column of the shape matrix); also the stream read (the programs decoupled
from the tasks, gather_ceiling.py --stream).

The kernel reads exactly the K and V bytes of the plan's stage 1 (one program per work item x KV
head, keys kv_lo .. kv_hi - 1 of the item's request) the way kernels/decode.py addresses them
(page id per key, BLOCK_N rows per step, Triton's pipeliner over the loop) and sums them into
float32, so no load can be dropped. Its best configuration is the fastest any stage 1 of that
shape and plan could go with this addressing (0.77-0.87 of copy on llama3-70b-tp8 bf16 plans
on an H100; docs/PERFORMANCE.md, twenty-second session).
"""

from __future__ import annotations

import re

import numpy as np
import torch

from kvtune.kernels import triton_mode  # noqa: F401 - before triton

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# (BLOCK_N, warps, stages): the three best of 18 on the H100 (twenty-second session, call 1).
READ_CONFIGS = ((32, 4, 3), (64, 4, 2), (64, 4, 3))
# (keys per block, warps, stages, programs per SM) of the stream read: one stream per program,
# 1-8 programs per SM (the smaller tiles where more programs must fit).
STREAM_CONFIGS = ((32, 4, 3, 1), (32, 4, 3, 2), (64, 4, 2, 2), (32, 4, 3, 3), (32, 4, 3, 4),
                  (32, 4, 2, 4), (16, 4, 3, 6), (16, 4, 3, 8), (16, 4, 4, 8))
# A read whose sums are off by more than this (relative, float32 sums of <= 1M keys) is not ok.
READ_TOLERANCE = 1e-5


@triton.jit
def _add_block(acc, k_ptr, v_ptr, page_indices_ptr, base, n0, hi, head, stride_page, stride_tok,
               k_scale, v_scale, offs_n, offs_d, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr):
    """acc [BLOCK_N, HEAD_DIM] float32 plus K + V (dequantised) of keys n0 + offs_n of one KV
    head, the request's pages from page_indices[base:]; keys at or past hi add nothing.
    Elementwise: one add per loaded element, reduced once by the caller, so the loop is as close
    to loads only as Triton allows."""
    key = n0 + offs_n
    valid = key < hi
    page = tl.load(page_indices_ptr + base + key // PAGE_SIZE, mask=valid, other=0)
    row = page.to(tl.int64) * stride_page + (key % PAGE_SIZE) * stride_tok + head * HEAD_DIM
    ptrs = row[:, None] + offs_d[None, :]
    k = tl.load(k_ptr + ptrs, mask=valid[:, None], other=0.0)
    v = tl.load(v_ptr + ptrs, mask=valid[:, None], other=0.0)
    return acc + k.to(tl.float32) * k_scale + v.to(tl.float32) * v_scale


@triton.jit
def _gather_read(k_ptr, v_ptr, page_indptr_ptr, page_indices_ptr, tasks_ptr, out_ptr,
                 stride_page, stride_tok, k_scale, v_scale, HEAD_DIM: tl.constexpr,
                 PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
                 DIRECT: tl.constexpr = False):
    """Program t: the sum over keys lo .. hi - 1 of K + V (one KV head, dequantised by the
    per-tensor scales: 1.0 for 16-bit pages) of task t's request,
    float32 [HEAD_DIM] into out[t]. tasks: int32 [n, 8] (request, lo, hi, head, the request's
    first entry of page_indices, 3 unused). DIRECT: take that entry from the task row instead of
    page_indptr[request], one dependent load less before the first page id."""
    t = tl.program_id(0)
    req = tl.load(tasks_ptr + t * 8)
    lo = tl.load(tasks_ptr + t * 8 + 1)
    hi = tl.load(tasks_ptr + t * 8 + 2)
    head = tl.load(tasks_ptr + t * 8 + 3)
    if DIRECT:
        base = tl.load(tasks_ptr + t * 8 + 4)
    else:
        base = tl.load(page_indptr_ptr + req)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    for n0 in tl.range(lo, hi, BLOCK_N, num_stages=NUM_STAGES):
        acc = _add_block(acc, k_ptr, v_ptr, page_indices_ptr, base, n0, hi, head, stride_page,
                         stride_tok, k_scale, v_scale, offs_n, offs_d, HEAD_DIM, PAGE_SIZE)
    tl.store(out_ptr + t * HEAD_DIM + offs_d, tl.sum(acc, 0))


@triton.jit
def _stream_read(k_ptr, v_ptr, page_indices_ptr, blocks_ptr, out_ptr, num_blocks, num_programs,
                 stride_page, stride_tok, k_scale, v_scale, HEAD_DIM: tl.constexpr,
                 PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr):
    """The same sums with the programs decoupled from the tasks: every task's keys cut into
    BLOCK_N-key blocks, the blocks of all tasks in one list (blocks: int32 [num_blocks + 1, 8]:
    task, first key, the task's end key, the request's first page_indices entry, head, 3
    unused; a last row with task -1), and program p streams blocks p * num_blocks /
    num_programs .. (p + 1) * num_blocks / num_programs - 1 in one pipelined loop, across task
    boundaries, adding each task's sum into out[task] (float32 atomics: out must be zero
    before a launch whose sums are read). One stream per program, all of equal length."""
    p = tl.program_id(0)
    b_lo = (p * num_blocks) // num_programs
    b_hi = ((p + 1) * num_blocks) // num_programs
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    for i in tl.range(b_lo, b_hi, num_stages=NUM_STAGES):
        task = tl.load(blocks_ptr + i * 8)
        n0 = tl.load(blocks_ptr + i * 8 + 1)
        hi = tl.load(blocks_ptr + i * 8 + 2)
        base = tl.load(blocks_ptr + i * 8 + 3)
        head = tl.load(blocks_ptr + i * 8 + 4)
        acc = _add_block(acc, k_ptr, v_ptr, page_indices_ptr, base, n0, hi, head, stride_page,
                         stride_tok, k_scale, v_scale, offs_n, offs_d, HEAD_DIM, PAGE_SIZE)
        nxt = tl.load(blocks_ptr + (i + 1) * 8)
        if (nxt != task) | (i == b_hi - 1):
            tl.atomic_add(out_ptr + task * HEAD_DIM + offs_d, tl.sum(acc, 0))
            acc = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)


def stream_blocks(tasks: np.ndarray, block_n: int) -> np.ndarray:
    """_stream_read's block list of plan_tasks rows: int32 [blocks + 1, 8], tasks in order, each
    task's keys lo .. hi - 1 in block_n-key blocks, then the sentinel row (task -1)."""
    rows = [(t, n0, hi, base, head, 0, 0, 0)
            for t, (_, lo, hi, head, base) in enumerate(tasks[:, :5].tolist())
            for n0 in range(lo, hi, block_n)]
    rows.append((-1, 0, 0, 0, 0, 0, 0, 0))
    return np.asarray(rows, dtype=np.int32)


def plan_tasks(plan, page_size: int, launch_order: str = "plan") -> np.ndarray:
    """int32 [items x heads, 8] (request, lo, hi, head, page_indptr[request], 0, 0, 0) in the
    order decode.py's stage 1 hands the tasks out (kernels.plan.launch_tasks): "plan" (heads
    outer, the plan's item order) or "longest-first" (longest item first, its KV heads
    together, the product's order for static plans); page_indptr as PagedKVCache.from_lengths
    builds it."""
    from kvtune.kernels.plan import launch_tasks

    pages = -(-np.asarray(plan.kv_lens, dtype=np.int64) // page_size)
    indptr = np.concatenate([[0], np.cumsum(pages)])
    items, heads = launch_tasks(plan, launch_order)
    rows = [(int(plan.work_request[i]), int(plan.work_kv_start[i]), int(plan.work_kv_end[i]),
             int(h), int(indptr[plan.work_request[i]]), 0, 0, 0) for i, h in zip(items, heads)]
    return np.asarray(rows, dtype=np.int32)


def parse_read_configs(labels: str) -> tuple:
    """(BLOCK_N, warps, stages) of each comma-separated label "bnN-wW-sS" (N 16..256, W 1..8,
    S 1..6); ValueError naming the label otherwise."""
    configs = []
    for label in labels.split(","):
        m = re.fullmatch(r"bn(\d+)-w(\d+)-s(\d+)", label.strip())
        if not m:
            raise ValueError(f"--read-configs: {label!r} not allowed; allowed: bnN-wW-sS")
        bn, w, st = (int(g) for g in m.groups())
        if bn not in (16, 32, 64, 128, 256) or w not in (1, 2, 4, 8) or not 1 <= st <= 6:
            raise ValueError(f"--read-configs: {label!r} out of range; allowed: N in 16..256 "
                             "(a power of two), W in 1, 2, 4, 8, S in 1..6")
        configs.append((bn, w, st))
    return tuple(configs)


def reference_sums(cache, tasks: np.ndarray) -> torch.Tensor:
    """float64 [n, head_dim]: sum of K + V over each task's keys (dequantised values), from one
    float64 prefix sum per request."""
    out = torch.empty((tasks.shape[0], cache.shape.head_dim), dtype=torch.float64)
    for b in np.unique(tasks[:, 0]).tolist():
        k, v = cache.request_kv(b, torch.float64) if cache.shape.kv_is_fp8 else \
            (t.double() for t in cache.request_kv(b))
        kv = k + v  # [n, heads, dim]
        prefix = torch.cat([torch.zeros_like(kv[:1]), kv.cumsum(0)])
        sel = np.flatnonzero(tasks[:, 0] == b)
        lo = torch.as_tensor(tasks[sel, 1], device=kv.device, dtype=torch.long)
        hi = torch.as_tensor(tasks[sel, 2], device=kv.device, dtype=torch.long)
        h = torch.as_tensor(tasks[sel, 3], device=kv.device, dtype=torch.long)
        out[torch.as_tensor(sel)] = (prefix[hi, h] - prefix[lo, h]).cpu()
    return out


def triton_launchers(cache, tasks, out, configs, direct: bool = False):
    """(label, launch) of _gather_read for each (BLOCK_N, warps, stages) in configs."""
    shape, n = cache.shape, tasks.shape[0]
    for block_n, warps, stages in configs:
        def go(block_n=block_n, warps=warps, stages=stages):
            _gather_read[(n,)](
                cache.k_pages, cache.v_pages, cache.page_indptr, cache.page_indices, tasks, out,
                cache.k_pages.stride(0), cache.k_pages.stride(1), cache.k_scale, cache.v_scale,
                HEAD_DIM=shape.head_dim, PAGE_SIZE=shape.page_size, BLOCK_N=block_n,
                NUM_STAGES=stages, DIRECT=direct, num_warps=warps)
        yield f"bn{block_n}-w{warps}-s{stages}" + ("-direct" if direct else ""), go


def stream_launchers(cache, tasks_np, out, configs, sm_count: int):
    """(label, launch) of _stream_read for each (BLOCK_N, warps, stages, programs per SM)."""
    shape = cache.shape
    for block_n, warps, stages, per_sm in configs:
        blocks = torch.as_tensor(stream_blocks(tasks_np, block_n), device=out.device)
        n_blocks = blocks.shape[0] - 1
        programs = min(per_sm * sm_count, n_blocks)

        def go(block_n=block_n, warps=warps, stages=stages, blocks=blocks, n_blocks=n_blocks,
               programs=programs):
            _stream_read[(programs,)](
                cache.k_pages, cache.v_pages, cache.page_indices, blocks, out, n_blocks,
                programs, cache.k_pages.stride(0), cache.k_pages.stride(1), cache.k_scale,
                cache.v_scale, HEAD_DIM=shape.head_dim, PAGE_SIZE=shape.page_size,
                BLOCK_N=block_n, NUM_STAGES=stages, num_warps=warps)
        yield f"stream-bn{block_n}-w{warps}-s{stages}-x{per_sm}", go


def read_ceiling(cache, plan, timer, configs=READ_CONFIGS, launch_order: str = "plan") -> dict:
    """The best time of the plan's read over `configs`, each checked against float64 sums first:
    {"read_us", "read_config", "read_not_ok": configurations that failed the check}. timer(fn)
    -> {"median_us", ...}. read_us is NaN when none passed. launch_order: plan_tasks'."""
    tasks_np = plan_tasks(plan, cache.shape.page_size, launch_order)
    tasks = torch.as_tensor(tasks_np, device=cache.k_pages.device)
    ref = reference_sums(cache, tasks_np)
    sums = torch.full((tasks_np.shape[0], cache.shape.head_dim), float("nan"),
                      device=cache.k_pages.device)
    best = {"read_us": float("nan"), "read_config": "", "read_not_ok": 0}
    for label, go in triton_launchers(cache, tasks, sums, configs):
        sums.fill_(float("nan"))
        go()
        err = float(((sums.double().cpu() - ref).abs().max() / ref.abs().max()).item())
        if not err < READ_TOLERANCE:
            best["read_not_ok"] += 1
            continue
        us = timer(go)["median_us"]
        if not us >= best["read_us"]:  # NaN at first
            best.update(read_us=us, read_config=label)
    return best

"""Stage 1 of the split-KV decode as one flattened loop per persistent program (config label -flN).

kernels/decode.py's stage 1 runs one task (a work item of the plan for one KV head) per loop:
each task fills the K/V pipeline from empty, walks its tiles and drains it, and the next task of
the program (or the next program on the SM) starts over. With short tasks (a split plan's chunks
of a few tiles) that ramp is a large part of the task. Here a program runs a fixed list of whole
tasks as ONE loop over their tiles: the loop carries the current task, the page ids of its next
tile are computed one tile ahead as in the page-ahead loop, and the first tile of the next task
is loaded while the last tile of the current one is computed. At a task's first tile the running
max, sum and output are reset; at its last the output (or the partial row and its log-sum-exp)
is stored.

Which tasks a program runs is fixed on the host (`flat_assignment`): longest processing time
first, each task (heaviest first, ties in task order) to the program with the fewest tiles so
far, so the programs end within one task of each other where the task lengths allow it. The
number of programs is KernelConfig.flat_per_sm x the SM count (at most the task count).

Batch invariance: a task's tiles are folded in order through the same device functions
(kernels/decode_steps.py) from the same initial state as in kernels/decode.py's page-ahead loop,
so a request's bits do not depend on which program ran it or what else it ran; a test compares
both kernels bit for bit in the interpreter. On an H100 (eighteenth session) the 16-bit variants
computed the per-task loop's bits; the fp8 -vp ones did not (the compiler schedules the loop's
arithmetic differently), so a flat fp8 configuration is a configuration of its own, never a twin
chosen by batch.

Measured (docs/PERFORMANCE.md, eighteenth session): faster on equal tasks of few tiles over more
than one round (llama3-70b-tp8 uniform B=256 balanced-2x: 65.4 against 69.6 us), slower where
the task lengths differ (a fixed list cannot follow the tasks' actual speeds as the hardware's
block scheduler does) and on one wave of long tasks. Not in the configuration table; a sweep
candidate.

Supported: the page-ahead loop (16-bit pages, fp8 pages widened to fp16, fp8 V read as element
pairs -vp); not the register prefetch, -vw or the warp split (KernelConfig checks that).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import torch

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents  # noqa: E402

from kvtune.kernels.decode_steps import (load_e4m3_pairs, online_softmax_step,  # noqa: E402
                                         online_softmax_step_pairs, page_ids, query_rows_to_f16,
                                         token_rows)

ROW_FIELDS = 8  # request, kv_start, kv_end, partial row (-1: final output), KV head, 3 unused


@dataclass(frozen=True, eq=False)
class FlatSchedule:
    """The device tables of one flattened launch.

    rows: [num_tasks + 1, ROW_FIELDS] int32, the tasks in program order (program 0's tasks,
    then program 1's, ...), plus one row past the end that a program's last iteration reads
    (and never uses). first: [programs] int32, each program's first row. tiles: [programs]
    int32, the tiles of its tasks together (its loop's trip count).
    """

    programs: int
    rows: torch.Tensor
    first: torch.Tensor
    tiles: torch.Tensor


def flat_assignment(task_tiles: np.ndarray, num_programs: int) -> tuple[np.ndarray, np.ndarray]:
    """Assign tasks to programs, longest processing time first.

    task_tiles: [T] tiles per task, each >= 1. num_programs: 1..T.
    Returns (order, offsets): order [T] the task ids in program order (each program's tasks
    heaviest first), offsets [programs + 1] the CSR offsets of each program's tasks in `order`.
    Deterministic: ties go to the lower task id and to the lower program index.
    """
    task_tiles = np.asarray(task_tiles, dtype=np.int64)
    num_tasks = task_tiles.shape[0]
    if not 1 <= num_programs <= max(num_tasks, 1):
        raise ValueError(f"num_programs: {num_programs} out of range; allowed: 1..{num_tasks}")
    if (task_tiles < 1).any():
        raise ValueError("task_tiles: every task needs at least one tile")
    by_weight = np.argsort(-task_tiles, kind="stable")
    owner_of = np.empty(num_tasks, dtype=np.int64)
    if np.all(task_tiles == task_tiles[0]):
        # Equal tasks: LPT is round-robin over the programs.
        owner_of[by_weight] = np.arange(num_tasks) % num_programs
    else:
        heap = [(0, p) for p in range(num_programs)]
        for t in by_weight:
            load, p = heapq.heappop(heap)
            owner_of[t] = p
            heapq.heappush(heap, (load + int(task_tiles[t]), p))
    # Program-major, and within a program in the assignment order (heaviest first).
    rank = np.empty(num_tasks, dtype=np.int64)
    rank[by_weight] = np.arange(num_tasks)
    order = np.lexsort((rank, owner_of))
    counts = np.bincount(owner_of, minlength=num_programs)
    return order, np.concatenate(([0], np.cumsum(counts)))


def prepare_flat(items: np.ndarray, num_kv_heads: int, block_n: int, num_programs: int,
                 device: torch.device) -> FlatSchedule:
    """The FlatSchedule for a plan's work items.

    items: [num_items, 4] (request, kv_start, kv_end, partial row) as kernels/decode.py builds
    them; a task is (item, KV head), task id head x num_items + item. block_n: tokens per tile.
    num_programs: 1.. (capped at the task count).
    """
    num_items = items.shape[0]
    num_tasks = num_items * num_kv_heads
    programs = max(1, min(int(num_programs), num_tasks))
    keys = (items[:, 2] - items[:, 1]).astype(np.int64)
    item_tiles = -(-keys // block_n)
    task_tiles = np.tile(item_tiles, num_kv_heads)
    order, offsets = flat_assignment(task_tiles, programs)
    item = order % num_items
    rows = np.zeros((num_tasks + 1, ROW_FIELDS), dtype=np.int32)
    rows[:num_tasks, :4] = items[item]
    rows[:num_tasks, 4] = order // num_items
    rows[num_tasks] = rows[num_tasks - 1]  # read by the last program's last iteration, unused
    tiles = np.add.reduceat(task_tiles[order], offsets[:-1])

    def as_dev(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(device)

    return FlatSchedule(programs=programs, rows=as_dev(rows), first=as_dev(offsets[:-1]),
                        tiles=as_dev(tiles))


@triton.jit
def _task_row(rows_ptr, s, ROW: tl.constexpr):
    """(request, kv_start, kv_end, partial row, KV head) of row `s` of the schedule."""
    base = rows_ptr + s.to(tl.int64) * ROW
    return (tl.load(base), tl.load(base + 1), tl.load(base + 2), tl.load(base + 3),
            tl.load(base + 4))


@triton.jit
def _task_query(q_ptr, req, head, stride_q_b, stride_q_h, qk_scale_log2, offs_g, offs_d, g_mask,
                Q_TO_FP16: tl.constexpr, UPCAST_DOT: tl.constexpr, G: tl.constexpr,
                G_PAD: tl.constexpr):
    """The task's query tile [G_PAD, HEAD_DIM] as the products take it, and its score scale (as
    kernels/decode.py: fp8 pages with bf16 queries go to fp16 with a per-row power of two)."""
    qo_heads = head * G + offs_g
    q = tl.load(q_ptr + req.to(tl.int64) * stride_q_b + qo_heads[:, None] * stride_q_h
                + offs_d[None, :], mask=g_mask[:, None], other=0.0)
    score_scale = tl.zeros([G_PAD, 1], dtype=tl.float32) + qk_scale_log2
    if Q_TO_FP16:
        q, q_inv = query_rows_to_f16(q)
        score_scale = (qk_scale_log2 * q_inv)[:, None]
    if UPCAST_DOT:
        q = q.to(tl.float32)
    return q, score_scale


@triton.jit
def _attend_flat_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr,
    page_indptr_ptr, page_indices_ptr, rows_ptr, first_ptr, tiles_ptr,
    qk_scale_log2, v_scale,
    stride_q_b, stride_q_h, stride_o_b, stride_o_h,
    stride_kv_page, stride_kv_tok, stride_part_row,
    NUM_QO_HEADS: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr, P_DTYPE: tl.constexpr,
    KV_FP8: tl.constexpr, Q_TO_FP16: tl.constexpr, ASM: tl.constexpr, V_PAIRS: tl.constexpr,
    ROW: tl.constexpr, GDC_TRIGGER: tl.constexpr = False,
):
    if GDC_TRIGGER:
        gdc_launch_dependents()  # as kernels/decode.py: the chunked merge may be scheduled
    pid = tl.program_id(0)
    s = tl.load(first_ptr + pid)
    n_tiles = tl.load(tiles_ptr + pid)

    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    g_mask = offs_g < G

    req, kv_lo, kv_hi, part_row, head = _task_row(rows_ptr, s, ROW)
    n0 = kv_lo
    page_cur = page_ids(page_indices_ptr, tl.load(page_indptr_ptr + req), n0 + offs_n, kv_hi,
                        PAGE_SIZE)
    q, score_scale = _task_query(q_ptr, req, head, stride_q_b, stride_q_h, qk_scale_log2, offs_g,
                                 offs_d, g_mask, Q_TO_FP16, UPCAST_DOT, G, G_PAD)
    m_i = tl.full([G_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([G_PAD], dtype=tl.float32)
    if V_PAIRS:
        acc_even = tl.zeros([G_PAD, HEAD_DIM // 2], dtype=tl.float32)
        acc_odd = tl.zeros([G_PAD, HEAD_DIM // 2], dtype=tl.float32)
    else:
        acc = tl.zeros([G_PAD, HEAD_DIM], dtype=tl.float32)

    for _ in range(0, n_tiles):
        # A task's first tile starts from the state the per-task loop starts from.
        first = n0 == kv_lo
        m_i = tl.where(first, float("-inf"), m_i)
        l_i = tl.where(first, 0.0, l_i)
        tok = n0 + offs_n
        valid = tok < kv_hi
        row = token_rows(page_cur, tok, stride_kv_page, stride_kv_tok, PAGE_SIZE)
        kv_head_off = head * HEAD_DIM
        k = tl.load(k_ptr + row[:, None] + kv_head_off + offs_d[None, :], mask=valid[:, None],
                    other=0.0)
        if Q_TO_FP16:
            step_scale = score_scale
        else:
            step_scale = qk_scale_log2  # a scalar, exactly as the per-task loop has it
        if V_PAIRS:
            v_pairs = load_e4m3_pairs(v_ptr, row, valid, kv_head_off, HEAD_DIM)
            acc_even = tl.where(first, 0.0, acc_even)
            acc_odd = tl.where(first, 0.0, acc_odd)
            m_i, l_i, acc_even, acc_odd = online_softmax_step_pairs(
                q, k, v_pairs, valid, m_i, l_i, acc_even, acc_odd, step_scale, ASM)
        else:
            v = tl.load(v_ptr + row[:, None] + kv_head_off + offs_d[None, :],
                        mask=valid[:, None], other=0.0)
            acc = tl.where(first, 0.0, acc)
            m_i, l_i, acc = online_softmax_step(q, k, v, valid, m_i, l_i, acc, step_scale,
                                                DOT_PRECISION, UPCAST_DOT, P_DTYPE)

        # The task's last tile: store its output row or its partial row (masked stores, so the
        # loop body has no branch).
        last = n0 + BLOCK_N >= kv_hi
        if V_PAIRS:
            acc_out = tl.reshape(tl.join(acc_even, acc_odd), (G_PAD, HEAD_DIM))
        else:
            acc_out = acc
        if KV_FP8:
            o = acc_out * (v_scale / l_i)[:, None]
        else:
            o = acc_out / l_i[:, None]
        qo_heads = head * G + offs_g
        # (`!= 0`: Triton's interpreter types a boolean tensor & a boolean scalar as int32.)
        final_rows = (g_mask & last & (part_row < 0)) != 0
        o_offs = req.to(tl.int64) * stride_o_b + qo_heads[:, None] * stride_o_h + offs_d[None, :]
        tl.store(out_ptr + o_offs, o.to(out_ptr.dtype.element_ty), mask=final_rows[:, None])
        partial_rows = (g_mask & last & (part_row >= 0)) != 0
        row0 = part_row.to(tl.int64) * stride_part_row
        tl.store(part_o_ptr + row0 + qo_heads[:, None] * HEAD_DIM + offs_d[None, :], o,
                 mask=partial_rows[:, None])
        tl.store(part_lse_ptr + part_row.to(tl.int64) * NUM_QO_HEADS + qo_heads,
                 m_i + tl.log2(l_i), mask=partial_rows)

        # The next tile: the next task's first after a last tile. Its row, query and page ids
        # are read here, one tile ahead, so the K/V addresses of the next step wait on nothing
        # loaded in that step (the page-ahead loop's rule).
        s += last.to(tl.int32)
        req_n, lo_n, hi_n, part_n, head_n = _task_row(rows_ptr, s, ROW)
        n0 = tl.where(last, lo_n, n0 + BLOCK_N)
        q_n, scale_n = _task_query(q_ptr, req_n, head_n, stride_q_b, stride_q_h, qk_scale_log2,
                                   offs_g, offs_d, (g_mask & last) != 0, Q_TO_FP16, UPCAST_DOT, G,
                                   G_PAD)
        q = tl.where(last, q_n, q)
        score_scale = tl.where(last, scale_n, score_scale)
        req, kv_lo, kv_hi, part_row, head = req_n, lo_n, hi_n, part_n, head_n
        page_cur = page_ids(page_indices_ptr, tl.load(page_indptr_ptr + req), n0 + offs_n, kv_hi,
                            PAGE_SIZE)


def launch_flat(flat: FlatSchedule, q: torch.Tensor, k_pages: torch.Tensor,
                v_pages: torch.Tensor, out: torch.Tensor, partial_out: torch.Tensor,
                partial_lse: torch.Tensor, page_indptr: torch.Tensor,
                page_indices: torch.Tensor, qk_scale_log2: float, v_scale: float,
                constants: dict, options: dict) -> None:
    """Launch `_attend_flat_kernel` over flat.programs programs.

    constants: the compile-time arguments kernels/decode.py's run_decode derives for its own
    stage 1 (NUM_QO_HEADS, G, G_PAD, HEAD_DIM, PAGE_SIZE, BLOCK_N, DOT_PRECISION, UPCAST_DOT,
    P_DTYPE, KV_FP8, Q_TO_FP16, ASM, V_PAIRS and optionally GDC_TRIGGER); options: num_warps,
    num_stages and the optional maxnreg / launch_pdl."""
    _attend_flat_kernel[(flat.programs,)](
        q, k_pages, v_pages, out, partial_out, partial_lse, page_indptr, page_indices,
        flat.rows, flat.first, flat.tiles, qk_scale_log2, v_scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_pages.stride(0), k_pages.stride(1), partial_out.stride(0),
        ROW=ROW_FIELDS, **constants, **options,
    )

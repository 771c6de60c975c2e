"""Split-KV paged decode attention in Triton, launched exactly as a `Plan` says.

Stage 1 (`_attend_kernel`): one task is one work item of the plan (request, kv range) for one KV
head. It loads the G = num_qo_heads / num_kv_heads query heads of that KV head as one tile
(padded to 16 rows for `tl.dot`), walks the item's tokens through the CSR page table with an
online softmax in float32 (base-2 exponentials), and writes either the final output (the request
has one split) or a float32 partial output and its log-sum-exp (base 2) for stage 2.

How tasks reach programs follows `plan.schedule`:
- static, static-heavy-first: grid (num_items, num_kv_heads), one program per task; CUDA hands
  out blocks x-fastest, which is the plan's task order (task t = item t % n of head t // n).
  The product (prepare_decode's default launch order, product_launch_order) launches the same
  tasks as a 1-D grid over the items sorted longest first with the KV heads inner (task t =
  head t % H of item t // H), so every long task of every KV head starts in the first wave
  (MODE 3; same bits); launch_order="plan" keeps the 2-D grid. Where a one-program-per-SM
  entry would leave its short tasks queued on the SMs its long ones leave
  (decode_config.side_launch_split), the product runs the long items as this launch and the
  short ones as a second launch of the entry's same-bits shallow twin on a side stream
  (DecodeLaunch.side), the merge after both.
- persistent-round-robin: grid = plan.grid_size programs; program i runs tasks i, i + grid, ...
- persistent-heavy-first: grid = plan.grid_size programs pull the next task from a device
  counter (atomic add), so the heaviest items really start first. The last program to finish
  resets the counter, so the launch can be replayed (CUDA graphs) without a memset.

Stage 2 combines the partials of split requests (kernels/merge_chunked.py by default, or
kernels/merge.py; prepare_decode's `merge`); it is not launched when no request is split. With
merge="tail" (kernels/merge_tail.py, measured slower) stage 1's tasks merge in their own tail and
there is no stage 2.

Batch invariance: a request's result depends only on its own kv range cuts (the plan), its own
data and the compile-time configuration, which is chosen from the shape (head_dim, KV element
size, KV head count, query heads per KV head) and the occupancy the policy assumes
(plan.ctas_per_sm), never from kv_lens or the batch size; runtime sizes are excluded from Triton's integer specialisation so another batch never selects
another compiled variant. Block sizes are tuned for G <= 16; larger groups run with the query
tile padded to the next power of two.

Block sizes, warps and stages come from kernels/decode_config.py.

FP8 caches (e4m3 pages, per-tensor k_scale / v_scale): the kernel loads one byte per element and
widens it to fp16 in registers (exact: every e4m3 value is an fp16 value; on sm_90 one
cvt.rn.f16x2.e4m3x2 per two elements, where widening to bf16 costs that plus a cvt.bf16.f16 per
element), and both products run in fp16 with float32 accumulation whatever the query type. bf16
queries are taken to fp16 exactly by scaling each row by a power of two (largest magnitude into
[2^14, 2^15)), the inverse folded into the float32 score scale; the softmax weights are rounded
to fp16 (not bf16) for the P.V product. The scales never touch the tiles:
k_scale is folded into the score scale (sm_scale x k_scale x log2 e, in float32) and v_scale
multiplies the float32 output once at the end, which is exactly softmax(q (s_k K8)^T) (s_v V8)
up to float32 rounding. The online softmax stays in float32. With `KernelConfig.v_widen` (label
-vw) V is loaded as int32 words (4 e4m3 each, 16-byte vector loads) and widened to fp16 where it
was loaded (inline-asm cvt.rn.f16x2.e4m3x2; a byte-extract cast in the interpreter), and the
tile is rebuilt with join/reshape, which stops Triton from pulling the P.V product's operand
layout back onto the 8-bit load (one ld.shared.b8 per element on sm_90: docs/KERNEL_NOTES.md).
The values are the same fp16 values as the plain path's cast. With `KernelConfig.v_pairs` (label
-vp, the table's fp8 entries) V is loaded as int16 pairs of e4m3 codes, which reach the P.V
operand through the 16-bit transposing shared load; one prmt and two cvt.rn.f16x2.e4m3x2 per
four elements split them into even- and odd-column fp16 operands, and the product runs as two
half-width products (docs/KERNEL_NOTES.md "FP8 V as element pairs"). Where -vp cannot run (before
sm_89, or V pages off a 2-byte boundary) the table's entry falls back to its plain loop.

With `KernelConfig.warp_split` = N > 1 the tokens of each step are cut into N slices with one
online softmax each (batched products, the warps on the slice axis) and merged once per task;
`max_registers` passes a register cap to the compiler. Both are sweep candidates, not table
entries (docs/KERNEL_NOTES.md "Sixth session").

Without a CUDA GPU the kernels are built for Triton's interpreter (TRITON_INTERPRET=1) and run on
CPU tensors; that is for tests, and it is slow.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents  # noqa: E402

from kvtune.kernels.decode_steps import (
    kv_offsets, load_e4m3_as_f16, load_e4m3_pairs, online_softmax_step, online_softmax_step_pairs,
    online_softmax_step_split, page_ids, prefetch_page_ids_l2, query_rows_to_f16, token_rows)
from kvtune.kernels.decode_config import (KernelConfig, default_config, element_bytes,
                                          fits_one_task, side_launch_split,
                                          tasks_of_one_length)
from kvtune.kernels.decode_flat import FlatSchedule, launch_flat, prepare_flat
from kvtune.kernels.merge import launch_merge
from kvtune.kernels.merge_chunked import ChunkedMerge, launch_chunked_merge, prepare_chunked_merge
from kvtune.kernels.merge_tail import TAIL_ROWS, TailMerge, prepare_tail_merge, tail_merge
from kvtune.kernels.paged import PagedKVCache
from kvtune.kernels.plan import (LAUNCH_ORDERS, AttentionShape, Plan, check_launch_order,
                                 launch_item_order, product_launch_order)


SCHEDULE_MODES = {
    "static": 0,
    "static-heavy-first": 0,
    "persistent-round-robin": 1,
    "persistent-heavy-first": 2,
}
# Stage 1's launch order (prepare_decode's launch_order, kernels.plan.LAUNCH_ORDERS):
# "longest-first" runs as MODE 3. Why: with the plan's order a skewed plan's long tasks of the
# last KV heads enter only after earlier programs end, and end last (the H200 Triton simulator
# model puts llama3-8b skew80 B=64 balanced-2x's stage 1 at 294 us in plan order, measured 307,
# and 267 longest first). Measured on the H200 (twenty-ninth session, call 1: docs/
# PERFORMANCE.md): the table entry longest first 264.7 us against 310.9 in plan order there, and
# 0.99-1.36x on 15 skewed, uniform and fp8 cases (two losses of under 1%); so the product's order
# (kernels.plan.product_launch_order).
LONGEST_FIRST_MODE = 3
LOG2_E = 1.4426950408889634


@triton.jit(do_not_specialize=["num_items", "num_tasks", "num_programs"])
def _attend_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr,
    page_indptr_ptr, page_indices_ptr, items_ptr, counter_ptr,
    num_items, num_tasks, num_programs, qk_scale_log2, v_scale,
    stride_q_b, stride_q_h, stride_o_b, stride_o_h,
    stride_kv_page, stride_kv_tok, stride_part_row,
    NUM_QO_HEADS: tl.constexpr, G: tl.constexpr, G_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    MODE: tl.constexpr, PREFETCH: tl.constexpr, PAGE_AHEAD: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr, P_DTYPE: tl.constexpr, KV_FP8: tl.constexpr,
    Q_TO_FP16: tl.constexpr, V_WIDE: tl.constexpr, ASM: tl.constexpr,
    WARP_SPLIT: tl.constexpr, V_PAIRS: tl.constexpr, GDC_TRIGGER: tl.constexpr = False,
    row_job_ptr=None, job_row0_ptr=None, job_count_ptr=None, job_dest_ptr=None,
    job_parent_ptr=None, ticket_ptr=None, TAIL_MERGE: tl.constexpr = False,
    PAGE_IDS_L2: tl.constexpr = False,
):
    if GDC_TRIGGER:
        # Programmatic dependent launch of the merge (DecodeLaunch.merge_pdl): it may be
        # scheduled once every program of this grid has started, and waits (griddepcontrol.wait)
        # for this grid's completion before it reads a partial row.
        gdc_launch_dependents()
    # Task source: MODE 0 one task per program (2-D grid), 1 round-robin, 2 atomic counter.
    if MODE == 0:
        t = tl.program_id(1) * num_items + tl.program_id(0)
        step = num_tasks
    elif MODE == 3:
        t = tl.program_id(0)
        step = num_tasks
    elif MODE == 1:
        t = tl.program_id(0)
        step = num_programs
    else:
        t = tl.atomic_add(counter_ptr, 1)
        step = 0

    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    g_mask = offs_g < G

    while t < num_tasks:
        if MODE == 3:
            item = t // (NUM_QO_HEADS // G)
            head = t % (NUM_QO_HEADS // G)
        else:
            item = t % num_items
            head = t // num_items
        req = tl.load(items_ptr + item * 4)
        kv_lo = tl.load(items_ptr + item * 4 + 1)
        kv_hi = tl.load(items_ptr + item * 4 + 2)
        part_row = tl.load(items_ptr + item * 4 + 3)
        page_base = tl.load(page_indptr_ptr + req)
        if PAGE_IDS_L2 and ASM:
            prefetch_page_ids_l2(page_indices_ptr, page_base, kv_lo, kv_hi, PAGE_SIZE)

        qo_heads = head * G + offs_g
        q_offs = req.to(tl.int64) * stride_q_b + qo_heads[:, None] * stride_q_h + offs_d[None, :]
        q = tl.load(q_ptr + q_offs, mask=g_mask[:, None], other=0.0)
        score_scale = qk_scale_log2
        if Q_TO_FP16:
            # fp8 pages with bf16 queries: the products run in fp16, since e4m3 -> fp16 is one
            # hardware conversion per two elements and e4m3 -> bf16 is three.
            q, q_inv = query_rows_to_f16(q)
            score_scale = (qk_scale_log2 * q_inv)[:, None]
        if UPCAST_DOT:
            q = q.to(tl.float32)
        kv_head_off = head * HEAD_DIM

        m_i = tl.full([G_PAD], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([G_PAD], dtype=tl.float32)
        acc = tl.zeros([G_PAD, HEAD_DIM], dtype=tl.float32)
        if WARP_SPLIT > 1:
            # Each step's BLOCK_N tokens cut into WARP_SPLIT contiguous slices of NW tokens, one
            # online softmax per slice (batched products, the warps on the slice axis), merged
            # once per task below: no cross-warp reduction inside the loop. Page ids one block
            # ahead, as PAGE_AHEAD.
            NW: tl.constexpr = BLOCK_N // WARP_SPLIT
            tok_off = (tl.arange(0, WARP_SPLIT)[:, None] * NW
                       + tl.arange(0, NW)[None, :])  # [W, NW]
            q3 = tl.broadcast_to(q[None, :, :], (WARP_SPLIT, G_PAD, HEAD_DIM))
            if Q_TO_FP16:
                score3 = score_scale[None, :, :]
            else:
                score3 = score_scale
            m3 = tl.full([WARP_SPLIT, G_PAD], float("-inf"), dtype=tl.float32)
            l3 = tl.zeros([WARP_SPLIT, G_PAD], dtype=tl.float32)
            acc3 = tl.zeros([WARP_SPLIT, G_PAD, HEAD_DIM], dtype=tl.float32)
            page_cur = page_ids(page_indices_ptr, page_base, kv_lo + tok_off, kv_hi, PAGE_SIZE)
            for n0 in range(kv_lo, kv_hi, BLOCK_N):
                tok = n0 + tok_off
                valid = tok < kv_hi
                row = token_rows(page_cur, tok, stride_kv_page, stride_kv_tok, PAGE_SIZE)
                kv_offs = row[:, :, None] + kv_head_off + offs_d[None, None, :]
                k = tl.load(k_ptr + kv_offs, mask=valid[:, :, None], other=0.0)
                v = tl.load(v_ptr + kv_offs, mask=valid[:, :, None], other=0.0)
                page_cur = page_ids(page_indices_ptr, page_base, tok + BLOCK_N, kv_hi, PAGE_SIZE)
                m3, l3, acc3 = online_softmax_step_split(q3, k, v, valid, m3, l3, acc3, score3,
                                                         DOT_PRECISION, UPCAST_DOT, P_DTYPE)
            # Merge the slices: the same rescaling as the split-KV merge, in float32.
            m_i = tl.max(m3, 0)
            w = tl.exp2(m3 - m_i[None, :])  # a slice that saw no key has m = -inf: weight 0
            l_i = tl.sum(l3 * w, 0)
            acc = tl.sum(acc3 * w[:, :, None], 0)
        elif PREFETCH:
            # Register double buffer: the loads of block i+1 are issued before block i is
            # computed, and the page ids run one block further ahead, so no load waits on a
            # load issued in the same iteration.
            tok = kv_lo + offs_n
            valid = tok < kv_hi
            kv_offs = kv_offsets(page_indices_ptr, page_base, tok, valid, kv_head_off, offs_d,
                                 stride_kv_page, stride_kv_tok, PAGE_SIZE)
            k = tl.load(k_ptr + kv_offs, mask=valid[:, None], other=0.0)
            if V_WIDE:
                page = tl.load(page_indices_ptr + page_base + tok // PAGE_SIZE, mask=valid,
                               other=0)
                row = page.to(tl.int64) * stride_kv_page + (tok % PAGE_SIZE) * stride_kv_tok
                v = load_e4m3_as_f16(v_ptr, row, valid, kv_head_off, HEAD_DIM, BLOCK_N, ASM)
            else:
                v = tl.load(v_ptr + kv_offs, mask=valid[:, None], other=0.0)
            tok_next = tok + BLOCK_N
            valid_next = tok_next < kv_hi
            page_next = tl.load(page_indices_ptr + page_base + tok_next // PAGE_SIZE,
                                mask=valid_next, other=0)
            for n0 in range(kv_lo, kv_hi, BLOCK_N):
                row = (page_next.to(tl.int64) * stride_kv_page
                       + (tok_next % PAGE_SIZE) * stride_kv_tok)
                kv_offs_next = row[:, None] + kv_head_off + offs_d[None, :]
                k_next = tl.load(k_ptr + kv_offs_next, mask=valid_next[:, None], other=0.0)
                if V_WIDE:
                    v_next = load_e4m3_as_f16(v_ptr, row, valid_next, kv_head_off, HEAD_DIM,
                                              BLOCK_N, ASM)
                else:
                    v_next = tl.load(v_ptr + kv_offs_next, mask=valid_next[:, None], other=0.0)
                tok_after = tok_next + BLOCK_N
                valid_after = tok_after < kv_hi
                page_next = tl.load(page_indices_ptr + page_base + tok_after // PAGE_SIZE,
                                    mask=valid_after, other=0)
                m_i, l_i, acc = online_softmax_step(q, k, v, valid, m_i, l_i, acc, score_scale,
                                                    DOT_PRECISION, UPCAST_DOT, P_DTYPE)
                k, v, valid = k_next, v_next, valid_next
                tok_next, valid_next = tok_after, valid_after
        elif PAGE_AHEAD and V_PAIRS:
            # fp8 pages, V read as int16 element pairs (KernelConfig.v_pairs): page ids one block
            # ahead as below; the P.V product runs on the even and the odd head_dim columns.
            page_cur = page_ids(page_indices_ptr, page_base, kv_lo + offs_n, kv_hi, PAGE_SIZE)
            acc_even = tl.zeros([G_PAD, HEAD_DIM // 2], dtype=tl.float32)
            acc_odd = tl.zeros([G_PAD, HEAD_DIM // 2], dtype=tl.float32)
            for n0 in range(kv_lo, kv_hi, BLOCK_N):
                tok = n0 + offs_n
                valid = tok < kv_hi
                row = token_rows(page_cur, tok, stride_kv_page, stride_kv_tok, PAGE_SIZE)
                k = tl.load(k_ptr + row[:, None] + kv_head_off + offs_d[None, :],
                            mask=valid[:, None], other=0.0)
                v_pairs = load_e4m3_pairs(v_ptr, row, valid, kv_head_off, HEAD_DIM)
                page_cur = page_ids(page_indices_ptr, page_base, tok + BLOCK_N, kv_hi,
                                    PAGE_SIZE)
                m_i, l_i, acc_even, acc_odd = online_softmax_step_pairs(
                    q, k, v_pairs, valid, m_i, l_i, acc_even, acc_odd, score_scale, ASM)
            # Column 2j from acc_even[:, j], 2j + 1 from acc_odd[:, j].
            acc = tl.reshape(tl.join(acc_even, acc_odd), (G_PAD, HEAD_DIM))
        elif PAGE_AHEAD:
            # Page ids one block ahead (loop-carried), K/V through plain loads: the K/V addresses
            # of a step no longer wait on a load of the same step, which lets Triton's
            # pipeliner keep num_stages - 1 K/V tiles in flight in shared memory (with the page
            # id loaded in the same step it keeps one; docs/KERNEL_NOTES.md).
            page_cur = page_ids(page_indices_ptr, page_base, kv_lo + offs_n, kv_hi, PAGE_SIZE)
            for n0 in range(kv_lo, kv_hi, BLOCK_N):
                tok = n0 + offs_n
                valid = tok < kv_hi
                row = token_rows(page_cur, tok, stride_kv_page, stride_kv_tok, PAGE_SIZE)
                kv_offs = row[:, None] + kv_head_off + offs_d[None, :]
                k = tl.load(k_ptr + kv_offs, mask=valid[:, None], other=0.0)
                if V_WIDE:
                    v = load_e4m3_as_f16(v_ptr, row, valid, kv_head_off, HEAD_DIM, BLOCK_N, ASM)
                else:
                    v = tl.load(v_ptr + kv_offs, mask=valid[:, None], other=0.0)
                page_cur = page_ids(page_indices_ptr, page_base, tok + BLOCK_N, kv_hi, PAGE_SIZE)
                m_i, l_i, acc = online_softmax_step(q, k, v, valid, m_i, l_i, acc, score_scale,
                                                    DOT_PRECISION, UPCAST_DOT, P_DTYPE)
        else:
            for n0 in range(kv_lo, kv_hi, BLOCK_N):
                tok = n0 + offs_n
                valid = tok < kv_hi
                if V_WIDE:
                    page = tl.load(page_indices_ptr + page_base + tok // PAGE_SIZE, mask=valid,
                                   other=0)
                    row = page.to(tl.int64) * stride_kv_page + (tok % PAGE_SIZE) * stride_kv_tok
                    k = tl.load(k_ptr + row[:, None] + kv_head_off + offs_d[None, :],
                                mask=valid[:, None], other=0.0)
                    v = load_e4m3_as_f16(v_ptr, row, valid, kv_head_off, HEAD_DIM, BLOCK_N, ASM)
                else:
                    kv_offs = kv_offsets(page_indices_ptr, page_base, tok, valid, kv_head_off,
                                         offs_d, stride_kv_page, stride_kv_tok, PAGE_SIZE)
                    k = tl.load(k_ptr + kv_offs, mask=valid[:, None], other=0.0)
                    v = tl.load(v_ptr + kv_offs, mask=valid[:, None], other=0.0)
                m_i, l_i, acc = online_softmax_step(q, k, v, valid, m_i, l_i, acc, score_scale,
                                                    DOT_PRECISION, UPCAST_DOT, P_DTYPE)

        if KV_FP8:
            o = acc * (v_scale / l_i)[:, None]
        else:
            o = acc / l_i[:, None]
        if part_row < 0:
            o_offs = (req.to(tl.int64) * stride_o_b + qo_heads[:, None] * stride_o_h
                      + offs_d[None, :])
            tl.store(out_ptr + o_offs, o.to(out_ptr.dtype.element_ty), mask=g_mask[:, None])
        else:
            row0 = part_row.to(tl.int64) * stride_part_row
            tl.store(part_o_ptr + row0 + qo_heads[:, None] * HEAD_DIM + offs_d[None, :], o,
                     mask=g_mask[:, None])
            tl.store(part_lse_ptr + part_row.to(tl.int64) * NUM_QO_HEADS + qo_heads,
                     m_i + tl.log2(l_i), mask=g_mask)
            if TAIL_MERGE:
                # kernels/merge_tail.py: the merges this task's row completes, in this program.
                tail_merge(part_o_ptr, part_lse_ptr, out_ptr, part_row, head, qo_heads, g_mask,
                           offs_d, row_job_ptr, job_row0_ptr, job_count_ptr, job_dest_ptr,
                           job_parent_ptr, ticket_ptr, stride_o_b, stride_o_h, stride_part_row,
                           NUM_QO_HEADS, NUM_QO_HEADS // G, HEAD_DIM, G_PAD, TAIL_ROWS)

        if MODE == 2:
            t = tl.atomic_add(counter_ptr, 1)
        else:
            t += step

    if MODE == 2:
        # Every program has made its last (failing) grab before it counts itself done, so the
        # last one to count can reset both counters for the next launch.
        done = tl.atomic_add(counter_ptr + 1, 1)
        if done == num_programs - 1:
            tl.atomic_xchg(counter_ptr, 0)
            tl.atomic_xchg(counter_ptr + 1, 0)


# Triton's interpreter multiplies bf16 dot operands as their raw uint16 storage (seen with triton
# 3.9); there the kernel widens the (already rounded) operands to float32, which is exact.
INTERPRETED = type(_attend_kernel).__name__ == "InterpretedFunction"
# The type the softmax weights are rounded to before the P.V product: the query type.
_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


@dataclass(frozen=True, eq=False)
class SideLaunch:
    """The second stage-1 launch of a side split (decode_config.side_launch_split): the short
    tasks, under the entry's shallow twin, on `stream` beside the main launch (which then runs
    only the long items). items: [side items, 4] int32 as DecodeLaunch.items (longest first);
    grid: (side tasks,); stream: a CUDA stream of the launch's device (None on the CPU, where
    the two launches run one after the other)."""

    config: KernelConfig
    items: torch.Tensor
    grid: tuple
    stream: torch.cuda.Stream | None


@dataclass(frozen=True, eq=False)
class DecodeLaunch:
    """Everything `run_decode` needs on the device for one (plan, cache) pair: built once.

    items: [num_items, 4] int32 (request, kv_start, kv_end, partial row or -1) in plan order
    (longest first under prepare_decode's launch_order "longest-first", mode 3).
    partial_out: [rows, num_qo_heads, head_dim] float32 and partial_lse: [rows, num_qo_heads]
    float32, one row per work item of a split request (then, with the tail merge, its chunk
    results: tail_merge.scratch_rows more). merge_requests / merge_row0 /
    merge_count: [split requests] int32. counter: [2] int32 zeros (persistent-heavy-first).
    chunked_merge: the job table of kernels/merge_chunked.py where a request is split and
    prepare_decode's merge is "chunked" (the default; None: kernels/merge.py's merge).
    merge_pdl: launch the chunked merge as the programmatic dependent of stage 1 (sm_90+, never
    under the interpreter): its programs are scheduled beside stage 1's last wave and wait for
    its completion on the device, instead of the launch starting after it. On by default
    (prepare_decode) since the sixteenth session: on an H100, alternated with the ordinary
    launch three times in one process, it was 0.5-3.7 us faster per step in every round of
    eight cases, and a CUDA graph of it replays the eager output bit for bit
    (docs/PERFORMANCE.md, sixteenth session).
    flat: the task lists of the flattened persistent stage 1 (config.flat_per_sm > 0,
    kernels/decode_flat.py), which then runs instead of _attend_kernel; None otherwise.
    launch_order: the order stage 1 hands out its tasks (kernels.plan.LAUNCH_ORDERS).
    side: the short tasks' concurrent launch of a side split (SideLaunch; items then holds only
    the long ones), or None.
    """

    plan: Plan
    config: KernelConfig
    mode: int
    grid: tuple
    items: torch.Tensor
    partial_out: torch.Tensor
    partial_lse: torch.Tensor
    merge_requests: torch.Tensor
    merge_row0: torch.Tensor
    merge_count: torch.Tensor
    counter: torch.Tensor
    chunked_merge: ChunkedMerge | None = None
    merge_pdl: bool = False
    tail_merge: TailMerge | None = None
    flat: FlatSchedule | None = None
    launch_order: str = "plan"
    side: SideLaunch | None = None

    @property
    def config_label(self) -> str:
        """The stage-1 configuration's label, and with a side split the side launch's after a
        '+' (bn128-w8-s3-pa+bn128-w8-s2-pa)."""
        return self.config.label() + (f"+{self.side.config.label()}" if self.side else "")

    @property
    def num_launches(self) -> int:
        """Kernel launches per decode: stage 1 (two with a side split), plus the merge's when a
        request is split."""
        stage1 = 1 + (self.side is not None)
        if self.tail_merge is not None:
            return stage1
        if self.chunked_merge is not None:
            return stage1 + self.chunked_merge.num_launches
        return stage1 + (self.merge_requests.shape[0] > 0)


def launch_config(plan: Plan, shape: AttentionShape, kv_dtype: torch.dtype,
                  sm_count: int | None = None, launch_order: str | None = None) -> KernelConfig:
    """The stage-1 configuration `plan` runs with: default_config of the shape, KV page dtype and
    plan, and, for a one-program-per-task schedule on a device of `sm_count` SMs, the entry's
    shallower or register-capped twin where decode_config.occupancy_twin says so for the tasks
    handed out in `launch_order` (None: product_launch_order; same bits, more programs per SM).
    sm_count None (the CPU, where the interpreter runs every stage count alike): the table's
    entry."""
    order = product_launch_order(plan) if launch_order is None else launch_order
    check_launch_order(order)
    one_per_task = SCHEDULE_MODES[plan.schedule] == 0
    keys = plan.work_kv_end - plan.work_kv_start
    sm_count = sm_count if one_per_task else None
    return default_config(shape.head_dim, kv_dtype, shape.page_size, plan.ctas_per_sm,
                          num_kv_heads=shape.num_kv_heads, group_size=shape.group_size,
                          programs=plan.num_tasks, sm_count=sm_count,
                          equal_tasks=tasks_of_one_length(keys),
                          one_task=sm_count is not None
                          and fits_one_task(keys, plan.num_kv_heads, sm_count, order),
                          item_keys=keys, launch_order=order)


MERGES = ("chunked", "blocks", "tail")


def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch: a CUDA device of compute capability 9.0 or later, and not
    Triton's interpreter."""
    return (not INTERPRETED and device.type == "cuda"
            and torch.cuda.get_device_capability(device)[0] >= 9)


# SMs assumed for the flattened stage 1's program count where no GPU tells (the interpreter).
FLAT_CPU_SM_COUNT = 4
# SMs the side split (decode_config.side_launch_split) assumes without a GPU: None, no split
# (the interpreter runs every configuration alike); the tests set it to run the two launches.
SIDE_CPU_SM_COUNT: int | None = None


def prepare_decode(plan: Plan, cache: PagedKVCache, *,
                   config: KernelConfig | None = None, merge: str = "chunked",
                   merge_pdl: bool = True, flat_programs: int | None = None,
                   launch_order: str | None = None, side_launch: bool = True) -> DecodeLaunch:
    """Check `plan` against `cache` and put the plan's work list and scratch buffers on the device.

    config: overrides launch_config(plan, shape, KV page dtype, the GPU's SM count or None); that
        default's -vp falls back to its plain loop where -vp cannot run (_v_path_obstacle); an
        explicit -vp or -vw config is refused there.
    merge: stage 2 of split requests, one of MERGES: "chunked" (kernels/merge_chunked.py, the
        default: 16-row jobs at 2 warps in one launch) or "blocks" (kernels/merge.py, 64-row
        blocks at 4 warps, the merge before the fifteenth session; docs/KERNEL_NOTES.md) or
        "tail" (kernels/merge_tail.py: merged in stage 1's tail, no merge launch; measured
        slower on an H100).
    merge_pdl: DecodeLaunch.merge_pdl for the chunked merge (default on); True is ignored
        where pdl_supported says no.
    flat_programs: with a config of flat_per_sm > 0, the program count of the flattened stage 1
        (default flat_per_sm x the SM count, FLAT_CPU_SM_COUNT SMs without a GPU); 1.., capped
        at the task count.
    launch_order: one of LAUNCH_ORDERS: "plan" or "longest-first" (a static schedule's tasks
        launched longest item first, every KV head of an item together; the same bits: each
        task still runs alone in one program). Not with persistent schedules, the flattened
        stage 1 or the tail merge, whose programs take tasks in their own order. None (the
        default): the product's, product_launch_order where it can run, else "plan". A None
        config is chosen for the order the launch runs in, given or default.
    side_launch: with config None, a launch longest first and the chunked or blocks merge, let
        decode_config.side_launch_split run the short tasks as a second launch beside the long
        ones (DecodeLaunch.side) where it says so; False: one launch always (kernels/hybrid.py,
        whose decode part has its own stream order).
    """
    if merge not in MERGES:
        raise ValueError(f"merge: {merge!r} not allowed; allowed: {', '.join(MERGES)}")
    _check_plan(plan, cache)
    shape = cache.shape
    device = cache.device
    mode = SCHEDULE_MODES[plan.schedule]
    sm_count = (torch.cuda.get_device_properties(device).multi_processor_count
                if device.type == "cuda" else None)
    # The order the launch runs in decides the configuration's twin, so it comes first: the
    # product's where none is given (the plan's under the tail merge, whose programs take tasks
    # in their own order).
    order = launch_order or ("plan" if merge == "tail" else product_launch_order(plan))
    config_given = config
    if config is None:
        config = launch_config(plan, shape, cache.kv_dtype, sm_count, order)
        if _v_path_obstacle(config, "v_pairs", cache):
            # The table's -vp entry where it cannot run: the same loop reading V byte-wise.
            config = dataclasses.replace(config, v_pairs=False)
    for flag in ("v_widen", "v_pairs"):
        obstacle = _v_path_obstacle(config, flag, cache)
        if obstacle:
            raise ValueError(f"config.{flag}: {config.label()} {obstacle}")
    if config.flat_per_sm and merge == "tail":
        raise ValueError(f"merge: 'tail' not allowed with the flattened stage 1 ({config.label()})")
    if flat_programs is not None and flat_programs < 1:
        raise ValueError(f"flat_programs: {flat_programs} out of range; allowed: 1 and above")
    if launch_order is None:  # a flattened stage 1 (given config) takes tasks in its own order
        launch_order = "plan" if config.flat_per_sm else order
    check_launch_order(launch_order)
    longest_first = launch_order == "longest-first"
    if longest_first and (mode != 0 or config.flat_per_sm or merge == "tail"):
        raise ValueError(f"launch_order: 'longest-first' needs a static schedule without the "
                         f"flattened stage 1 or the tail merge (schedule {plan.schedule!r}, "
                         f"config {config.label()}, merge {merge!r})")
    split = plan.splits > 1
    row0 = np.zeros(plan.batch_size, dtype=np.int64)
    row0[split] = np.concatenate(([0], np.cumsum(plan.splits[split])[:-1]))
    num_rows = int(plan.splits[split].sum())
    part_row = np.where(split[plan.work_request], row0[plan.work_request] + plan.work_split, -1)
    items = np.stack([plan.work_request, plan.work_kv_start, plan.work_kv_end, part_row], axis=1)
    grid = (plan.num_items, plan.num_kv_heads) if mode == 0 else (plan.grid_size,)
    side = None
    if longest_first:
        # Each item keeps its partial row, so the merge reads the same rows in any order.
        items = items[launch_item_order(plan, launch_order)]
        mode, grid = LONGEST_FIRST_MODE, (plan.num_tasks,)
        split_at = None
        side_sms = sm_count or SIDE_CPU_SM_COUNT
        if side_launch and config_given is None and merge != "tail" and side_sms:
            # The table's entry, before any twin: the split runs the long items under it.
            entry = default_config(shape.head_dim, cache.kv_dtype, shape.page_size,
                                   plan.ctas_per_sm, num_kv_heads=shape.num_kv_heads,
                                   group_size=shape.group_size)
            split_at = side_launch_split(entry, shape.head_dim, element_bytes(cache.kv_dtype),
                                         side_sms, items[:, 2] - items[:, 1], plan.num_kv_heads)
        if split_at is not None:
            side_config, long_items = split_at
            config = entry
            if _v_path_obstacle(config, "v_pairs", cache):
                config = dataclasses.replace(config, v_pairs=False)
                side_config = dataclasses.replace(side_config, v_pairs=False)
            short = items[long_items:]
            items = items[:long_items]
            grid = (long_items * plan.num_kv_heads,)
            side = SideLaunch(
                config=side_config,
                items=torch.from_numpy(np.ascontiguousarray(short, dtype=np.int32)).to(device),
                grid=(short.shape[0] * plan.num_kv_heads,),
                stream=torch.cuda.Stream(device) if device.type == "cuda" else None)
    flat = None
    if config.flat_per_sm:
        programs = flat_programs or config.flat_per_sm * (sm_count or FLAT_CPU_SM_COUNT)
        flat = prepare_flat(items, plan.num_kv_heads, config.block_n, programs, device)
        grid = (flat.programs,)
    if mode == 0 and plan.num_kv_heads > 65535:
        raise ValueError(f"num_kv_heads: {plan.num_kv_heads} above the CUDA grid limit 65535")
    if plan.num_tasks + plan.grid_size >= 2**31:
        raise ValueError(f"plan: {plan.num_tasks} tasks; allowed: below 2^31 (int32 task ids)")
    merge_req = np.flatnonzero(split)
    tail = (prepare_tail_merge(merge_req, row0[merge_req], plan.splits[merge_req], num_rows,
                               shape.num_kv_heads, device)
            if merge == "tail" and merge_req.size else None)
    # The tail merge stores chunk results as partial rows after stage 1's.
    buffer_rows = num_rows + (tail.scratch_rows if tail is not None else 0)

    def as_dev(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(device)

    return DecodeLaunch(
        plan=plan,
        config=config,
        launch_order=launch_order,
        mode=mode,
        grid=grid,
        items=as_dev(items),
        partial_out=torch.empty((buffer_rows, shape.num_qo_heads, shape.head_dim),
                                dtype=torch.float32, device=device),
        partial_lse=torch.empty((buffer_rows, shape.num_qo_heads), dtype=torch.float32,
                                device=device),
        merge_requests=as_dev(merge_req),
        merge_row0=as_dev(row0[merge_req]),
        merge_count=as_dev(plan.splits[merge_req]),
        counter=torch.zeros(2, dtype=torch.int32, device=device),
        chunked_merge=prepare_chunked_merge(merge_req, row0[merge_req], plan.splits[merge_req],
                                            shape.num_qo_heads, shape.head_dim, device)
        if merge == "chunked" and merge_req.size else None,
        # A programmatic dependent waits for the launch before it in its stream only, so not
        # beside a side launch.
        merge_pdl=bool(merge == "chunked" and merge_req.size and merge_pdl
                       and pdl_supported(device) and side is None),
        tail_merge=tail,
        flat=flat,
        side=side,
    )


# The fp8 V paths that read V through a wider integer view, and their word size in bytes.
_V_WORD_BYTES = {"v_widen": (4, "int32 words"), "v_pairs": (2, "int16 pairs")}


def _v_path_obstacle(config: KernelConfig, flag: str, cache: PagedKVCache) -> str | None:
    """Why config's `flag` path (v_widen or v_pairs) cannot run on this fp8 cache, or None (also
    None when the flag is off or the cache is 16-bit, which ignores it): V pages off the view's
    word boundary, or a GPU before sm_89 (the inline asm's cvt.rn.f16x2.e4m3x2)."""
    if not (getattr(config, flag) and cache.is_fp8):
        return None
    size, words = _V_WORD_BYTES[flag]
    if cache.v_pages.data_ptr() % size:
        return f"reads V as {words}; v_pages must start on a {size}-byte boundary"
    if cache.device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(cache.device)
        if (major, minor) < (8, 9):
            return f"needs sm_89 or newer; this GPU is sm_{major}{minor}"
    return None


def run_decode(launch: DecodeLaunch, q: torch.Tensor, cache: PagedKVCache, *,
               sm_scale: float | None = None, out: torch.Tensor | None = None,
               launch_pdl: bool = False) -> torch.Tensor:
    """Launch stage 1 and, when a request is split, stage 2. Returns `out` [B, num_qo_heads, D].

    launch_pdl: launch stage 1 as the programmatic dependent of the stream's previous launch
    (sm_90+, never under the interpreter): kernels/hybrid.py's ordered colocated chain, where it
    may start once the previous grid's programs signal, not when they end. The merge then runs
    as an ordinary launch (launch.merge_pdl is not used): stage 1 of that chain does not wait
    for the grid before it, so only a full launch boundary orders the merge after both.

    Nothing here touches the host beyond the launches, so this is what a timer wraps. Two
    launches of one `DecodeLaunch` must not run concurrently (they share scratch and counter).
    """
    shape = cache.shape
    _check_queries(q, cache)
    if launch_pdl and launch.side is not None:
        raise ValueError("launch_pdl: not with a side split (prepare_decode(side_launch=False))")
    if out is None:
        out = torch.empty_like(q)
    elif (out.shape != q.shape or out.dtype != q.dtype or out.stride(2) != 1
          or out.device != q.device):
        raise ValueError(f"out: need q's shape {tuple(q.shape)}, dtype {q.dtype} and device, with "
                         "a contiguous head_dim axis")
    scale = 1.0 / math.sqrt(shape.head_dim) if sm_scale is None else float(sm_scale)
    g = shape.group_size
    # fp8 pages with 16-bit queries: K, V, q and the softmax weights go to fp16 for the products
    # (module docstring); under the interpreter fp16 products are exact already.
    fp16_products = cache.is_fp8 and q.dtype in (torch.bfloat16, torch.float16)
    p_dtype = torch.float16 if fp16_products else q.dtype
    upcast = INTERPRETED and q.dtype == torch.bfloat16 and not fp16_products
    # float32 inputs (the precise tests) must not go through tf32 products.
    precision = "ieee" if upcast or q.dtype == torch.float32 else "tf32"
    # fp8 pages: k_scale joins the score scale, v_scale multiplies the output (module docstring).
    k_scale = cache.k_scale if cache.is_fp8 else 1.0
    merge_pdl = (launch.merge_pdl and launch.chunked_merge is not None and not launch_pdl
                 and not INTERPRETED)

    def constants_for(cfg: KernelConfig) -> dict:
        return dict(
            NUM_QO_HEADS=shape.num_qo_heads, G=g, G_PAD=max(16, triton.next_power_of_2(g)),
            HEAD_DIM=shape.head_dim, PAGE_SIZE=shape.page_size, BLOCK_N=cfg.block_n,
            DOT_PRECISION=precision, UPCAST_DOT=upcast, P_DTYPE=_TL_DTYPES[p_dtype],
            KV_FP8=cache.is_fp8, Q_TO_FP16=fp16_products and q.dtype == torch.bfloat16,
            ASM=not INTERPRETED, V_PAIRS=cfg.v_pairs and fp16_products,
            **({"GDC_TRIGGER": True} if merge_pdl else {}))

    def options_for(cfg: KernelConfig) -> dict:
        return dict(
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            **({"maxnreg": cfg.max_registers} if cfg.max_registers and not INTERPRETED else {}),
            **({"launch_pdl": True} if launch_pdl and not INTERPRETED else {}))

    def attend(cfg: KernelConfig, grid: tuple, items: torch.Tensor, num_tasks: int) -> None:
        _attend_kernel[grid](
            q, cache.k_pages, cache.v_pages, out, launch.partial_out, launch.partial_lse,
            cache.page_indptr, cache.page_indices, items, launch.counter,
            launch.plan.num_items, num_tasks,
            launch.grid[0] if launch.mode in (1, 2) else 1,
            scale * k_scale * LOG2_E, cache.v_scale,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            cache.k_pages.stride(0), cache.k_pages.stride(1),
            shape.num_qo_heads * shape.head_dim,
            MODE=launch.mode, PREFETCH=cfg.prefetch, PAGE_AHEAD=cfg.page_ahead,
            V_WIDE=cfg.v_widen and cache.is_fp8, WARP_SPLIT=cfg.warp_split,
            PAGE_IDS_L2=cfg.page_ids_l2, **constants_for(cfg), **options_for(cfg),
            **_tail_args(launch.tail_merge),
        )

    cfg = launch.config
    if launch.flat is not None:
        launch_flat(launch.flat, q, cache.k_pages, cache.v_pages, out, launch.partial_out,
                    launch.partial_lse, cache.page_indptr, cache.page_indices,
                    scale * k_scale * LOG2_E, cache.v_scale, constants_for(cfg),
                    options_for(cfg))
    elif launch.side is None:
        attend(cfg, launch.grid, launch.items, launch.plan.num_tasks)
    else:
        # Side split (decode_config.side_launch_split): the long tasks here, the short ones on
        # the side stream at the same time; the merge below waits for both. In mode 3 a
        # launch's task count is its grid.
        side = launch.side
        if side.stream is None:  # the CPU: one launch after the other
            attend(cfg, launch.grid, launch.items, launch.grid[0])
            attend(side.config, side.grid, side.items, side.grid[0])
        else:
            main_stream = torch.cuda.current_stream(q.device)
            side.stream.wait_stream(main_stream)
            attend(cfg, launch.grid, launch.items, launch.grid[0])
            with torch.cuda.stream(side.stream):
                attend(side.config, side.grid, side.items, side.grid[0])
            # Joined before anything else on the caller's stream, so its tensors may be freed
            # and reused there as after a one-launch decode.
            main_stream.wait_stream(side.stream)
    if launch.tail_merge is not None:
        pass  # merged by stage 1 itself
    elif launch.chunked_merge is not None:
        launch_chunked_merge(launch.partial_out, launch.partial_lse, launch.chunked_merge, out,
                             pdl=merge_pdl)
    elif launch.merge_requests.shape[0] > 0:
        launch_merge(launch.partial_out, launch.partial_lse, launch.merge_requests,
                     launch.merge_row0, launch.merge_count, out)
    return out


def _tail_args(tail: TailMerge | None) -> dict:
    """The stage-1 launch's extra arguments for the tail merge (none without it)."""
    if tail is None:
        return {}
    return {"row_job_ptr": tail.row_job, "job_row0_ptr": tail.row0, "job_count_ptr": tail.count,
            "job_dest_ptr": tail.dest, "job_parent_ptr": tail.parent, "ticket_ptr": tail.tickets,
            "TAIL_MERGE": True}


def decode(q: torch.Tensor, cache: PagedKVCache, plan: Plan, *, sm_scale: float | None = None,
           config: KernelConfig | None = None) -> torch.Tensor:
    """Paged decode attention of `q` [B, num_qo_heads, head_dim] over `cache`, as `plan` cuts it.

    sm_scale defaults to 1/sqrt(head_dim). Returns a new tensor of q's shape and dtype.
    """
    return run_decode(prepare_decode(plan, cache, config=config), q, cache, sm_scale=sm_scale)


def _check_plan(plan: Plan, cache: PagedKVCache) -> None:
    shape = cache.shape
    if plan.num_kv_heads != shape.num_kv_heads:
        raise ValueError(f"plan.num_kv_heads: {plan.num_kv_heads} != cache's {shape.num_kv_heads}")
    if plan.page_size != shape.page_size:
        raise ValueError(f"plan.page_size: {plan.page_size} != cache's {shape.page_size}")
    if not np.array_equal(plan.kv_lens, cache.kv_lens):
        raise ValueError("plan.kv_lens: differ from the cache's kv_lens (a plan of another batch)")
    if not cache.k_pages.is_contiguous() or not cache.v_pages.is_contiguous():
        raise ValueError("cache: k_pages and v_pages must be contiguous")


def _check_queries(q: torch.Tensor, cache: PagedKVCache) -> None:
    s = cache.shape
    want = (cache.batch_size, s.num_qo_heads, s.head_dim)
    if tuple(q.shape) != want:
        raise ValueError(f"q: shape {tuple(q.shape)} != {want} (batch, num_qo_heads, head_dim)")
    if q.dtype != cache.dtype:
        raise ValueError(f"q.dtype: {q.dtype} != the cache's query dtype {cache.dtype}; allowed: "
                         f"{cache.dtype} (fp8 queries are not supported)")
    if q.stride(2) != 1:
        raise ValueError("q: the head_dim axis must be contiguous")
    if q.device != cache.device:
        raise ValueError(f"q.device: {q.device} != cache device {cache.device}")


__all__ = [
    "INTERPRETED",
    "MERGES",
    "LAUNCH_ORDERS",
    "SCHEDULE_MODES",
    "DecodeLaunch",
    "KernelConfig",
    "decode",
    "default_config",
    "product_launch_order",
    "launch_config",
    "prepare_decode",
    "query_rows_to_f16",
    "run_decode",
]

"""Hybrid attention in Triton: prefill chunks, speculative decodes and decodes of one batch.

`attention(q, cache, q_lens, plan)` runs a `HybridPlan` (kernels/hybrid_plan.py). q is
`[sum(q_lens), num_qo_heads, head_dim]` with the requests' new tokens in batch order; the cache is
the batch's `PagedKVCache` (kv_lens include the new tokens); the output has q's shape and dtype.
Query i of a request with q_len Q and kv_len L attends keys 0 .. L - Q + i.

One task is one work item for one KV head; the kernel packs its rows as (token, query head of the
group): row r is token r // G, head g = r % G, so GQA heads share each K/V load.
- prefill tile (kind 1, `_prefill_task`): block_m rows (64 or 128 = block_m // G tokens), keys
  in the tile's kv split; the keys every row sees run unmasked, only the diagonal / tail steps
  carry the causal mask; page ids are loaded one step ahead so 3 pipeline stages keep two K/V
  tiles in flight; tensor-core tiles of BLOCK_M x BLOCK_N.
- decode item (kind 0): all q_len x G rows of one request (padded to 16..256), keys of one split of
  the decode plan; the causal mask only bites for speculative decodes (q_len > 1).
- Single-token decodes with a launch of their own (serial, streams, or no prefill in the batch:
  hybrid_plan.decodes_through_decode_kernel) run kernels/decode.py instead: its launch over the
  decodes' own page tables (`PagedKVCache.subset`), its tuned configuration and merge, so a
  decode-only batch runs exactly today's decode kernel and fp8 decodes its fp8 loops.
FP8 caches (e4m3 pages, per-tensor k_scale / v_scale): k_scale is folded into the score scale
and v_scale multiplies the float32 output, so both products run as for a 16-bit cache of the
raw e4m3 values (every e4m3 value is exactly a bf16 and an fp16 value).
- Prefill tiles read a 16-bit copy of their requests' pages (`PrefillPages`), widened by one
  launch (`_widen_pages_kernel`) at the start of the step: a compute-bound tile then runs as on a
  16-bit cache instead of widening every K/V tile it loads (which every q tile of a chunk would
  repeat). Above hybrid_plan.PREFILL_WIDEN_MAX_BYTES of copy they widen where they load, as
  decode items do.
- Decode items widen each tile where they load it, to fp16 (one cvt.rn.f16x2.e4m3x2 per two
  elements on sm_90; bf16 would cost a second conversion per element), with bf16 queries taken to
  fp16 exactly by a power-of-two row scale (kernels/decode.py `query_rows_to_f16`) and the
  softmax weights rounded to fp16. The decode kernel's V-as-pairs loop (`-vp`) is not used here.
A task of a split tile/request writes a float32 partial output and its base-2 log-sum-exp; the
merge launch (`_merge_rows_kernel`) combines the partials of every split token row. Rows that see
no key of their split (a speculative token's split past its position) write lse = -inf, weight 0.

How tasks reach programs (plan.schedule):
- serial: a prefill launch, then a decode launch, each with its own block sizes and warps.
- streams: the same two launches, the decode one on a second CUDA stream (serial on CPU).
- fused: one launch over one work list (longest kv range first); a program branches on the kind.
- colocated: as streams, but the prefill launch is a persistent grid of one program per SM that
  takes tiles from a counter (MODE_DYNAMIC), launched first so that it holds part of every SM
  and the decode grid fills the rest; a tail of one more prefill program per SM follows the
  decode launch on its stream and joins the counter once the decodes are done.
- partitioned: as streams, but the decode launch is a persistent grid of plan.decode_programs
  programs (MODE_PERSISTENT: program p runs tasks p, p + N, ... through the page-ahead loop) so
  it holds about that many SMs and the prefill launch takes the rest.
- sm-aware: POD-Attention's SM-aware CTA scheduling. The grid holds one program per task; each
  reads its SM id (`mov.u32 %smid` through tl.inline_asm_elementwise), takes a ticket from its
  SM's counter, picks prefill or decode by the plan's ratio (plan.sm_ratio()), then takes the
  next task of that kind from the kind's counter, switching to the other kind when its own is
  used up (there is always one left: programs = tasks). The last program to finish resets the
  counters, so the launch replays (CUDA graphs) without a memset. Triton's interpreter has no
  %smid: there program_id % sm_count stands in (docs/KERNEL_NOTES.md).
In one launch both kinds share num_warps (8 for ctas_per_sm <= 2, else 4); CTAs per SM is an
occupancy the plan assumes: Triton cannot pin it, so it picks warps and the prefill tile size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents  # noqa: E402

from kvtune.kernels.decode import DecodeLaunch, prepare_decode, run_decode
from kvtune.kernels.decode_steps import query_rows_to_f16
from kvtune.kernels.decode_config import default_config
from kvtune.kernels.hybrid_plan import (MAX_DECODE_Q_LEN, HybridPlan, decode_kernel_allowed,
                                        decodes_through_decode_kernel, gluon_prefill_chosen,
                                        widened_prefill_pages)
from kvtune.kernels.paged import PagedKVCache
from kvtune.kernels.plan import check_launch_order

LOG2_E = 1.4426950408889634
FIELDS = 9  # kind, req, q_row0, n_tok, pos0, kv_lo, kv_hi, part_row, head
PREFILL_BLOCK_N = 64
MODE_GRID, MODE_SM_AWARE, MODE_PERSISTENT, MODE_DYNAMIC = 0, 1, 2, 3
# Schedules that launch prefill and decode separately, and those of them on two streams.
TWO_STREAMS = ("streams", "partitioned", "colocated")
TWO_LAUNCH = ("serial", *TWO_STREAMS)


@triton.constexpr_function
def _kv_dot_dtype(q_ty, kv_ty):
    """The type K/V tiles are widened to for the products: the query type, except fp8 pages
    with 16-bit queries, which go to fp16 (e4m3 -> fp16 is one cvt.rn.f16x2.e4m3x2 per two
    elements on sm_90, e4m3 -> bf16 costs that plus a conversion per element; both exact)."""
    if kv_ty == tl.float8e4nv and q_ty in (tl.bfloat16, tl.float16):
        return tl.float16
    return q_ty


@triton.jit
def _task_rows(q_ptr, k_ptr, page_indptr_ptr, task_ptr, qk_scale_log2, stride_q_t, stride_q_h,
               G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """A task's fields (its FIELDS int32 entries at task_ptr) and its query rows: BLOCK_M rows of
    tokens x G query heads of one KV head, loaded (fp16 for fp8 pages with 16-bit queries, with
    the scale folded into score_scale; float32 with UPCAST_DOT). Returns (req, q_row0, n_tok,
    pos0, kv_lo, kv_hi, part_row, page_base, tok, qo_head, row_ok, pos, offs_d, offs_n, q,
    score_scale, kv_head_off); pos: the last key each row may see; kv_head_off: the KV head's
    offset in a page row."""
    req = tl.load(task_ptr + 1)
    q_row0 = tl.load(task_ptr + 2)
    n_tok = tl.load(task_ptr + 3)
    pos0 = tl.load(task_ptr + 4)
    kv_lo = tl.load(task_ptr + 5)
    kv_hi = tl.load(task_ptr + 6)
    part_row = tl.load(task_ptr + 7)
    head = tl.load(task_ptr + 8)
    page_base = tl.load(page_indptr_ptr + req)

    rows = tl.arange(0, BLOCK_M)
    tok = rows // G
    qo_head = head * G + rows % G
    row_ok = tok < n_tok
    pos = pos0 + tok
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q_offs = ((q_row0 + tok).to(tl.int64) * stride_q_t + qo_head * stride_q_h)[:, None] \
        + offs_d[None, :]
    q = tl.load(q_ptr + q_offs, mask=row_ok[:, None], other=0.0)
    KV_TY: tl.constexpr = _kv_dot_dtype(q_ptr.dtype.element_ty, k_ptr.dtype.element_ty)
    score_scale = qk_scale_log2
    if q_ptr.dtype.element_ty != KV_TY:  # fp8 pages, bf16 queries: fp16 products
        q, q_inv = query_rows_to_f16(q)
        score_scale = (qk_scale_log2 * q_inv)[:, None]
    if UPCAST_DOT:
        q = q.to(tl.float32)
    kv_head_off = head * HEAD_DIM
    return (req, q_row0, n_tok, pos0, kv_lo, kv_hi, part_row, page_base, tok, qo_head, row_ok,
            pos, offs_d, offs_n, q, score_scale, kv_head_off)


@triton.jit
def _store_rows(acc, l_i, m_i, v_scale, out_ptr, part_o_ptr, part_lse_ptr, q_row0, tok, qo_head,
                row_ok, part_row, stride_o_t, stride_o_h, NUM_QO_HEADS: tl.constexpr,
                HEAD_DIM: tl.constexpr):
    """A task's rows out: normalised into `out` (part_row < 0), or as partial rows and their
    base-2 lses for the merge (a row that saw no key: lse -inf)."""
    offs_d = tl.arange(0, HEAD_DIM)
    has = l_i > 0
    # v_scale: the fp8 cache's V scale (exactly 1.0 for 16-bit pages: the same bits as before).
    o = acc / tl.where(has, l_i, 1.0)[:, None] * v_scale
    if part_row < 0:
        o_offs = ((q_row0 + tok).to(tl.int64) * stride_o_t + qo_head * stride_o_h)[:, None] \
            + offs_d[None, :]
        tl.store(out_ptr + o_offs, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:
        prow = (part_row + tok).to(tl.int64)
        tl.store(part_o_ptr + (prow * NUM_QO_HEADS + qo_head)[:, None] * HEAD_DIM
                 + offs_d[None, :], o, mask=row_ok[:, None])
        lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + prow * NUM_QO_HEADS + qo_head, lse, mask=row_ok)


@triton.jit
def _attend_task(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr,
                 page_indptr_ptr, page_indices_ptr, task_ptr, qk_scale_log2, v_scale,
                 stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok,
                 NUM_QO_HEADS: tl.constexpr, G: tl.constexpr, HEAD_DIM: tl.constexpr,
                 PAGE_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """Run the task whose FIELDS int32 entries start at task_ptr (see the module docstring)."""
    (req, q_row0, n_tok, pos0, kv_lo, kv_hi, part_row, page_base, tok, qo_head, row_ok, pos,
     offs_d, offs_n, q, score_scale, kv_head_off) = _task_rows(
        q_ptr, k_ptr, page_indptr_ptr, task_ptr, qk_scale_log2, stride_q_t, stride_q_h, G,
        HEAD_DIM, BLOCK_M, BLOCK_N, UPCAST_DOT)
    KV_TY: tl.constexpr = _kv_dot_dtype(q_ptr.dtype.element_ty, k_ptr.dtype.element_ty)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for n0 in range(kv_lo, kv_hi, BLOCK_N):
        key = n0 + offs_n
        valid = key < kv_hi
        page = tl.load(page_indices_ptr + page_base + key // PAGE_SIZE, mask=valid, other=0)
        kv_row = page.to(tl.int64) * stride_kv_page + (key % PAGE_SIZE) * stride_kv_tok
        kv_offs = kv_row[:, None] + kv_head_off + offs_d[None, :]
        k = tl.load(k_ptr + kv_offs, mask=valid[:, None], other=0.0).to(KV_TY)
        v = tl.load(v_ptr + kv_offs, mask=valid[:, None], other=0.0).to(KV_TY)
        if UPCAST_DOT:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * score_scale
        seen = valid[None, :] & (key[None, :] <= pos[:, None])
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no key yet keeps m = -inf; shift by 0 there to avoid inf - inf.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        p_in = p.to(v.dtype)
        if UPCAST_DOT:
            p_in = p_in.to(tl.float32)
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p_in, v, input_precision=DOT_PRECISION)
        m_i = m_new

    _store_rows(acc, l_i, m_i, v_scale, out_ptr, part_o_ptr, part_lse_ptr, q_row0, tok, qo_head,
                row_ok, part_row, stride_o_t, stride_o_h, NUM_QO_HEADS, HEAD_DIM)


@triton.jit
def _prefill_step(q, k, v, m_i, l_i, acc, key, pos, qk_scale_log2, MASKED: tl.constexpr,
                  DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """One BLOCK_N-key step of a prefill tile's online softmax (base 2). MASKED: apply the causal
    mask key <= pos (diagonal and ragged tail steps only; the rest see every key)."""
    if UPCAST_DOT:
        k = k.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale_log2
    if MASKED:
        s = tl.where(key[None, :] <= pos[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no key yet keeps m = -inf; shift by 0 there to avoid inf - inf.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = m_new
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p_in = p.to(v.dtype)
    if UPCAST_DOT:
        p_in = p_in.to(tl.float32)
        v = v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p_in, v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _prefill_task(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr,
                  page_indptr_ptr, page_indices_ptr, task_ptr, qk_scale_log2, v_scale,
                  stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok,
                  NUM_QO_HEADS: tl.constexpr, G: tl.constexpr, HEAD_DIM: tl.constexpr,
                  PAGE_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """A prefill tile (kind 1) laid out for Hopper's tensor cores (docs/KERNEL_NOTES.md, hybrid):
    keys every row sees (below the tile's first token's position) run unmasked in full BLOCK_N
    steps; only the diagonal / ragged tail steps carry the causal mask. Page ids are loaded one
    step ahead (loop-carried) so the pipeliner can keep num_stages - 1 K/V tiles in flight."""
    (req, q_row0, n_tok, pos0, kv_lo, kv_hi, part_row, page_base, tok, qo_head, row_ok, pos,
     offs_d, offs_n, q, score_scale, kv_head_off) = _task_rows(
        q_ptr, k_ptr, page_indptr_ptr, task_ptr, qk_scale_log2, stride_q_t, stride_q_h, G,
        HEAD_DIM, BLOCK_M, BLOCK_N, UPCAST_DOT)
    KV_TY: tl.constexpr = _kv_dot_dtype(q_ptr.dtype.element_ty, k_ptr.dtype.element_ty)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # Keys 0..pos0 are seen by every row of the tile: whole steps there need no mask.
    full_hi = kv_lo + tl.maximum(tl.minimum(kv_hi, pos0 + 1) - kv_lo, 0) // BLOCK_N * BLOCK_N
    key = kv_lo + offs_n
    page_cur = tl.load(page_indices_ptr + page_base + key // PAGE_SIZE, mask=key < kv_hi, other=0)
    for n0 in range(kv_lo, full_hi, BLOCK_N):
        key = n0 + offs_n
        kv_row = page_cur.to(tl.int64) * stride_kv_page + (key % PAGE_SIZE) * stride_kv_tok
        kv_offs = kv_row[:, None] + kv_head_off + offs_d[None, :]
        k = tl.load(k_ptr + kv_offs).to(KV_TY)
        v = tl.load(v_ptr + kv_offs).to(KV_TY)
        key_next = key + BLOCK_N
        page_cur = tl.load(page_indices_ptr + page_base + key_next // PAGE_SIZE,
                           mask=key_next < kv_hi, other=0)
        m_i, l_i, acc = _prefill_step(q, k, v, m_i, l_i, acc, key, pos, score_scale, False,
                                      DOT_PRECISION, UPCAST_DOT)
    for n0 in range(full_hi, kv_hi, BLOCK_N):
        key = n0 + offs_n
        valid = key < kv_hi
        kv_row = page_cur.to(tl.int64) * stride_kv_page + (key % PAGE_SIZE) * stride_kv_tok
        kv_offs = kv_row[:, None] + kv_head_off + offs_d[None, :]
        k = tl.load(k_ptr + kv_offs, mask=valid[:, None], other=0.0).to(KV_TY)
        v = tl.load(v_ptr + kv_offs, mask=valid[:, None], other=0.0).to(KV_TY)
        key_next = key + BLOCK_N
        page_cur = tl.load(page_indices_ptr + page_base + key_next // PAGE_SIZE,
                           mask=key_next < kv_hi, other=0)
        # Keys past kv_hi are past every row's pos only if kv_hi is the causal end; a split's
        # kv_hi may be below it, so mask them explicitly.
        m_i, l_i, acc = _prefill_step(q, k, v, m_i, l_i, acc, tl.where(valid, key, 1 << 30),
                                      pos, score_scale, True, DOT_PRECISION, UPCAST_DOT)

    _store_rows(acc, l_i, m_i, v_scale, out_ptr, part_o_ptr, part_lse_ptr, q_row0, tok, qo_head,
                row_ok, part_row, stride_o_t, stride_o_h, NUM_QO_HEADS, HEAD_DIM)


@triton.jit
def _sm_id(dummy, USE_SMID: tl.constexpr, NUM_SMS: tl.constexpr):
    if USE_SMID:
        # As triton.language.extra.cuda.smid (no operands). %smid is an opaque id that NVIDIA
        # allows to exceed the SM count, hence the modulo.
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32,
                                       is_pure=False, pack=1)
        return sm % NUM_SMS
    else:
        return dummy % NUM_SMS


@triton.jit
def _dispatch(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
              page_indices_ptr, task_ptr, qk_scale_log2, v_scale, stride_q_t, stride_q_h,
              stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok, kp_ptr, vp_ptr,
              pp_indptr_ptr, pp_indices_ptr, stride_pp_page, stride_pp_tok,
              NUM_QO_HEADS: tl.constexpr,
              G: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
              BLOCK_MP: tl.constexpr, BLOCK_NP: tl.constexpr, BLOCK_MD: tl.constexpr,
              BLOCK_ND: tl.constexpr, HAS_PREFILL: tl.constexpr, HAS_DECODE: tl.constexpr,
              DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
              DECODE_AHEAD: tl.constexpr = False):
    """Run one task by its kind: a prefill tile (_prefill_task) or a decode item (_attend_task;
    with DECODE_AHEAD through _prefill_task's page-ahead loop, for the persistent decode grid
    whose one program per SM must keep several K/V tiles in flight). Prefill tiles read their
    K/V through kp_ptr / vp_ptr and the pp_* page table: the cache's own pages, or for an fp8
    cache their 16-bit copy (HybridLaunch.prefill_pages); decode items always read the cache's
    own pages."""
    if DECODE_AHEAD:
        _prefill_task(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
                      page_indices_ptr, task_ptr, qk_scale_log2, v_scale, stride_q_t, stride_q_h,
                      stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok, NUM_QO_HEADS, G,
                      HEAD_DIM, PAGE_SIZE, BLOCK_MD, BLOCK_ND, DOT_PRECISION, UPCAST_DOT)
    elif HAS_PREFILL and HAS_DECODE:
        kind = tl.load(task_ptr)
        if kind == 1:
            _prefill_task(q_ptr, kp_ptr, vp_ptr, out_ptr, part_o_ptr, part_lse_ptr,
                          pp_indptr_ptr, pp_indices_ptr, task_ptr, qk_scale_log2, v_scale,
                          stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_pp_page,
                          stride_pp_tok, NUM_QO_HEADS, G, HEAD_DIM, PAGE_SIZE, BLOCK_MP,
                          BLOCK_NP, DOT_PRECISION, UPCAST_DOT)
        else:
            _attend_task(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
                         page_indices_ptr, task_ptr, qk_scale_log2, v_scale, stride_q_t, stride_q_h,
                         stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok, NUM_QO_HEADS, G,
                         HEAD_DIM, PAGE_SIZE, BLOCK_MD, BLOCK_ND, DOT_PRECISION, UPCAST_DOT)
    elif HAS_PREFILL:
        _prefill_task(q_ptr, kp_ptr, vp_ptr, out_ptr, part_o_ptr, part_lse_ptr, pp_indptr_ptr,
                      pp_indices_ptr, task_ptr, qk_scale_log2, v_scale, stride_q_t, stride_q_h,
                      stride_o_t, stride_o_h, stride_pp_page, stride_pp_tok, NUM_QO_HEADS, G,
                      HEAD_DIM, PAGE_SIZE, BLOCK_MP, BLOCK_NP, DOT_PRECISION, UPCAST_DOT)
    else:
        _attend_task(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
                     page_indices_ptr, task_ptr, qk_scale_log2, v_scale, stride_q_t, stride_q_h,
                     stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok, NUM_QO_HEADS, G,
                     HEAD_DIM, PAGE_SIZE, BLOCK_MD, BLOCK_ND, DOT_PRECISION, UPCAST_DOT)


@triton.jit(do_not_specialize=["num_prefill", "num_decode", "ratio_p", "ratio_d",
                               "dynamic_programs"])
def _hybrid_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr,
    page_indptr_ptr, page_indices_ptr, tasks_ptr, counter_ptr,
    num_prefill, num_decode, ratio_p, ratio_d, dynamic_programs, qk_scale_log2, v_scale,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok,
    kp_ptr, vp_ptr, pp_indptr_ptr, pp_indices_ptr, stride_pp_page, stride_pp_tok,
    NUM_QO_HEADS: tl.constexpr, G: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr, BLOCK_MP: tl.constexpr, BLOCK_NP: tl.constexpr,
    BLOCK_MD: tl.constexpr, BLOCK_ND: tl.constexpr, MODE: tl.constexpr,
    HAS_PREFILL: tl.constexpr, HAS_DECODE: tl.constexpr, USE_SMID: tl.constexpr,
    NUM_SMS: tl.constexpr, CTR_PAD: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr, DECODE_AHEAD: tl.constexpr = False,
    GDC_TRIGGER: tl.constexpr = False, ORDERED_ROLE: tl.constexpr = 0,
):
    pid = tl.program_id(0)
    if GDC_TRIGGER:
        # Programmatic dependent launch (HybridConfig.ordered_launch): the next launch on this
        # stream may start once every program of this one has got here, i.e. is resident.
        gdc_launch_dependents()
    if MODE != 1:
        t = pid
    else:
        # SM-aware binding (POD-Attention, Fig. 9): the SM's ticket picks the kind.
        sm = _sm_id(pid, USE_SMID, NUM_SMS)
        ticket = tl.atomic_add(counter_ptr + sm, 1)
        want_prefill = (ticket % (ratio_p + ratio_d)) < ratio_p
        if want_prefill:
            t = tl.atomic_add(counter_ptr + NUM_SMS, 1)
            if t >= num_prefill:
                t = num_prefill + tl.atomic_add(counter_ptr + NUM_SMS + 1, 1)
        else:
            t = tl.atomic_add(counter_ptr + NUM_SMS + 1, 1)
            if t >= num_decode:
                t = tl.atomic_add(counter_ptr + NUM_SMS, 1)
            else:
                t = num_prefill + t
    if MODE == 3:
        # Dynamic persistent grid: programs take the next task from one counter until none is
        # left. Several launches may share the counter (a co-located launch and a tail launch
        # that joins once the other kind's launch has finished); dynamic_programs counts the
        # programs of all of them, and the last one to leave resets the counters.
        t = tl.atomic_add(counter_ptr + NUM_SMS, 1)
        while t < num_prefill + num_decode:
            _dispatch(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
                      page_indices_ptr, tasks_ptr + t.to(tl.int64) * 9, qk_scale_log2, v_scale,
                      stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_kv_page,
                      stride_kv_tok, kp_ptr, vp_ptr, pp_indptr_ptr, pp_indices_ptr,
                      stride_pp_page, stride_pp_tok, NUM_QO_HEADS, G, HEAD_DIM, PAGE_SIZE,
                      BLOCK_MP, BLOCK_NP,
                      BLOCK_MD, BLOCK_ND, HAS_PREFILL, HAS_DECODE, DOT_PRECISION, UPCAST_DOT,
                      DECODE_AHEAD)
            t = tl.atomic_add(counter_ptr + NUM_SMS, 1)
        if ORDERED_ROLE == 0:
            done = tl.atomic_add(counter_ptr + NUM_SMS + 2, 1)
            if done == dynamic_programs - 1:
                offs = tl.arange(0, CTR_PAD)
                tl.store(counter_ptr + offs, tl.zeros_like(offs), mask=offs < NUM_SMS + 4)
        elif ORDERED_ROLE == 1:
            # The persistent grid of an ordered chain (HybridConfig.ordered_launch): count out
            # (the atomic orders this program's stores before it); the tail resets.
            tl.atomic_add(counter_ptr + NUM_SMS + 2, 1)
        else:
            # The tail of an ordered chain, the last launch of it: leave only once every one of
            # the dynamic_programs persistent programs has counted out, so that the tail's
            # completion, which is all the next launch on the stream is sure to wait for,
            # follows every write of the persistent grid. Its last program resets the counters.
            out_count = tl.atomic_add(counter_ptr + NUM_SMS + 2, 0)
            while out_count < dynamic_programs:
                out_count = tl.atomic_add(counter_ptr + NUM_SMS + 2, 0)
            left = tl.atomic_add(counter_ptr + NUM_SMS + 3, 1)
            if left == tl.num_programs(0) - 1:
                offs = tl.arange(0, CTR_PAD)
                tl.store(counter_ptr + offs, tl.zeros_like(offs), mask=offs < NUM_SMS + 4)
    elif MODE == 2:
        # Persistent grid: a few programs stride over the tasks so the launch holds only part of
        # the SMs (`partitioned`: the decodes, through the page-ahead loop) or only part of each
        # SM (a co-located two-stream launch), and a launch on the other stream takes the rest.
        for t2 in range(pid, num_prefill + num_decode, tl.num_programs(0)):
            _dispatch(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
                      page_indices_ptr, tasks_ptr + t2 * 9, qk_scale_log2, v_scale,
                      stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_kv_page,
                      stride_kv_tok, kp_ptr, vp_ptr, pp_indptr_ptr, pp_indices_ptr,
                      stride_pp_page, stride_pp_tok, NUM_QO_HEADS, G, HEAD_DIM, PAGE_SIZE,
                      BLOCK_MP, BLOCK_NP,
                      BLOCK_MD, BLOCK_ND, HAS_PREFILL, HAS_DECODE, DOT_PRECISION, UPCAST_DOT,
                      DECODE_AHEAD)
    else:
        _dispatch(q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
                  page_indices_ptr, tasks_ptr + t.to(tl.int64) * 9, qk_scale_log2, v_scale,
                  stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok,
                  kp_ptr, vp_ptr, pp_indptr_ptr, pp_indices_ptr, stride_pp_page, stride_pp_tok,
                  NUM_QO_HEADS, G, HEAD_DIM, PAGE_SIZE, BLOCK_MP, BLOCK_NP, BLOCK_MD, BLOCK_ND,
                  HAS_PREFILL, HAS_DECODE, DOT_PRECISION, UPCAST_DOT, DECODE_AHEAD)
    if MODE == 1:
        done = tl.atomic_add(counter_ptr + NUM_SMS + 2, 1)
        if done == num_prefill + num_decode - 1:
            offs = tl.arange(0, CTR_PAD)
            tl.store(counter_ptr + offs, tl.zeros_like(offs), mask=offs < NUM_SMS + 4)


@triton.jit
def _widen_pages_kernel(src_k_ptr, src_v_ptr, dst_k_ptr, dst_v_ptr, src_pages_ptr,
                        stride_src_page, PAGE_ELEMS: tl.constexpr, BLOCK: tl.constexpr):
    """dst page j (contiguous, PAGE_ELEMS elements) = src page src_pages[j], K and V, widened
    from e4m3 to the destination's 16-bit type (exact). Grid: (pages, cdiv(PAGE_ELEMS, BLOCK))."""
    j = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < PAGE_ELEMS
    src = tl.load(src_pages_ptr + j).to(tl.int64) * stride_src_page + offs
    dst = j.to(tl.int64) * PAGE_ELEMS + offs
    k = tl.load(src_k_ptr + src, mask=ok, other=0.0)
    tl.store(dst_k_ptr + dst, k.to(dst_k_ptr.dtype.element_ty), mask=ok)
    v = tl.load(src_v_ptr + src, mask=ok, other=0.0)
    tl.store(dst_v_ptr + dst, v.to(dst_v_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _merge_rows_kernel(part_o_ptr, part_lse_ptr, merge_ptr, out_ptr, stride_o_t, stride_o_h,
                       NUM_QO_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Output row merge_ptr[i, 0] = LSE-weighted sum of partial rows row0 + s * stride."""
    i = tl.program_id(0)
    h = tl.program_id(1)
    out_row = tl.load(merge_ptr + i * 4)
    row0 = tl.load(merge_ptr + i * 4 + 1)
    count = tl.load(merge_ptr + i * 4 + 2)
    stride = tl.load(merge_ptr + i * 4 + 3)
    offs_d = tl.arange(0, HEAD_DIM)
    m = tl.load(part_lse_ptr + row0.to(tl.int64) * NUM_QO_HEADS + h)  # split 0: always finite
    w_sum = m * 0.0 + 1.0
    acc = tl.load(part_o_ptr + (row0.to(tl.int64) * NUM_QO_HEADS + h) * HEAD_DIM + offs_d)
    for s in range(1, count):
        row = (row0 + s * stride).to(tl.int64)
        lse = tl.load(part_lse_ptr + row * NUM_QO_HEADS + h)
        o = tl.load(part_o_ptr + (row * NUM_QO_HEADS + h) * HEAD_DIM + offs_d)
        m_new = tl.maximum(m, lse)
        alpha = tl.exp2(m - m_new)
        w = tl.exp2(lse - m_new)
        acc = acc * alpha + w * o
        w_sum = w_sum * alpha + w
        m = m_new
    tl.store(out_ptr + out_row.to(tl.int64) * stride_o_t + h * stride_o_h + offs_d,
             (acc / w_sum).to(out_ptr.dtype.element_ty))


INTERPRETED = type(_hybrid_kernel).__name__ == "InterpretedFunction"


@dataclass(frozen=True)
class HybridConfig:
    """Compile-time choices. Prefill tiles: BLOCK_MP = plan.prefill_block_m rows x block_np keys.
    Decode items: block_md rows (q_len x G padded to 16..256) x block_nd keys in a decode-only
    launch (the decode kernel's tuned block, so decode-only batches match kernels/decode.py) or
    block_nd_fused keys where both kinds share a launch. Warps and pipeline stages per launch."""

    block_np: int
    block_md: int
    block_nd: int
    block_nd_fused: int
    prefill_warps: int
    decode_warps: int
    fused_warps: int
    num_stages: int = 2
    fused_stages: int = 2
    prefill_stages: int = 3
    # Two-launch schedules on two streams: launch the prefill kernel first (the decode one then
    # fills what the prefill CTAs leave of each SM) instead of the decode kernel first.
    prefill_first: bool = False
    # Co-location on two streams: a persistent grid of this many programs (0: one program per
    # task) runs that kind's tasks and is launched first, so that it holds only part of every
    # SM and the other kind's launch fills the rest (one prefill CTA beside decode CTAs).
    persistent_prefill_programs: int = 0
    persistent_decode_programs: int = 0
    # With a persistent prefill grid: this many more prefill programs, launched on the decode
    # stream after the decode launch, take prefill tasks from the same counter (dynamic
    # fetching) so the prefill regains whole SMs once the decodes are done.
    prefill_tail_programs: int = 0
    # Decode items through the page-ahead loop (K/V tiles in flight as kernels/decode.py's
    # page-ahead configurations) with ahead_stages stages and ahead_block_n keys per step.
    decode_ahead: bool = False
    ahead_stages: int = 3
    ahead_block_n: int = 64
    # A register cap (ptxas maxnreg) for the prefill launch, so that a 128-row tile at 8 warps
    # leaves room for a decode CTA on its SM (None: the compiler's choice).
    prefill_maxnreg: int | None = None
    # Co-location on one stream by programmatic dependent launch (sm_90+) instead of two
    # streams: the persistent prefill grid signals once each program starts, and the decode grid
    # (then the tail) launch as its dependents, so every persistent prefill program is resident
    # before any decode program. On two streams the order is a race: the decode grid sometimes
    # fills the SMs first, and the same step then reads 248 or 436 us (docs/PERFORMANCE.md).
    # No grid of the chain waits (griddepcontrol.wait), so the next launch on the stream is
    # only sure to wait for the tail: the tail's programs therefore leave only once every
    # persistent program has counted out of its loop (after its last store), and the tail's last
    # program resets the counters. hybrid_config turns it on for the colocated schedule (it
    # falls back to two streams where the GPU has no programmatic launch): on an H100 (thirteenth
    # session, docs/PERFORMANCE.md) this version replayed 100 times per case bit for bit with its
    # scratch NaN-filled between replays, and ran 1.07x faster than serial in geomean over 12
    # sweep cases against 1.04x for two streams (worst 0.92x against 0.79x).
    ordered_launch: bool = False
    # Prefill tiles of a one-program-per-task prefill launch (serial, streams, partitioned, and
    # colocated without decodes) through kernels/prefill_wgmma.py's Gluon kernel (asynchronous
    # warpgroup products, 128-key steps; sm_90 only, see prefill_wgmma_ok) with
    # wgmma_block_n keys per step and wgmma_stages K/V buffers. hybrid_config turns it on where
    # it was measured faster (head_dim 128, 128-row tiles: 1.11-1.13x the Triton tile on an
    # H100, docs/PERFORMANCE.md, nineteenth session); persistent prefill grids keep Triton's.
    prefill_wgmma: bool = False
    wgmma_block_n: int = 128
    wgmma_stages: int = 3
    # The persistent prefill grid and tail of the colocated schedule through the same Gluon
    # kernel (PERSISTENT: the dynamic counter and the ordered-launch roles of MODE_DYNAMIC),
    # with colocated_wgmma_block_n keys per step and colocated_wgmma_stages K/V buffers: the
    # 64-row tile must leave an SM room for decode programs beside it. Off: correct on an H100
    # but no faster than the Triton grid over 33 sweep cases (64 x 3: 1.054-1.081x serial in
    # geomean against 1.061-1.069x; 64 x 2 slower; docs/PERFORMANCE.md, twentieth session).
    colocated_wgmma: bool = False
    colocated_wgmma_block_n: int = 64
    colocated_wgmma_stages: int = 3


def hybrid_config(plan: HybridPlan, cache: PagedKVCache) -> HybridConfig:
    """The configuration of a plan on a cache's shape and dtype (never from kv_lens).

    Where both kinds share a launch, its shared memory is the larger branch's: the decode key
    block is capped at 64 there (the decode kernel's 128-key, two-stage block alone would hold
    about 128 KB and leave one program per SM, with nothing to co-locate), and with 4 CTAs per SM
    the pipeline drops to one stage so four programs can fit an SM's 228 KB.
    """
    shape = cache.shape
    dec = default_config(shape.head_dim, cache.dtype, shape.page_size, 2, decode_launch=False)
    dq = plan.q_lens[plan.decode_requests]
    max_dq = int(dq.max()) if dq.size else 1
    block_md = max(16, triton.next_power_of_2(max_dq * shape.group_size))
    # Large decode tiles (speculative x big groups) and head_dim 256 need a smaller key block.
    block_nd = dec.block_n if block_md <= 16 else min(dec.block_n, 64)
    if shape.head_dim == 256 or block_md >= 128:
        block_nd = min(block_nd, 32)
    block_np = 32 if shape.head_dim == 256 else PREFILL_BLOCK_N
    few = plan.ctas_per_sm <= 2
    # colocated: one persistent prefill program per SM, then a tail of one more per SM.
    colocated = plan.sm_count if plan.schedule == "colocated" else 0
    return HybridConfig(block_np=block_np, block_md=block_md, block_nd=block_nd,
                        block_nd_fused=min(block_nd, 64),
                        prefill_warps=8 if plan.prefill_block_m == 128 else 4,
                        # 128+ packed rows (speculative x large groups) spill with 4 warps.
                        decode_warps=dec.num_warps if block_md <= 64 else 8,
                        fused_warps=8 if few or block_md > 64 else 4,
                        num_stages=dec.num_stages, fused_stages=2 if few else 1,
                        # 3 stages keep two 64-key K/V tiles in flight (page ids one step ahead;
                        # 96 KB + Q, 221-236 registers x 256 threads, no spills in a local sm_90
                        # compile); 128-key tiles spill at 8 warps (docs/KERNEL_NOTES.md).
                        prefill_stages=3 if shape.head_dim <= 128 else 2,
                        ahead_stages=3 if shape.head_dim <= 128 else 2, ahead_block_n=block_nd,
                        decode_ahead=bool(plan.decode_ahead),
                        persistent_prefill_programs=colocated, prefill_tail_programs=colocated,
                        ordered_launch=colocated > 0,
                        prefill_wgmma=(gluon_prefill_chosen(plan, shape.head_dim)
                                       and prefill_wgmma_ok(plan, cache, cache.k_pages.device)))


def prefill_wgmma_ok(plan: HybridPlan, cache: PagedKVCache, device) -> bool:
    """Whether kernels/prefill_wgmma.py can run this plan's prefill tiles: Gluon's Hopper ops
    (a compiled sm_90 GPU, never the interpreter), 64- or 128-row tiles, head_dim 64 or 128, 16-bit
    queries (an fp8 cache's prefill tiles read its 16-bit copy, as they do in hybrid.py)."""
    from kvtune.kernels import prefill_wgmma

    device = torch.device(device)
    return (prefill_wgmma.HAS_GLUON and not INTERPRETED and device.type == "cuda"
            and torch.cuda.get_device_capability(device) == (9, 0)
            and plan.prefill_block_m in prefill_wgmma.BLOCK_MS
            and cache.shape.head_dim in prefill_wgmma.HEAD_DIMS
            and cache.shape.dtype in ("bf16", "fp16"))


def run_prefill_wgmma(launch, q, out, qk_scale_log2, v_scale, pk, pv, p_indptr, p_indices, *,
                      programs=None, dynamic_programs=0, trigger=False, dependent=False, role=0):
    """The prefill launch through kernels/prefill_wgmma.py: one program per prefill task, or
    (programs > 0) a persistent grid of that many programs taking tasks from launch.counter,
    as `_hybrid_kernel`'s MODE_DYNAMIC with the same dynamic_programs, trigger, dependent and
    role arguments (run_hybrid's launch_kernel)."""
    from kvtune.kernels import prefill_wgmma

    if INTERPRETED or q.device.type != "cuda":
        knob = "colocated_wgmma" if programs else "prefill_wgmma"
        raise ValueError(f"prefill_wgmma: the Gluon prefill tile needs a compiled sm_90 GPU "
                         f"(kernels.hybrid.prefill_wgmma_ok); set HybridConfig.{knob}=False")
    cfg, plan = launch.config, launch.plan
    _, page_size, num_kv_heads, head_dim = pk.shape  # [pages, page_size, KV heads, head_dim]
    n = launch.num_prefill
    if n == 0:
        return
    block_n, stages = (cfg.colocated_wgmma_block_n, cfg.colocated_wgmma_stages) if programs \
        else (cfg.wgmma_block_n, cfg.wgmma_stages)
    extra = {"PERSISTENT": True, "NUM_SMS": plan.sm_count, "ORDERED_ROLE": role,
             "CTR_PAD": triton.next_power_of_2(plan.sm_count + 4)} if programs else {}
    if trigger:
        extra["GDC_TRIGGER"] = True
    if dependent:
        extra["launch_pdl"] = True
    prefill_wgmma.prefill_wgmma_kernel[(programs or n,)](
        q, pk, pv, out, launch.partial_out, launch.partial_lse, p_indptr, p_indices,
        launch.prefill_tasks, launch.counter, n, dynamic_programs, qk_scale_log2, v_scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), pk.stride(0), pk.stride(1),
        NUM_QO_HEADS=q.shape[1], G=q.shape[1] // num_kv_heads, HEAD_DIM=head_dim,
        PAGE_SIZE=page_size, BLOCK_M=plan.prefill_block_m, BLOCK_N=block_n, STAGES=stages,
        num_warps=prefill_wgmma.num_warps_for(plan.prefill_block_m), **extra)


def has_programmatic_launch(device: torch.device) -> bool:
    """Programmatic dependent launch: a CUDA GPU of compute capability 9.0 or newer (never the
    interpreter)."""
    return (device.type == "cuda" and not INTERPRETED
            and torch.cuda.get_device_capability(device) >= (9, 0))


@dataclass(frozen=True, eq=False)
class PrefillPages:
    """A 16-bit copy of the fp8 cache's pages that prefill tiles read: k, v [n, page_size,
    num_kv_heads, head_dim] in the query dtype; page_indptr (int32 [B + 1]: request r's copy is
    pages page_indptr[r] .. page_indptr[r + 1], none for a decode-only request); page_indices
    (int32 [n], 0..n-1); src_pages (int32 [n]: the cache page each copy page is widened from)."""

    k: torch.Tensor
    v: torch.Tensor
    page_indptr: torch.Tensor
    page_indices: torch.Tensor
    src_pages: torch.Tensor


def prefill_pages(plan: HybridPlan, cache: PagedKVCache) -> PrefillPages | None:
    """The 16-bit copy of the prefill requests' pages for an fp8 cache with 16-bit queries, or
    None where kernels/hybrid_plan.py `widened_prefill_pages` says 0 (a 16-bit cache, no prefill
    tile, a copy above PREFILL_WIDEN_MAX_BYTES: tiles widen where they load) or where the pages
    are not contiguous within themselves.

    Why a copy: a prefill tile is compute-bound and every q tile of a chunk reads the whole
    K/V range again; widening e4m3 in the tile puts a shared -> register -> shared pass before
    each tensor-core product (1.4x slower than 16-bit pages on an H200, docs/PERFORMANCE.md),
    while widening each page once costs one read of 1 byte and one write of 2 bytes per element.
    """
    shape = cache.shape
    if widened_prefill_pages(plan, shape) == 0 or cache.dtype not in (torch.bfloat16,
                                                                       torch.float16):
        return None
    for pages in (cache.k_pages, cache.v_pages):
        if pages.stride()[1:] != (shape.num_kv_heads * shape.head_dim, shape.head_dim, 1) \
                or pages.stride(0) != cache.k_pages.stride(0):
            return None
    reqs = np.unique(plan.tile_request)
    prefills = cache.subset(reqs)  # their page ids, in request then token order
    counts = np.zeros(cache.batch_size, dtype=np.int64)
    counts[reqs] = np.diff(prefills.page_indptr.cpu().numpy())
    n = int(counts.sum())
    device = cache.device
    copy_shape = (n, shape.page_size, shape.num_kv_heads, shape.head_dim)

    def dev(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(device)
    return PrefillPages(
        k=torch.empty(copy_shape, dtype=cache.dtype, device=device),
        v=torch.empty(copy_shape, dtype=cache.dtype, device=device),
        page_indptr=dev(np.concatenate(([0], np.cumsum(counts)))),
        page_indices=dev(np.arange(n)), src_pages=prefills.page_indices)


@dataclass(frozen=True, eq=False)
class HybridLaunch:
    """Device tables for one (plan, cache): task lists (int32 [n, 9]), partials, merge table
    (int32 [rows, 4]: out row, first partial row, splits, stride), SM counters."""

    plan: HybridPlan
    config: HybridConfig
    prefill_tasks: torch.Tensor
    decode_tasks: torch.Tensor
    fused_tasks: torch.Tensor
    partial_out: torch.Tensor
    partial_lse: torch.Tensor
    merge: torch.Tensor
    counter: torch.Tensor
    num_prefill: int
    num_decode: int
    side_stream: object = None
    # fp8 caches: the prefill requests' pages widened to 16 bits once per step (None: prefill
    # tiles read the cache's own pages).
    prefill_pages: PrefillPages | None = None
    # Decodes through kernels/decode.py (None: the hybrid kernel's decode items): its launch on
    # decode_cache (the decodes' page tables); their query rows are q[decode_rows[0]:
    # decode_rows[1]] when contiguous (decode_index None), else gathered through decode_index
    # (int64 [Bd]) into decode_q and scattered back from decode_out.
    decode_kernel: DecodeLaunch | None = None
    decode_cache: PagedKVCache | None = None
    decode_rows: tuple = (0, 0)
    decode_index: torch.Tensor | None = None
    decode_q: torch.Tensor | None = None
    decode_out: torch.Tensor | None = None

    @property
    def num_launches(self) -> int:
        if self.decode_kernel is not None:
            gather = 2 if self.decode_index is not None else 0
            attend = (1 if self.num_prefill else 0) + self.decode_kernel.num_launches + gather
        else:
            attend = 2 if self.plan.schedule in TWO_LAUNCH \
                and self.num_prefill and self.num_decode else 1
        return attend + (self.merge.shape[0] > 0) + (self.prefill_pages is not None)


def prepare_hybrid(plan: HybridPlan, cache: PagedKVCache, q_lens=None, *,
                   decode_kernel: bool | None = None,
                   decode_launch_order: str | None = None) -> HybridLaunch:
    """Check `plan` against `cache` (and q_lens) and build the device tables.

    decode_kernel: run the decodes through kernels/decode.py (True) or the hybrid kernel's decode
    items (False); None: hybrid_plan.decodes_through_decode_kernel (the plan's decode_kernel
    knob, else the schedule's default). True needs every decode at
    q_len 1 and a schedule whose decodes launch on their own (hybrid_plan.decode_kernel_allowed:
    serial, streams, colocated, or no prefill).
    decode_launch_order: the order those decodes' stage 1 hands out its tasks
    (kernels.plan.LAUNCH_ORDERS); None, the default: the decode-only product's
    (prepare_decode's default, longest first for a static plan; the hybrid files before the
    thirtieth session were validated with "plan"). Not used by the hybrid kernel's own decode
    items.
    """
    if decode_launch_order is not None:
        check_launch_order(decode_launch_order)
    if decode_kernel and not decode_kernel_allowed(plan):
        raise ValueError("decode_kernel: True needs decodes of q_len 1 in a serial, streams or "
                         "colocated schedule or a batch without prefill; allowed here: False or "
                         "None")
    use_dk = decodes_through_decode_kernel(plan, decode_kernel)
    shape = cache.shape
    if q_lens is not None and not np.array_equal(np.asarray(q_lens, dtype=np.int64), plan.q_lens):
        raise ValueError("q_lens: differ from the plan's q_lens (a plan of another batch)")
    if not np.array_equal(plan.kv_lens, cache.kv_lens):
        raise ValueError("plan.kv_lens: differ from the cache's kv_lens (a plan of another batch)")
    if plan.num_kv_heads != shape.num_kv_heads or plan.page_size != shape.page_size \
            or plan.group_size != shape.group_size:
        raise ValueError("plan: num_kv_heads/page_size/group_size differ from the cache's shape")
    H = shape.num_kv_heads
    q, kv = plan.q_lens, plan.kv_lens
    q_start = np.concatenate(([0], np.cumsum(q)[:-1]))
    part_rows = 0
    merge_rows = []

    # Prefill tiles: tasks tile-major (a heavy tile's heads start together).
    tr, ts, te = plan.tile_request, plan.tile_q_start, plan.tile_q_end
    n_tok = te - ts
    base = np.full(tr.shape[0], -1, dtype=np.int64)
    split = plan.tile_splits > 1
    if split.any():
        # One partial block per (request, token range): splits x tokens rows.
        groups = {}
        for i in np.flatnonzero(split):
            key = (int(tr[i]), int(ts[i]))
            if key not in groups:
                groups[key] = part_rows
                ntk = int(n_tok[i])
                s = int(plan.tile_splits[i])
                toks = np.arange(ntk)
                merge_rows.append(np.stack([q_start[tr[i]] + ts[i] + toks, part_rows + toks,
                                            np.full(ntk, s), np.full(ntk, ntk)], axis=1))
                part_rows += s * ntk
            base[i] = groups[key] + plan.tile_split[i] * n_tok[i]
    pre = np.stack([np.ones_like(tr), tr, q_start[tr] + ts, n_tok, kv[tr] - q[tr] + ts,
                    plan.tile_kv_start, plan.tile_kv_end, base], axis=1)
    pre_tasks = np.repeat(pre, H, axis=0)
    pre_tasks = np.concatenate([pre_tasks, np.tile(np.arange(H), pre.shape[0])[:, None]], axis=1)

    # Decode items: head-major task order, as kernels/decode.py.
    dp = plan.decode_plan
    if dp is not None and not use_dk:
        reqs = plan.decode_requests
        r = reqs[dp.work_request]
        ql = q[r]
        dbase = np.full(dp.num_items, -1, dtype=np.int64)
        row0 = {}
        for d in np.flatnonzero(dp.splits > 1):
            b = int(reqs[d])
            row0[d] = part_rows
            s, ntk = int(dp.splits[d]), int(q[b])
            toks = np.arange(ntk)
            merge_rows.append(np.stack([q_start[b] + toks, part_rows + toks, np.full(ntk, s),
                                        np.full(ntk, ntk)], axis=1))
            part_rows += s * ntk
        for i in np.flatnonzero(dp.splits[dp.work_request] > 1):
            dbase[i] = row0[int(dp.work_request[i])] + dp.work_split[i] * ql[i]
        items = np.stack([np.zeros_like(r), r, q_start[r], ql, kv[r] - ql, dp.work_kv_start,
                          dp.work_kv_end, dbase], axis=1)
        dec_tasks = np.concatenate([np.tile(items, (H, 1)),
                                    np.repeat(np.arange(H), items.shape[0])[:, None]], axis=1)
    else:
        dec_tasks = np.zeros((0, FIELDS), dtype=np.int64)
    if plan.schedule == "fused":
        both = np.concatenate([pre_tasks, dec_tasks])
        order = np.argsort(-(both[:, 6] - both[:, 5]), kind="stable")
        fused = both[order]
    else:
        fused = np.concatenate([pre_tasks, dec_tasks])  # sm-aware: prefill tasks, then decode
    if fused.shape[0] * FIELDS >= 2**31 or part_rows >= 2**31:
        raise ValueError(f"plan: {fused.shape[0]} tasks / {part_rows} partial rows; allowed: "
                         f"below 2^31 / {FIELDS} tasks, 2^31 rows (int32 tables)")
    merge = np.concatenate(merge_rows) if merge_rows else np.zeros((0, 4), dtype=np.int64)
    device = cache.device

    def as_dev(a, cols):
        a = np.ascontiguousarray(np.asarray(a, dtype=np.int32).reshape(-1, cols))
        return torch.from_numpy(a).to(device)

    side = None
    if plan.schedule in TWO_STREAMS and device.type == "cuda":
        side = torch.cuda.Stream(device=device)
    dk = decode_parts(plan, cache, decode_launch_order) if use_dk else {}
    return HybridLaunch(
        plan=plan, config=hybrid_config(plan, cache),
        prefill_tasks=as_dev(pre_tasks, FIELDS), decode_tasks=as_dev(dec_tasks, FIELDS),
        fused_tasks=as_dev(fused, FIELDS),
        partial_out=torch.empty((part_rows, shape.num_qo_heads, shape.head_dim),
                                dtype=torch.float32, device=device),
        partial_lse=torch.empty((part_rows, shape.num_qo_heads), dtype=torch.float32,
                                device=device),
        merge=as_dev(merge, 4),
        # Per-SM tickets, the two kinds' task counters, programs out, tail programs out.
        counter=torch.zeros(plan.sm_count + 4, dtype=torch.int32, device=device),
        num_prefill=int(pre_tasks.shape[0]),
        num_decode=plan.num_decode_tasks if use_dk else int(dec_tasks.shape[0]),
        side_stream=side, prefill_pages=prefill_pages(plan, cache), **dk,
    )


def decode_parts(plan: HybridPlan, cache: PagedKVCache, launch_order: str | None = None) -> dict:
    """HybridLaunch's decode_* fields for decodes through kernels/decode.py: its launch of
    plan.decode_plan over the decodes' own page tables (stage 1 in `launch_order`; None: the
    product's, prepare_decode's default), and where their query rows are."""
    reqs = plan.decode_requests
    sub = cache.subset(reqs)
    q_start = np.concatenate(([0], np.cumsum(plan.q_lens)[:-1]))
    rows = q_start[reqs]  # one row each (q_len 1)
    # The merge as an ordinary launch: a programmatic-dependent merge puts its waiting programs
    # on the SMs while stage 1 runs, beside the prefill programs a colocated step places there,
    # and no hybrid step has been timed that way (docs/KERNEL_NOTES.md, sixteenth session).
    # The decode-only product's order by default (longest first for a static plan): on the 15
    # held-out hybrid batches it took 0.82-1.01x of the plan order's time for the serial step
    # and 0.86-1.01x for the H200 file, never more than 0.6% slower (H200, thirtieth session,
    # call 1; docs/PERFORMANCE.md).
    # One stage-1 launch (side_launch=False): the hybrid schedules order their own streams.
    parts = {"decode_kernel": prepare_decode(plan.decode_plan, sub, merge_pdl=False,
                                             side_launch=False, launch_order=launch_order),
             "decode_cache": sub}
    if np.array_equal(rows, np.arange(rows[0], rows[0] + rows.size)):
        parts["decode_rows"] = (int(rows[0]), int(rows[0] + rows.size))
    else:  # decodes between prefill chunks in batch order: gather, run, scatter
        s = cache.shape
        buf = (rows.size, s.num_qo_heads, s.head_dim)
        parts["decode_index"] = torch.from_numpy(rows.astype(np.int64)).to(cache.device)
        parts["decode_q"] = torch.empty(buf, dtype=cache.dtype, device=cache.device)
        parts["decode_out"] = torch.empty(buf, dtype=cache.dtype, device=cache.device)
    return parts


def run_decode_part(launch: HybridLaunch, q: torch.Tensor, out: torch.Tensor, scale: float,
                    dependent: bool = False) -> None:
    """The decodes of a launch with decode_kernel: kernels/decode.py's launches on the current
    stream (dependent: its first launch as the programmatic dependent of the previous one). Rows
    that are not contiguous in q read decode_q and write decode_out: run_hybrid gathers them
    before its first launch and scatters them after its last, so that no other launch sits in a
    programmatic chain."""
    pdl = dependent and not INTERPRETED
    if launch.decode_index is None:
        lo, hi = launch.decode_rows
        run_decode(launch.decode_kernel, q[lo:hi], launch.decode_cache, sm_scale=scale,
                   out=out[lo:hi], launch_pdl=pdl)
    else:
        run_decode(launch.decode_kernel, launch.decode_q, launch.decode_cache, sm_scale=scale,
                   out=launch.decode_out, launch_pdl=pdl)


def widen_prefill_pages(pages: PrefillPages, cache: PagedKVCache) -> None:
    """Fill `pages` (k, v) from the cache's e4m3 pages src_pages: one launch on the current
    stream (run_hybrid's first; a benchmark may time it alone)."""
    per_page = pages.k[0].numel()
    block = min(4096, triton.next_power_of_2(per_page))
    _widen_pages_kernel[(pages.k.shape[0], triton.cdiv(per_page, block))](
        cache.k_pages, cache.v_pages, pages.k, pages.v, pages.src_pages, cache.k_pages.stride(0),
        PAGE_ELEMS=per_page, BLOCK=block, num_warps=4)


def run_hybrid(launch: HybridLaunch, q: torch.Tensor, cache: PagedKVCache, *,
               sm_scale: float | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the plan's attention and the merge; returns `out` [sum(q_lens), H_qo, D].

    Only launches (and, under `streams`, stream waits) happen here: this is what a timer wraps.
    Two runs of one HybridLaunch must not overlap (they share scratch and counters).
    """
    plan, cfg = launch.plan, launch.config
    shape = cache.shape
    _check_queries(q, cache, plan)
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(2) != 1:
        raise ValueError(f"out: need q's shape {tuple(q.shape)} and dtype, contiguous head_dim")
    scale = 1.0 / math.sqrt(shape.head_dim) if sm_scale is None else float(sm_scale)
    upcast = INTERPRETED and q.dtype == torch.bfloat16
    precision = "ieee" if upcast or q.dtype == torch.float32 else "tf32"
    ratio_p, ratio_d = plan.sm_ratio()
    widened = launch.prefill_pages
    if widened is None:
        pk, pv = cache.k_pages, cache.v_pages
        p_indptr, p_indices = cache.page_indptr, cache.page_indices
    else:
        pk, pv = widened.k, widened.v
        p_indptr, p_indices = widened.page_indptr, widened.page_indices
        # First, on the current stream, so that every launch below (either stream) follows it.
        widen_prefill_pages(widened, cache)
    if launch.decode_index is not None:  # decodes through decode.py, rows apart in q
        torch.index_select(q, 0, launch.decode_index, out=launch.decode_q)

    def launch_kernel(tasks, n_pre, n_dec, mode, warps, has_p, has_d, programs=None,
                      ahead=False, dynamic_programs=0, trigger=False, dependent=False, role=0):
        """trigger: let the next launch start once this one's programs are resident;
        dependent: launch as the programmatic dependent of the previous launch; role: 1 for the
        persistent grid of that chain, 2 for its tail (all: HybridConfig.ordered_launch)."""
        both = has_p and has_d
        if n_pre + n_dec == 0:
            return
        stages = cfg.fused_stages if both else (cfg.prefill_stages if has_p else
                                                cfg.ahead_stages if ahead else cfg.num_stages)
        block_nd = cfg.block_nd_fused if both else (cfg.ahead_block_n if ahead else cfg.block_nd)
        extra = {"maxnreg": cfg.prefill_maxnreg} \
            if has_p and not has_d and cfg.prefill_maxnreg and not INTERPRETED else {}
        if role:
            extra["ORDERED_ROLE"] = role
        # The interpreter has no programmatic launch: there the chain runs as launched, in order.
        if trigger and not INTERPRETED:
            extra["GDC_TRIGGER"] = True
        if dependent and not INTERPRETED:
            extra["launch_pdl"] = True
        _hybrid_kernel[(programs or n_pre + n_dec,)](
            q, cache.k_pages, cache.v_pages, out, launch.partial_out, launch.partial_lse,
            cache.page_indptr, cache.page_indices, tasks, launch.counter,
            # fp8 pages: k_scale folded into the score scale, v_scale into the output (both
            # exactly 1.0 for 16-bit pages).
            n_pre, n_dec, ratio_p, ratio_d, dynamic_programs, scale * cache.k_scale * LOG2_E,
            cache.v_scale,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            cache.k_pages.stride(0), cache.k_pages.stride(1),
            pk, pv, p_indptr, p_indices, pk.stride(0), pk.stride(1),
            NUM_QO_HEADS=shape.num_qo_heads, G=shape.group_size, HEAD_DIM=shape.head_dim,
            PAGE_SIZE=shape.page_size, BLOCK_MP=plan.prefill_block_m, BLOCK_NP=cfg.block_np,
            BLOCK_MD=cfg.block_md, BLOCK_ND=block_nd, MODE=mode, HAS_PREFILL=has_p,
            HAS_DECODE=has_d, USE_SMID=not INTERPRETED, NUM_SMS=plan.sm_count,
            CTR_PAD=triton.next_power_of_2(plan.sm_count + 4),
            DOT_PRECISION=precision, UPCAST_DOT=upcast, DECODE_AHEAD=ahead, num_warps=warps,
            num_stages=stages, **extra,
        )

    P, D = launch.num_prefill, launch.num_decode
    if plan.schedule in TWO_LAUNCH:
        side = launch.side_stream
        both = P > 0 and D > 0
        # partitioned: the decodes as a persistent grid of plan.decode_programs (a share of the
        # SMs), launched first on the side stream so the prefill launch fills the SMs it leaves.
        if plan.schedule == "partitioned" and both:
            dmode, dprog, ahead = MODE_PERSISTENT, min(D, plan.decode_programs), True
        elif cfg.persistent_decode_programs and both:
            dmode, dprog, ahead = MODE_PERSISTENT, min(D, cfg.persistent_decode_programs), \
                cfg.decode_ahead
        else:
            dmode, dprog, ahead = MODE_GRID, None, cfg.decode_ahead
        # A persistent prefill grid takes tasks from a counter (MODE_DYNAMIC), shared with the
        # tail launch that follows the decode launch on its stream.
        pprog = min(P, cfg.persistent_prefill_programs) \
            if cfg.persistent_prefill_programs and both else 0
        tprog = min(P, cfg.prefill_tail_programs) if pprog else 0

        # The Gluon tile reads 16-bit pages of the query type: a 16-bit cache, or an fp8
        # cache's 16-bit prefill copy (an fp8 step without the copy keeps the Triton tile).
        gluon_pages = pk.dtype == q.dtype

        def persistent_prefill(programs, **order):
            if cfg.colocated_wgmma and gluon_pages:
                run_prefill_wgmma(launch, q, out, scale * cache.k_scale * LOG2_E, cache.v_scale,
                                  pk, pv, p_indptr, p_indices, programs=programs, **order)
            else:
                launch_kernel(launch.prefill_tasks, P, 0, MODE_DYNAMIC, cfg.prefill_warps, True,
                              False, programs, **order)

        def prefill_launch(programs):
            if not programs and cfg.prefill_wgmma and gluon_pages:
                run_prefill_wgmma(launch, q, out, scale * cache.k_scale * LOG2_E, cache.v_scale,
                                  pk, pv, p_indptr, p_indices)
            elif programs:
                persistent_prefill(programs, dynamic_programs=pprog + tprog)
            else:
                launch_kernel(launch.prefill_tasks, P, 0, MODE_GRID, cfg.prefill_warps, True,
                              False)

        def decode_launch(**order):
            if launch.decode_kernel is not None:
                run_decode_part(launch, q, out, scale, dependent=order.get("dependent", False))
                return
            launch_kernel(launch.decode_tasks, 0, D, dmode, cfg.decode_warps, False, True, dprog,
                          ahead, **order)

        # The persistent launch goes first: it must be resident before the other one fills SMs.
        prefill_first = cfg.prefill_first or (pprog > 0 and dmode == MODE_GRID)
        if cfg.ordered_launch and both and pprog and tprog and dmode == MODE_GRID \
                and (INTERPRETED or has_programmatic_launch(q.device)):
            # One stream: the decode grid starts once every persistent prefill program is
            # resident, the tail once the decode grid is done, and the tail leaves last
            # (HybridConfig.ordered_launch).
            persistent_prefill(pprog, trigger=True, role=1)
            decode_launch(dependent=True)
            persistent_prefill(tprog, dynamic_programs=pprog, dependent=True, role=2)
        elif side is not None and both:
            main = torch.cuda.current_stream(q.device)
            side.wait_stream(main)
            if prefill_first:
                prefill_launch(pprog)
            with torch.cuda.stream(side):
                decode_launch()
                if tprog:
                    prefill_launch(tprog)
            if not prefill_first:
                prefill_launch(pprog)
            main.wait_stream(side)
        else:
            prefill_launch(pprog)
            decode_launch()
            if tprog:
                prefill_launch(tprog)
    elif launch.decode_kernel is not None:  # one-launch schedules on a decode-only batch
        run_decode_part(launch, q, out, scale)
    else:
        mode = MODE_SM_AWARE if plan.schedule == "sm-aware" else MODE_GRID
        warps = cfg.fused_warps if P and D else (cfg.prefill_warps if P else cfg.decode_warps)
        launch_kernel(launch.fused_tasks, P, D, mode, warps, P > 0, D > 0)
    if launch.decode_index is not None:
        out.index_copy_(0, launch.decode_index, launch.decode_out)
    if launch.merge.shape[0]:
        _merge_rows_kernel[(launch.merge.shape[0], shape.num_qo_heads)](
            launch.partial_out, launch.partial_lse, launch.merge, out, out.stride(0),
            out.stride(1), NUM_QO_HEADS=shape.num_qo_heads, HEAD_DIM=shape.head_dim,
            num_warps=4)
    return out


def attention(q: torch.Tensor, cache: PagedKVCache, q_lens, plan: HybridPlan, *,
              sm_scale: float | None = None) -> torch.Tensor:
    """Hybrid paged attention of `q` [sum(q_lens), num_qo_heads, head_dim] over `cache`, causal
    inside each request's new tokens, as `plan` cuts and schedules it. Returns a new tensor."""
    return run_hybrid(prepare_hybrid(plan, cache, q_lens), q, cache, sm_scale=sm_scale)


def _check_queries(q: torch.Tensor, cache: PagedKVCache, plan: HybridPlan) -> None:
    s = cache.shape
    want = (int(plan.q_lens.sum()), s.num_qo_heads, s.head_dim)
    if tuple(q.shape) != want:
        raise ValueError(f"q: shape {tuple(q.shape)} != {want} (sum(q_lens), num_qo_heads, "
                         "head_dim)")
    if q.dtype != cache.dtype:
        raise ValueError(f"q.dtype: {q.dtype} != cache dtype {cache.dtype}")
    if q.stride(2) != 1:
        raise ValueError("q: the head_dim axis must be contiguous")
    if q.device != cache.device:
        raise ValueError(f"q.device: {q.device} != cache device {cache.device}")


def make_hybrid_queries(q_lens, shape, *, device="cpu", dtype=None, seed: int = 0) -> torch.Tensor:
    """Queries [sum(q_lens), num_qo_heads, head_dim] drawn N(0, 1) from seed + 1 (as
    make_queries)."""
    from kvtune.kernels.paged import resolve_dtype

    n = int(np.asarray(q_lens, dtype=np.int64).sum())
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(int(seed) + 1)
    return torch.randn((n, shape.num_qo_heads, shape.head_dim), generator=gen, device=device,
                       dtype=resolve_dtype(dtype, shape))


__all__ = ["INTERPRETED", "MAX_DECODE_Q_LEN", "HybridConfig", "HybridLaunch", "attention",
           "hybrid_config", "make_hybrid_queries", "prepare_hybrid", "run_hybrid"]

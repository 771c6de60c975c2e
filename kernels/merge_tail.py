"""The split-KV merge in stage 1's tail (`prepare_decode(merge="tail")`, measured slower: not the
default): no merge launch. Each stage-1 task of a split request stores its partial row, then
takes a ticket on the merge job that reads the row; the task that brings a job's last row merges
the job in the same program, and goes on up the tree while it brings a parent's last row.

Measured on an H100 (sixteenth session, alternated with the chunked merge three times in one
process; docs/PERFORMANCE.md): 96.8 vs 70.2 us (llama3-70b-tp8 uniform B=256 balanced-2x), 96.2 vs
64.1 (skew80 B=64 fixed-2048), 210.0 vs 198.8 (G = 16), 416.2 vs 379.9 (llama3-8b skew80 B=8):
slower everywhere, by far more than a merge costs, though the compiled stage 1 has fewer
registers (92 vs 112) and the same main loop. Kept, with its tests, for the question of why.

Why: kernels/merge_chunked.py, the default, still costs a launch and a dependent wave after stage
1: 7.2-9.3 us on an H100 (fifteenth session), 11-13% of a llama3-70b-tp8 step of 60-70 us, where
stage 1 alone is already 0.94x of FlashInfer's whole step. Here the merge of a request starts
when its last task ends, beside the other requests' tasks.

The jobs are kernels/merge_chunked.py's tree (`chunked_jobs`: at most CHUNK_SPLITS rows each, a
longer request cut into chunks merged level by level), with its scratch rows appended after the
partial rows, so every job reads rows of one buffer. A job merges its rows in order, TAIL_ROWS
at a time (their loads in flight together) with a running max, for the G query heads of the
task's KV head at once: a request's reduction order depends only on its own split count
(batch-invariant), though its bits differ from the other merges'. Tickets are per (job, KV head); the last arrival stores 0, so a launch
needs no memset and replays in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported
from kvtune.kernels.merge_chunked import arrive, chunked_jobs

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# Partial rows one merge step loads: a [4, G_PAD, HEAD_DIM] float32 tile is 32 registers per
# thread at G_PAD 16, head_dim 128 and 8 warps, within what stage 1's main loop already holds.
TAIL_ROWS = tl.constexpr(4)  # a constexpr: stage 1 reads it as a global


@triton.jit
def tail_merge(part_o_ptr, part_lse_ptr, out_ptr, part_row, head, qo_heads, g_mask, offs_d,
               row_job_ptr, job_row0_ptr, job_count_ptr, job_dest_ptr, job_parent_ptr,
               ticket_ptr, stride_o_b, stride_o_h, stride_part_row,
               NUM_QO_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
               G_PAD: tl.constexpr, TAIL_ROWS: tl.constexpr):
    """After a task of KV head `head` stored partial row `part_row` (query heads qo_heads, valid
    where g_mask): the merges this task finishes, up the job tree."""
    job = tl.load(row_job_ptr + part_row)
    go = job >= 0
    while go:
        ticket = ticket_ptr + job * NUM_KV_HEADS + head
        arrived, n = arrive(ticket, job_count_ptr + job)
        go = arrived == n - 1
        if go:
            tl.store(ticket, 0)  # the last arrival: nobody else touches it in this launch
            r0 = tl.load(job_row0_ptr + job)
            m = tl.full([G_PAD], float("-inf"), dtype=tl.float32)
            l_sum = tl.zeros([G_PAD], dtype=tl.float32)
            acc = tl.zeros([G_PAD, HEAD_DIM], dtype=tl.float32)
            offs_r = tl.arange(0, TAIL_ROWS)
            for i0 in range(0, n, TAIL_ROWS):
                # TAIL_ROWS rows in flight per step (a [TAIL_ROWS, G_PAD, HEAD_DIM] tile), not
                # one: a row-at-a-time loop waits out one load latency per row.
                valid = (i0 + offs_r) < n
                rows = (r0 + i0 + offs_r).to(tl.int64)
                mask2 = valid[:, None] & g_mask[None, :]
                # Rows written by other programs of this launch: read past L1. An invalid row
                # gets lse -inf and weight 0; a padded head lse 0 (never stored).
                lse = tl.load(part_lse_ptr + rows[:, None] * NUM_QO_HEADS + qo_heads[None, :],
                              mask=mask2, other=0.0, cache_modifier=".cg")
                lse = tl.where(valid[:, None], lse, float("-inf"))
                o = tl.load(part_o_ptr + rows[:, None, None] * stride_part_row
                            + qo_heads[None, :, None] * HEAD_DIM + offs_d[None, None, :],
                            mask=mask2[:, :, None], other=0.0, cache_modifier=".cg")
                m_new = tl.maximum(m, tl.max(lse, 0))
                alpha = tl.exp2(m - m_new)
                w = tl.exp2(lse - m_new[None, :])
                acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * o, 0)
                l_sum = l_sum * alpha + tl.sum(w, 0)
                m = m_new
            res = acc / l_sum[:, None]
            dest = tl.load(job_dest_ptr + job)
            if dest >= 0:
                tl.store(out_ptr + dest.to(tl.int64) * stride_o_b + qo_heads[:, None] * stride_o_h
                         + offs_d[None, :], res.to(out_ptr.dtype.element_ty),
                         mask=g_mask[:, None])
            else:
                prow = (-dest - 1).to(tl.int64)
                tl.store(part_o_ptr + prow * stride_part_row + qo_heads[:, None] * HEAD_DIM
                         + offs_d[None, :], res, mask=g_mask[:, None])
                tl.store(part_lse_ptr + prow * NUM_QO_HEADS + qo_heads, m + tl.log2(l_sum),
                         mask=g_mask)
            job = tl.load(job_parent_ptr + job)
            go = job >= 0


@dataclass(frozen=True, eq=False)
class TailMerge:
    """The device job table of one plan's tail merge: row_job [partial rows] (the job that reads
    each row stage 1 writes), row0 / count / dest / parent [jobs] int32 (dest: an output row >=
    0, or -(partial row) - 1 for a chunk's result, stored in the rows after stage 1's), tickets
    [jobs, num_kv_heads] int32 zeros between launches. scratch_rows: rows to add to the partial
    buffers."""

    row_job: torch.Tensor
    row0: torch.Tensor
    count: torch.Tensor
    dest: torch.Tensor
    parent: torch.Tensor
    tickets: torch.Tensor
    scratch_rows: int


def tail_jobs(requests, row0, count, num_rows: int) -> dict:
    """Host tables for split requests `requests` whose partial rows start at row0 and number
    count (kernels/merge_chunked.chunked_jobs, the same ValueErrors), with scratch row s stored as
    partial row num_rows + s: {"row_job", "row0", "count", "dest", "parent": int64 arrays,
    "scratch_rows": int}."""
    jobs = chunked_jobs(requests, row0, count)
    levels = jobs["levels"]
    if not levels:
        empty = np.zeros(0, np.int64)
        return {"row_job": np.full(num_rows, -1, np.int64), "row0": empty, "count": empty,
                "dest": empty, "parent": empty, "scratch_rows": 0}
    cat = {k: np.concatenate([lv[k] for lv in levels]) for k in ("row0", "count", "dest",
                                                                 "parent")}
    n_leaf = levels[0]["dest"].size
    cat["row0"][n_leaf:] += num_rows  # upper levels read scratch rows
    scratch = cat["dest"] < 0
    cat["dest"][scratch] = -(num_rows + (-cat["dest"][scratch] - 1)) - 1
    row_job = np.full(num_rows, -1, np.int64)
    for j in range(n_leaf):
        r0, n = int(cat["row0"][j]), int(cat["count"][j])
        row_job[r0:r0 + n] = j
    return {"row_job": row_job, **cat, "scratch_rows": jobs["scratch_rows"]}


def prepare_tail_merge(requests, row0, count, num_rows: int, num_kv_heads: int,
                       device) -> TailMerge:
    """The device side of tail_jobs, built once per plan."""
    t = tail_jobs(requests, row0, count, num_rows)

    def dev(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(device)
    return TailMerge(row_job=dev(t["row_job"]), row0=dev(t["row0"]), count=dev(t["count"]),
                     dest=dev(t["dest"]), parent=dev(t["parent"]),
                     tickets=torch.zeros((max(1, t["row0"].size), num_kv_heads),
                                         dtype=torch.int32, device=device),
                     scratch_rows=t["scratch_rows"])


__all__ = ["TAIL_ROWS", "TailMerge", "prepare_tail_merge", "tail_jobs", "tail_merge"]

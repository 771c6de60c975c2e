"""The split-KV merge (stage 2 of kernels/decode.py by default; kernels/merge.py is the other).

Why: kernels/merge.py runs one program per (split request, query head) with a 64-row block of
partial rows at 4 warps (128 registers, 4 programs per SM). Where many requests are split a few
ways the programs run in waves: 256 two-way splits of llama3-70b-tp8 (2,048 programs) took
14.7 us on an H100, 19-28% of the step. A 16-row block at 2 warps (56 registers, every program
resident) took 7.6 us there, but 22.5 us for a request split 100 ways (seven dependent block
loads, against two): docs/PERFORMANCE.md, fourteenth session.

This merge keeps the small block and cuts long merges into chunks, as a tree of jobs:
- a leaf job is either a whole split request of at most CHUNK_SPLITS partial rows, merged into
  its output row, or one chunk of CHUNK_SPLITS consecutive rows of a longer request, merged into
  a scratch row (output and log-sum-exp, float32, like a partial row);
- the scratch rows of one request are merged the same way by the jobs of the next level (a
  request split 100 ways: 7 chunks, then one job over their 7 rows; 4,096 ways: 3 levels).
Two ways to run the tree, with the same jobs and therefore the same bits:
- fused (the default), one launch: one program per (leaf job, query head); the program that
  finishes a parent job's last child (a per-(job, head) ticket, taken with an acq_rel atomic
  after a barrier) runs the parent too, and so on up. The parent reads its rows in their fixed
  order, whichever child came last. Measured by level (fifteenth session, H100), a request split
  ~100 ways paid a second launch (9.6-16.6 us against 6.8-7.8 for kernels/merge.py); fused it
  takes 8.2-8.7 us, and 256 two-way splits 7.2-7.4 us against 14.4-14.8.
- by level: one launch per level (fused=False), kept for measurement.
The reduction order of a request (its rows in chunks of CHUNK_SPLITS, in order, level by level)
depends only on its own split count: the result stays batch-invariant. Host work (the job
table) is done once per plan, in prepare_chunked_merge; the tickets reset themselves (the last
arrival stores 0), so a launch needs no memset and replays in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_wait  # noqa: E402

# Partial rows merged by one program: the block of the 2-warp kernel (a [16, head_dim] float32
# tile at head_dim 128: 56 registers in a local sm_90 compile).
CHUNK_SPLITS = 16
CHUNKED_WARPS = 2


@triton.jit
def _merge_block(src_o_ptr, src_lse_ptr, row0, n, h, NUM_QO_HEADS: tl.constexpr,
                 HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr, FROM_SCRATCH: tl.constexpr):
    """Rows row0 .. row0 + n - 1 (n <= BLOCK_S) of head h merged by their base-2 lses: (output
    [HEAD_DIM] float32, max lse, sum of weights)."""
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    valid = offs_s < n
    rows = (row0 + offs_s).to(tl.int64)
    lse_ptrs = src_lse_ptr + rows * NUM_QO_HEADS + h
    o_ptrs = src_o_ptr + (rows[:, None] * NUM_QO_HEADS + h) * HEAD_DIM + offs_d[None, :]
    if FROM_SCRATCH:
        # Written by other programs of this launch: read past L1 (not coherent across SMs).
        lse = tl.load(lse_ptrs, mask=valid, other=float("-inf"), cache_modifier=".cg")
        o = tl.load(o_ptrs, mask=valid[:, None], other=0.0, cache_modifier=".cg")
    else:
        lse = tl.load(lse_ptrs, mask=valid, other=float("-inf"))
        o = tl.load(o_ptrs, mask=valid[:, None], other=0.0)
    m = tl.max(lse, 0)
    w = tl.exp2(lse - m)
    w_sum = tl.sum(w, 0)
    return tl.sum(w[:, None] * o, 0) / w_sum, m, w_sum


@triton.jit
def _store_job(dest, res, m, w_sum, h, out_ptr, scratch_o_ptr, scratch_lse_ptr, stride_o_b,
               stride_o_h, NUM_QO_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """dest >= 0: out[dest, h] in the output's type; else scratch row -dest - 1 (output and
    base-2 lse, float32)."""
    offs_d = tl.arange(0, HEAD_DIM)
    if dest >= 0:
        tl.store(out_ptr + dest.to(tl.int64) * stride_o_b + h * stride_o_h + offs_d,
                 res.to(out_ptr.dtype.element_ty))
    else:
        srow = (-dest - 1).to(tl.int64)
        tl.store(scratch_o_ptr + (srow * NUM_QO_HEADS + h) * HEAD_DIM + offs_d, res)
        tl.store(scratch_lse_ptr + srow * NUM_QO_HEADS + h, m + tl.log2(w_sum))


@triton.jit
def arrive(ticket, count_ptr):
    """Count this program's arrival at a job (its ticket; count_ptr: its number of children):
    (arrivals before this one, children). The arrival that makes the count the last one resets
    the ticket. The barrier puts every thread's stores before the release, and the acquire
    orders the caller's later loads after the other arrivals' stores (CUDA's
    threadfence-reduction pattern)."""
    tl.debug_barrier()
    n = tl.load(count_ptr)
    return tl.atomic_add(ticket, 1, sem="acq_rel", scope="gpu"), n


@triton.jit
def _merge_jobs(part_o_ptr, part_lse_ptr, scratch_o_ptr, scratch_lse_ptr, row0_ptr, count_ptr,
                dest_ptr, parent_ptr, ticket_ptr, out_ptr, job0, stride_o_b, stride_o_h,
                NUM_QO_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
                FROM_SCRATCH: tl.constexpr, FUSED: tl.constexpr, GDC_WAIT: tl.constexpr = False):
    """Program (j, h): job job0 + j of head h (rows of stage 1's partials, or of the scratch rows
    where FROM_SCRATCH). FUSED: then every ancestor job whose last child this program finished.
    GDC_WAIT: launched as stage 1's programmatic dependent; wait for it before reading a row."""
    j = job0 + tl.program_id(0)
    h = tl.program_id(1)
    row0 = tl.load(row0_ptr + j)
    n = tl.load(count_ptr + j)
    dest = tl.load(dest_ptr + j)
    if GDC_WAIT:
        gdc_wait()  # the job table is the host's; the partial rows are stage 1's
    res, m, w_sum = _merge_block(part_o_ptr, part_lse_ptr, row0, n, h, NUM_QO_HEADS, HEAD_DIM,
                                 BLOCK_S, FROM_SCRATCH)
    _store_job(dest, res, m, w_sum, h, out_ptr, scratch_o_ptr, scratch_lse_ptr,
               stride_o_b, stride_o_h, NUM_QO_HEADS, HEAD_DIM)
    if FUSED:
        parent = tl.load(parent_ptr + j)
        go = parent >= 0
        while go:
            ticket = ticket_ptr + parent * NUM_QO_HEADS + h
            arrived, n = arrive(ticket, count_ptr + parent)
            go = arrived == n - 1
            if go:
                tl.store(ticket, 0)  # the last child: nobody else touches it in this launch
                res, m, w_sum = _merge_block(scratch_o_ptr, scratch_lse_ptr,
                                             tl.load(row0_ptr + parent), n, h, NUM_QO_HEADS,
                                             HEAD_DIM, BLOCK_S, True)
                _store_job(tl.load(dest_ptr + parent), res, m, w_sum, h, out_ptr,
                           scratch_o_ptr, scratch_lse_ptr, stride_o_b, stride_o_h, NUM_QO_HEADS,
                           HEAD_DIM)
                parent = tl.load(parent_ptr + parent)
                go = parent >= 0


@dataclass(frozen=True, eq=False)
class ChunkedMerge:
    """The device job table of one plan's chunked merge, levels one after another: row0, count,
    dest (an output row >= 0, or -(scratch row) - 1), parent (the job that merges this one's
    scratch row, or -1) as [jobs] int32 tensors; level_bounds ((first job, end), ...) per level,
    level 0 reading stage 1's partial rows and later levels the scratch rows. scratch_o [rows,
    num_qo_heads, head_dim] and scratch_lse [rows, num_qo_heads] float32; tickets [jobs,
    num_qo_heads] int32 zeros between launches."""

    row0: torch.Tensor
    count: torch.Tensor
    dest: torch.Tensor
    parent: torch.Tensor
    level_bounds: tuple
    scratch_o: torch.Tensor
    scratch_lse: torch.Tensor
    tickets: torch.Tensor
    fused: bool = True

    @property
    def num_levels(self) -> int:
        return len(self.level_bounds)

    @property
    def num_launches(self) -> int:
        return min(1, self.num_levels) if self.fused else self.num_levels


def chunked_jobs(requests, row0, count, chunk: int = CHUNK_SPLITS) -> dict:
    """Host job table for split requests `requests` whose partial rows start at row0 and number
    count (>= 2 each; 1-D arrays of one length): {"levels": [{row0, count, dest, parent} numpy
    int64 arrays per level], "scratch_rows": int}. A request of at most `chunk` rows is one job
    into its output row; a longer one is ceil(rows / chunk) jobs into new scratch rows, which
    the next level merges the same way; parent is the global index (levels concatenated) of the
    job that reads a job's scratch row, -1 for a job into an output row. ValueError names the
    field for bad input."""
    requests, row0, count = (np.asarray(a, dtype=np.int64).ravel()
                             for a in (requests, row0, count))
    if not (requests.shape == row0.shape == count.shape):
        raise ValueError("requests, row0, count: need one length")
    if count.size and count.min() < 2:
        raise ValueError(f"count: {int(count.min())} not allowed; allowed: >= 2 (split requests)")
    if chunk < 2:
        raise ValueError(f"chunk: {chunk} not allowed; allowed: >= 2")
    pending = list(zip(requests.tolist(), row0.tolist(), count.tolist()))
    levels, scratch, first_job = [], 0, 0
    # For each scratch row written so far: the global index of the job that writes it.
    writer_of_scratch: dict[int, int] = {}
    while pending:
        jobs = {"row0": [], "count": [], "dest": [], "parent": []}
        later = []
        for req, r0, n in pending:
            if n <= chunk:
                parts = [(r0, n, req)]
            else:
                k = -(-n // chunk)
                parts = [(r0 + c * chunk, min(chunk, n - c * chunk), -(scratch + c) - 1)
                         for c in range(k)]
                later.append((req, scratch, k))
                scratch += k
            for p0, pn, dest in parts:
                me = first_job + len(jobs["dest"])
                if levels:  # rows p0 .. p0 + pn - 1 are scratch rows: their writers are children
                    for s in range(p0, p0 + pn):
                        levels[-1]["parent"][writer_of_scratch.pop(s) - levels[-1]["first"]] = me
                if dest < 0:
                    writer_of_scratch[-dest - 1] = me
                jobs["row0"].append(p0), jobs["count"].append(pn), jobs["dest"].append(dest)
                jobs["parent"].append(-1)
        level = {key: np.asarray(v, dtype=np.int64) for key, v in jobs.items()}
        level["first"] = first_job
        levels.append(level)
        first_job += len(jobs["dest"])
        pending = later
    for level in levels:
        del level["first"]
    return {"levels": levels, "scratch_rows": scratch}


def prepare_chunked_merge(requests, row0, count, num_qo_heads: int, head_dim: int,
                          device, fused: bool = True) -> ChunkedMerge:
    """The device side of chunked_jobs, built once per plan (nothing here runs per step);
    fused=False runs it one launch per level."""
    jobs = chunked_jobs(requests, row0, count)
    levels = jobs["levels"]

    def dev(key):
        a = np.concatenate([lv[key] for lv in levels]) if levels else np.zeros(0, np.int64)
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(device)
    sizes = np.cumsum([0] + [lv["dest"].size for lv in levels])
    rows = max(1, jobs["scratch_rows"])
    return ChunkedMerge(
        row0=dev("row0"), count=dev("count"), dest=dev("dest"), parent=dev("parent"),
        level_bounds=tuple((int(a), int(b)) for a, b in zip(sizes[:-1], sizes[1:])),
        scratch_o=torch.empty((rows, num_qo_heads, head_dim), dtype=torch.float32,
                              device=device),
        scratch_lse=torch.empty((rows, num_qo_heads), dtype=torch.float32, device=device),
        tickets=torch.zeros((max(1, int(sizes[-1])), num_qo_heads), dtype=torch.int32,
                            device=device),
        fused=fused)


def launch_chunked_merge(partial_out: torch.Tensor, partial_lse: torch.Tensor,
                         merge: ChunkedMerge, out: torch.Tensor, pdl: bool = False) -> None:
    """Write out[request] for every split request of `merge` from stage 1's partial rows
    (partial_out [rows, num_qo_heads, head_dim], partial_lse [rows, num_qo_heads] float32, base
    2): one launch (merge.fused), or one per level. pdl: the first launch is the programmatic
    dependent of the stream's previous one (stage 1, which triggers it: kernels/decode.py's
    GDC_TRIGGER) and waits for it on the device; sm_90+, never under the interpreter."""
    num_qo_heads, head_dim = partial_out.shape[1], partial_out.shape[2]
    bounds = merge.level_bounds[:1] if merge.fused else merge.level_bounds
    for i, (first, end) in enumerate(bounds):
        src_o, src_lse = (partial_out, partial_lse) if i == 0 else \
            (merge.scratch_o, merge.scratch_lse)
        extra = {"GDC_WAIT": True, "launch_pdl": True} if pdl and i == 0 else {}
        _merge_jobs[(end - first, num_qo_heads)](
            src_o, src_lse, merge.scratch_o, merge.scratch_lse, merge.row0, merge.count,
            merge.dest, merge.parent, merge.tickets, out, first, out.stride(0), out.stride(1),
            NUM_QO_HEADS=num_qo_heads, HEAD_DIM=head_dim, BLOCK_S=CHUNK_SPLITS,
            FROM_SCRATCH=i > 0, FUSED=merge.fused, num_warps=CHUNKED_WARPS, **extra)


__all__ = ["CHUNK_SPLITS", "ChunkedMerge", "arrive", "chunked_jobs", "launch_chunked_merge",
           "prepare_chunked_merge"]

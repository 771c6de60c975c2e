"""A chunked split-KV merge, for measurement beside kernels/merge.py (not yet the product's).

Why: kernels/merge.py runs one program per (split request, query head) with a 64-row block of
partial rows at 4 warps (128 registers, 4 programs per SM). Where many requests are split a few
ways the programs run in waves: 256 two-way splits of llama3-70b-tp8 (2,048 programs) took
14.7 us on an H100, 19-28% of the step. A 16-row block at 2 warps (56 registers, every program
resident) took 7.6 us there, but 22.5 us for a request split 100 ways (seven dependent block
loads, against two): docs/PERFORMANCE.md, fourteenth session.

This merge keeps the small block and cuts long merges into chunks, level by level:
- level 0, one launch: one program per (job, query head), a job being either a whole split
  request of at most CHUNK_SPLITS partial rows, which it merges into the output, or one chunk of
  CHUNK_SPLITS consecutive rows of a longer request, which it merges into a scratch row (output
  and log-sum-exp, float32, like a partial row);
- level 1 and up, one more launch each only while some request still has more than CHUNK_SPLITS
  rows: the same over the previous level's scratch rows (a request split 100 ways: 7 chunks at
  level 0, merged at level 1; 4,096 ways: 3 levels).
Every program loads one block, and a long merge costs a few short launches instead of a long
serial loop. The reduction order of a request (its rows in chunks of CHUNK_SPLITS, in order,
level by level) depends only on its own split count: the result stays batch-invariant. Host
work (the job lists) is done once per plan, in prepare_chunked_merge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# Partial rows merged by one program: the block of the 2-warp kernel (a [16, head_dim] float32
# tile at head_dim 128: 56 registers in a local sm_90 compile).
CHUNK_SPLITS = 16
CHUNKED_WARPS = 2


@triton.jit
def _merge_rows(part_o_ptr, part_lse_ptr, row0_ptr, count_ptr, dest_ptr, out_ptr,
                scratch_o_ptr, scratch_lse_ptr, stride_o_b, stride_o_h,
                NUM_QO_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr):
    """Program (j, h): rows row0[j] .. row0[j] + count[j] - 1 (count <= BLOCK_S) of head h,
    merged by their lses; dest[j] >= 0: out[dest[j], h], else scratch row -dest[j] - 1 (its
    output and base-2 lse)."""
    j = tl.program_id(0)
    h = tl.program_id(1)
    row0 = tl.load(row0_ptr + j)
    n = tl.load(count_ptr + j)
    dest = tl.load(dest_ptr + j)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    valid = offs_s < n
    rows = (row0 + offs_s).to(tl.int64)
    lse = tl.load(part_lse_ptr + rows * NUM_QO_HEADS + h, mask=valid, other=float("-inf"))
    o = tl.load(part_o_ptr + (rows[:, None] * NUM_QO_HEADS + h) * HEAD_DIM + offs_d[None, :],
                mask=valid[:, None], other=0.0)
    m = tl.max(lse, 0)
    w = tl.exp2(lse - m)
    w_sum = tl.sum(w, 0)
    res = tl.sum(w[:, None] * o, 0) / w_sum
    if dest >= 0:
        tl.store(out_ptr + dest.to(tl.int64) * stride_o_b + h * stride_o_h + offs_d,
                 res.to(out_ptr.dtype.element_ty))
    else:
        srow = (-dest - 1).to(tl.int64)
        tl.store(scratch_o_ptr + (srow * NUM_QO_HEADS + h) * HEAD_DIM + offs_d, res)
        tl.store(scratch_lse_ptr + srow * NUM_QO_HEADS + h, m + tl.log2(w_sum))


@dataclass(frozen=True, eq=False)
class ChunkedMerge:
    """The device job lists of one plan's chunked merge, one (row0, count, dest) triple of
    [jobs] int32 tensors per level (dest: an output row >= 0, or -(scratch row) - 1); level 0
    reads stage 1's partial rows, later levels the scratch rows. scratch_o [rows, num_qo_heads,
    head_dim] and scratch_lse [rows, num_qo_heads] float32."""

    levels: tuple
    scratch_o: torch.Tensor
    scratch_lse: torch.Tensor

    @property
    def num_launches(self) -> int:
        return len(self.levels)


def chunked_jobs(requests, row0, count, chunk: int = CHUNK_SPLITS) -> dict:
    """Host job lists for split requests `requests` whose partial rows start at row0 and number
    count (>= 2 each; 1-D arrays of one length): {"levels": [{row0, count, dest} numpy int64
    arrays per level], "scratch_rows": int}. A request of at most `chunk` rows is one job into
    its output row; a longer one is ceil(rows / chunk) jobs into new scratch rows, which the next
    level merges the same way. ValueError names the field for bad input."""
    requests, row0, count = (np.asarray(a, dtype=np.int64).ravel()
                             for a in (requests, row0, count))
    if not (requests.shape == row0.shape == count.shape):
        raise ValueError("requests, row0, count: need one length")
    if count.size and count.min() < 2:
        raise ValueError(f"count: {int(count.min())} not allowed; allowed: >= 2 (split requests)")
    if chunk < 2:
        raise ValueError(f"chunk: {chunk} not allowed; allowed: >= 2")
    pending = list(zip(requests.tolist(), row0.tolist(), count.tolist()))
    levels, scratch = [], 0
    while pending:
        jobs = {"row0": [], "count": [], "dest": []}
        later = []
        for req, r0, n in pending:
            if n <= chunk:
                jobs["row0"].append(r0), jobs["count"].append(n), jobs["dest"].append(req)
                continue
            k = -(-n // chunk)
            for c in range(k):
                jobs["row0"].append(r0 + c * chunk)
                jobs["count"].append(min(chunk, n - c * chunk))
                jobs["dest"].append(-(scratch + c) - 1)
            later.append((req, scratch, k))
            scratch += k
        levels.append({key: np.asarray(v, dtype=np.int64) for key, v in jobs.items()})
        pending = later
    return {"levels": levels, "scratch_rows": scratch}


def prepare_chunked_merge(requests, row0, count, num_qo_heads: int, head_dim: int,
                          device) -> ChunkedMerge:
    """The device side of chunked_jobs, built once per plan (nothing here runs per step)."""
    jobs = chunked_jobs(requests, row0, count)

    def dev(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(device)
    rows = max(1, jobs["scratch_rows"])
    return ChunkedMerge(
        levels=tuple((dev(j["row0"]), dev(j["count"]), dev(j["dest"])) for j in jobs["levels"]),
        scratch_o=torch.empty((rows, num_qo_heads, head_dim), dtype=torch.float32,
                              device=device),
        scratch_lse=torch.empty((rows, num_qo_heads), dtype=torch.float32, device=device))


def launch_chunked_merge(partial_out: torch.Tensor, partial_lse: torch.Tensor,
                         merge: ChunkedMerge, out: torch.Tensor) -> None:
    """Write out[request] for every split request of `merge` from stage 1's partial rows
    (partial_out [rows, num_qo_heads, head_dim], partial_lse [rows, num_qo_heads] float32, base
    2): one launch per level."""
    num_qo_heads, head_dim = partial_out.shape[1], partial_out.shape[2]
    for i, (row0, count, dest) in enumerate(merge.levels):
        src_o, src_lse = (partial_out, partial_lse) if i == 0 else \
            (merge.scratch_o, merge.scratch_lse)
        _merge_rows[(row0.shape[0], num_qo_heads)](
            src_o, src_lse, row0, count, dest, out, merge.scratch_o, merge.scratch_lse,
            out.stride(0), out.stride(1), NUM_QO_HEADS=num_qo_heads, HEAD_DIM=head_dim,
            BLOCK_S=CHUNK_SPLITS, num_warps=CHUNKED_WARPS)


__all__ = ["CHUNK_SPLITS", "ChunkedMerge", "chunked_jobs", "launch_chunked_merge",
           "prepare_chunked_merge"]

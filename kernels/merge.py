"""Stage 2 of split-KV decode: merge the partial outputs of split requests by their log-sum-exps.

Partial row r of a request holds o_r = sum_j p_j v_j / sum_j p_j over its kv range and
lse_r = log2(sum_j p_j) in the base-2 domain of stage 1 (scores already scaled by log2 e). The
request's output is sum_r 2^(lse_r - M) o_r / sum_r 2^(lse_r - M) with M = max_r lse_r,
accumulated with a running max over blocks of BLOCK_S rows. One program merges one (split
request, query head) pair; the loads of a block's rows are in flight together. The reduction
order depends only on the request's own split count, which keeps the result batch-invariant.
"""

from __future__ import annotations


import torch

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# Two warps and a [BLOCK_S, head_dim] tile of 2048 float32 (32 per thread): about 56 registers
# in a local sm_90 compile, so every program of a merge over a few hundred split requests is
# resident at once. The merge is latency-bound (three dependent round trips to memory per program:
# the request's row range, its partial rows, the store); with a 64 x 128 tile at 4 warps (128
# registers, 4 programs per SM) the 2048 programs of llama3-70b-tp8 at B=256 ran in four waves and
# the merge alone took 14.7 us on an H100, 19-28% of the step (docs/PERFORMANCE.md, fourteenth
# session).
MERGE_NUM_WARPS = 2
MERGE_TILE_ELEMENTS = 2048
# Blocks of partial rows in flight per program (the loop's software pipeline): a request split
# into more than BLOCK_S rows loads the next block while it folds in the current one.
MERGE_STAGES = 2


def merge_block_splits(head_dim: int) -> int:
    """Splits merged per step: 32 at head_dim 64, 16 at 128, 8 at 256 (a [BLOCK_S, head_dim]
    float32 tile of MERGE_TILE_ELEMENTS). Fixed per head_dim, so the reduction order never depends
    on the batch."""
    return max(8, MERGE_TILE_ELEMENTS // head_dim)


@triton.jit
def _merge_kernel(
    part_o_ptr, part_lse_ptr, requests_ptr, row0_ptr, count_ptr, out_ptr,
    stride_o_b, stride_o_h,
    NUM_QO_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
    STAGES: tl.constexpr,
):
    r = tl.program_id(0)
    h = tl.program_id(1)
    req = tl.load(requests_ptr + r)
    row0 = tl.load(row0_ptr + r)
    n = tl.load(count_ptr + r)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)

    # One pass with a running max: the lse and partial loads of a block go out together, so a
    # request with up to BLOCK_S splits costs one round trip to memory, and the pipeline keeps
    # the next block's loads in flight for longer ones.
    m = tl.max(tl.full([BLOCK_S], float("-inf"), dtype=tl.float32), 0)
    w_sum = tl.sum(tl.zeros([BLOCK_S], dtype=tl.float32), 0)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for s0 in tl.range(0, n, BLOCK_S, num_stages=STAGES):
        valid = s0 + offs_s < n
        rows = (row0 + s0 + offs_s).to(tl.int64)
        lse = tl.load(part_lse_ptr + rows * NUM_QO_HEADS + h, mask=valid, other=float("-inf"))
        o = tl.load(part_o_ptr + (rows[:, None] * NUM_QO_HEADS + h) * HEAD_DIM + offs_d[None, :],
                    mask=valid[:, None], other=0.0)
        m_new = tl.maximum(m, tl.max(lse, 0))
        alpha = tl.exp2(m - m_new)
        w = tl.exp2(lse - m_new)
        acc = acc * alpha + tl.sum(w[:, None] * o, 0)
        w_sum = w_sum * alpha + tl.sum(w, 0)
        m = m_new
    res = acc / w_sum
    tl.store(out_ptr + req.to(tl.int64) * stride_o_b + h * stride_o_h + offs_d,
             res.to(out_ptr.dtype.element_ty))


def launch_merge(partial_out: torch.Tensor, partial_lse: torch.Tensor, requests: torch.Tensor,
                 row0: torch.Tensor, count: torch.Tensor, out: torch.Tensor) -> None:
    """Write out[requests[i]] from partial rows row0[i] .. row0[i] + count[i] - 1 (count >= 2).

    partial_out: [rows, num_qo_heads, head_dim] float32; partial_lse: [rows, num_qo_heads] float32
    (base 2); requests/row0/count: [split requests] int32; out: [B, num_qo_heads, head_dim].
    """
    num_requests = requests.shape[0]
    if num_requests == 0:
        return
    num_qo_heads, head_dim = partial_out.shape[1], partial_out.shape[2]
    _merge_kernel[(num_requests, num_qo_heads)](
        partial_out, partial_lse, requests, row0, count, out,
        out.stride(0), out.stride(1),
        NUM_QO_HEADS=num_qo_heads, HEAD_DIM=head_dim, BLOCK_S=merge_block_splits(head_dim),
        STAGES=MERGE_STAGES, num_warps=MERGE_NUM_WARPS,
    )


__all__ = ["launch_merge", "merge_block_splits"]

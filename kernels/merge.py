"""Stage 2 of split-KV decode with prepare_decode(merge="blocks"): merge the partial outputs of
split requests by their log-sum-exps (the default since the fifteenth session is
kernels/merge_chunked.py, same formula, 16-row jobs at 2 warps in one launch).

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

MERGE_NUM_WARPS = 4


def merge_block_splits(head_dim: int) -> int:
    """Splits merged per step: 64 up to head_dim 128, 32 at 256 (a [BLOCK_S, head_dim] float32
    tile in registers). Fixed per head_dim, so the reduction order never depends on the batch."""
    return max(16, min(64, 8192 // head_dim))


@triton.jit
def _merge_kernel(
    part_o_ptr, part_lse_ptr, requests_ptr, row0_ptr, count_ptr, out_ptr,
    stride_o_b, stride_o_h,
    NUM_QO_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
):
    r = tl.program_id(0)
    h = tl.program_id(1)
    req = tl.load(requests_ptr + r)
    row0 = tl.load(row0_ptr + r)
    n = tl.load(count_ptr + r)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)

    # One pass with a running max: the lse and partial loads of a block go out together, so a
    # request with up to BLOCK_S splits costs one round trip to memory.
    m = tl.max(tl.full([BLOCK_S], float("-inf"), dtype=tl.float32), 0)
    w_sum = tl.sum(tl.zeros([BLOCK_S], dtype=tl.float32), 0)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for s0 in range(0, n, BLOCK_S):
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
        num_warps=MERGE_NUM_WARPS,
    )


__all__ = ["launch_merge", "merge_block_splits"]

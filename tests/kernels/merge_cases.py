"""Partial rows for the split-KV merge tests, and their float64 merge."""

import numpy as np
import torch

HEADS = 3


def partials(counts, head_dim, seed=0):
    """Random partial rows (float32 [rows, HEADS, head_dim]), base-2 lses ([rows, HEADS]) spread
    over +-40 so the weights differ by many orders of magnitude, and each request's first row
    (numpy int64), for requests split into `counts` rows each; one lse of the first request is
    -inf (an empty split)."""
    g = torch.Generator().manual_seed(seed)
    rows = sum(counts)
    o = torch.randn(rows, HEADS, head_dim, generator=g, dtype=torch.float32)
    lse = (torch.rand(rows, HEADS, generator=g, dtype=torch.float32) - 0.5) * 80
    row0 = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    lse[int(row0[0]) + 1] = float("-inf")
    return o, lse, row0


def reference(o, lse, row0, counts):
    """[len(counts), HEADS, head_dim] float64: sum_r 2^lse_r o_r / sum_r 2^lse_r per request."""
    out = []
    for r0, n in zip(np.asarray(row0).tolist(), counts):
        lr = lse[r0:r0 + n].double()
        w = torch.exp2(lr - lr.max(0).values)
        out.append((w[..., None] * o[r0:r0 + n].double()).sum(0) / w.sum(0)[..., None])
    return torch.stack(out)

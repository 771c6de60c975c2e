"""`--buckets auto`: the batch-size bucket boundaries searched, not fixed.

Every training case is measured once under a grid of fixed chunks (CHUNK_GRID_TOKENS, each a
FixedSplitPolicy, which every backend runs) and under the engine's own planner
(kernels.parametric.engine_default_policy), which a bucket can ship as "defer". For a group of
consecutive batch sizes, the cost of one column (a chunk, or the engine's planner) for the
whole group is sum over its cases of log(latency(column) / the case's best latency over the
columns); a group's cost is that of its best column. So batch sizes where the engine's planner
is best (small batches: FlashInfer's one-wave chunk) and those where a fixed chunk is (where it
turns split-KV off) land in different buckets, as the per-bucket family choice needs. Dynamic programming splits the
sorted distinct batch sizes into at most `max_buckets` consecutive groups of least total cost;
another bucket is only added when it lowers the cost by more than MIN_GAIN per case (a
geomean gain of about 0.5%), so equal costs give fewer buckets. Buckets are ordered and cover
1..the largest batch size: each ends at the largest batch of its group, the next starts right
after it. The grid's measurements are stored with the run's rows (phase "buckets"). A resumed
run searches again; on a GPU, pass the buckets it printed (--buckets) to keep the same studies.
"""

from __future__ import annotations

import math

import numpy as np
from kvtune.studies.buckets import BatchBucket

CHUNK_GRID_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
MIN_GAIN = 0.005
ENGINE_SERIES = "flashinfer-tensor-core"  # the engine's own planner's column


def group_cost(log_ratio: np.ndarray) -> float:
    """log_ratio: [cases, chunks]; the cost of the group's best common chunk."""
    return float(log_ratio.sum(axis=0).min()) if log_ratio.size else 0.0


def choose_boundaries(sizes: list[int], log_ratio_by_size: dict, max_buckets: int) -> list[int]:
    """Indices (into sorted `sizes`) of the last batch size of each group; see the module text."""
    m = len(sizes)
    n_cases = sum(len(v) for v in log_ratio_by_size.values()) or 1
    penalty = MIN_GAIN * n_cases
    cost = {}
    for i in range(m):
        for j in range(i, m):
            cost[i, j] = group_cost(np.concatenate([log_ratio_by_size[s] for s in sizes[i:j + 1]]))
    k_max = min(max_buckets, m)
    best = [[math.inf] * (m + 1) for _ in range(k_max + 1)]
    back = [[-1] * (m + 1) for _ in range(k_max + 1)]
    best[0][0] = 0.0
    for k in range(1, k_max + 1):
        for j in range(1, m + 1):
            for i in range(k - 1, j):
                c = best[k - 1][i] + cost[i, j - 1] + penalty
                if c < best[k][j] - 1e-12:
                    best[k][j], back[k][j] = c, i
    k = min(range(1, k_max + 1), key=lambda k: (best[k][m], k))
    ends, j = [], m
    while k > 0:
        ends.append(j - 1)
        j = back[k][j]
        k -= 1
    return sorted(ends)


def buckets_from_ends(sizes: list[int], ends: list[int]) -> tuple[BatchBucket, ...]:
    out, lo = [], 1
    for e in ends:
        out.append(BatchBucket(lo, sizes[e]))
        lo = sizes[e] + 1
    return tuple(out)


def search_buckets(runner, cases, max_buckets: int, recorder=None) -> tuple[BatchBucket, ...]:
    """Ordered buckets covering 1..max batch size of `cases` (harness.runner.CaseRun)."""
    from kvtune.kernels.baselines import FixedSplitPolicy

    if not 1 <= max_buckets <= 16:
        raise ValueError(f"max-buckets: {max_buckets} out of range; allowed: 1..16")
    from kvtune.kernels.parametric import engine_default_policy

    policies = [FixedSplitPolicy(chunk_tokens=c) for c in CHUNK_GRID_TOKENS]
    series = [f"fixed-split:chunk_tokens={c}" for c in CHUNK_GRID_TOKENS]
    policies.append(engine_default_policy())
    series.append(ENGINE_SERIES)
    by_size: dict[int, list] = {}
    for case in cases:
        lat = []
        for label, policy in zip(series, policies):
            row, _ = runner.measure_one(case, policy, series=label)
            if recorder is not None:
                recorder.add(row, phase="buckets", study="", bucket="")
            lat.append(float(row["latency_us"]) if row["status"] == "ok" and row["latency_us"] > 0
                       else math.inf)
        lat = np.array(lat)
        if not np.isfinite(lat).any():
            continue
        finite = np.where(np.isfinite(lat), lat, lat[np.isfinite(lat)].max() * 10)
        by_size.setdefault(case.batch.batch_size, []).append(np.log(finite / finite.min()))
    if not by_size:
        raise ValueError("buckets: auto could not measure any case under the chunk grid")
    sizes = sorted(by_size)
    logs = {s: np.array(v) for s, v in by_size.items()}
    return buckets_from_ends(sizes, choose_boundaries(sizes, logs, max_buckets))


__all__ = ["CHUNK_GRID_TOKENS", "ENGINE_SERIES", "buckets_from_ends", "choose_boundaries", "search_buckets"]

"""benchmarks/gluon_decode_probe.py's CPU parts: the decode plan as Gluon prefill-kernel tasks and
the float64 merge its GPU check relies on (the kernel itself needs an sm_90 GPU)."""

from __future__ import annotations

import math

import numpy as np
import torch

from kvtune.kernels.paged import PagedKVCache, make_queries
from kvtune.kernels.plan import AttentionShape, build_plan
from kvtune.kernels.reference import decode_reference

from tests.benchmark_scripts import load_benchmark

SHAPE = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4)
KV_LENS = np.array([5, 40, 17, 33])


def _plan():
    return build_plan(KV_LENS, 16, num_kv_heads=SHAPE.num_kv_heads, page_size=SHAPE.page_size)


def test_decode_tasks_cover_every_item_and_head_with_a_partial_row_per_split_item():
    probe = load_benchmark("gluon_decode_probe")
    plan = _plan()
    tasks, n_part, part_of_item = probe.decode_tasks(plan, None)
    assert tasks.shape == (plan.num_items * SHAPE.num_kv_heads, 9) and tasks.dtype == np.int32
    split_items = plan.splits[plan.work_request] > 1
    assert n_part == int(split_items.sum()) > 0
    assert sorted(part_of_item[split_items]) == list(range(n_part))
    assert (part_of_item[~split_items] == -1).all()
    for row, (head, i) in zip(tasks, [(h, i) for h in range(SHAPE.num_kv_heads)
                                      for i in range(plan.num_items)]):
        b = int(plan.work_request[i])
        # kind 1 (a tile), request b, its query row b, one token that sees every key
        assert list(row[:5]) == [1, b, b, 1, KV_LENS[b] - 1]
        assert (row[5], row[6]) == (plan.work_kv_start[i], plan.work_kv_end[i])
        assert row[7] == part_of_item[i] and row[8] == head


def test_the_float64_merge_of_per_item_partials_is_the_reference():
    """Partials as the kernel writes them (each item's normalised rows and base-2 lse), merged by
    merge_float64, give the float64 reference; unsplit requests keep their row from `out`."""
    probe = load_benchmark("gluon_decode_probe")
    plan = _plan()
    cache = PagedKVCache.from_lengths(KV_LENS, SHAPE, dtype=torch.float32, seed=3)
    q = make_queries(len(KV_LENS), SHAPE, dtype=torch.float32, seed=3)
    ref = decode_reference(q, cache)
    _, n_part, part_of_item = probe.decode_tasks(plan, cache)
    part_o = torch.zeros((n_part, SHAPE.num_qo_heads, SHAPE.head_dim), dtype=torch.float32)
    part_lse = torch.zeros((n_part, SHAPE.num_qo_heads), dtype=torch.float32)
    out = torch.full_like(q, float("nan"))
    g, scale = SHAPE.group_size, 1 / math.sqrt(SHAPE.head_dim)
    for i in range(plan.num_items):
        b, lo, hi = int(plan.work_request[i]), int(plan.work_kv_start[i]), int(plan.work_kv_end[i])
        k, v = cache.request_kv(b, torch.float64)
        qh = q[b].double()
        kh = k[lo:hi].repeat_interleave(g, dim=1)  # [keys, qo heads, d]
        vh = v[lo:hi].repeat_interleave(g, dim=1)
        s = torch.einsum("hd,khd->hk", qh, kh) * scale
        p = torch.softmax(s, dim=1)
        o = torch.einsum("hk,khd->hd", p, vh)
        if part_of_item[i] < 0:
            out[b] = o.float()
        else:
            part_o[part_of_item[i]] = o.float()
            part_lse[part_of_item[i]] = (torch.logsumexp(s, dim=1) / math.log(2.0)).float()
    merged = probe.merge_float64(plan, part_o, part_lse, part_of_item, out)
    assert merged.dtype == torch.float64 and not merged.isnan().any()
    assert torch.allclose(merged, ref.double(), rtol=1e-5, atol=1e-5)

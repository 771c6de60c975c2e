"""kernels/merge_chunked.py under the interpreter: the job table level by level with its parent
links, the merge against float64 at every chunk boundary and across levels, the fused launch
bit for bit the by-level launches with its tickets back at zero, a request's bits independent of
the rest of the launch, bad input named."""

import numpy as np
import pytest
import torch

from kvtune.kernels.merge_chunked import (CHUNK_SPLITS, chunked_jobs, launch_chunked_merge,
                                          prepare_chunked_merge)
from tests.kernels.merge_cases import HEADS, partials, reference


def run(o, lse, requests, row0, counts, out, fused=True):
    merge = prepare_chunked_merge(requests, row0, counts, HEADS, o.shape[2], "cpu", fused=fused)
    launch_chunked_merge(o, lse, merge, out)
    return merge


def test_job_lists_by_level():
    c = CHUNK_SPLITS
    jobs = chunked_jobs([5, 9, 2], [0, 3, 3 + c + 1], [3, c + 1, c * c + 1])
    (l0, l1, l2) = jobs["levels"]
    # Level 0: request 5 whole (3 rows, into its output); request 9 in 2 chunks, request 2 in
    # c + 1 chunks, all into scratch rows.
    assert l0["dest"][0] == 5 and l0["count"][0] == 3
    assert len(l0["dest"]) == 1 + 2 + (c + 1) and (l0["dest"][1:] < 0).all()
    assert sorted(-l0["dest"][1:] - 1) == list(range(2 + c + 1))
    # Level 1: request 9's two chunk rows into its output; request 2's c + 1 rows in 2 chunks.
    assert 9 in l1["dest"].tolist() and (l1["dest"] < 0).sum() == 2
    assert l2["dest"].tolist() == [2] and l2["count"].tolist() == [2]
    assert jobs["scratch_rows"] == 2 + (c + 1) + 2
    # Parent links (global job indices, levels concatenated): every job into a scratch row has
    # the one job that reads that row; a parent has as many children as it has rows.
    n0, n1 = len(l0["dest"]), len(l1["dest"])
    parents = np.concatenate([l0["parent"], l1["parent"], l2["parent"]])
    dests = np.concatenate([l0["dest"], l1["dest"], l2["dest"]])
    counts = np.concatenate([l0["count"], l1["count"], l2["count"]])
    assert ((parents == -1) == (dests >= 0)).all()
    assert (l0["parent"][l0["dest"] < 0] >= n0).all() and (l0["parent"][l0["dest"] < 0] < n0 + n1).all()
    assert (l1["parent"][l1["dest"] < 0] == n0 + n1).all()
    for p in np.unique(parents[parents >= 0]):
        assert (parents == p).sum() == counts[p]
    assert chunked_jobs([], [], [])["levels"] == []


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_merge_matches_float64_across_chunks_and_levels(head_dim):
    c = CHUNK_SPLITS
    counts = [2, c - 1, c, c + 1, 5 * c + 3, c * c + 7]  # the last one takes three levels
    o, lse, row0 = partials(counts, head_dim)
    out = torch.full((len(counts), HEADS, head_dim), float("nan"), dtype=torch.float32)
    merge = run(o, lse, np.arange(len(counts)), row0, counts, out)
    assert merge.num_levels == 3 and merge.num_launches == 1
    ref = reference(o, lse, row0, counts)
    assert torch.isfinite(out).all()
    err = (out.double() - ref).abs().max() / ref.abs().max()
    assert err < 1e-5, f"head_dim {head_dim}: relative error {err:.2e}"
    # The tickets reset themselves; the by-level launches give the same bits.
    assert not merge.tickets.any()
    by_level = torch.full_like(out, float("nan"))
    assert run(o, lse, np.arange(len(counts)), row0, counts, by_level,
               fused=False).num_launches == 3
    assert torch.equal(by_level, out)


def test_the_fused_merge_replays_with_the_same_bits():
    """A second launch of the same prepared merge (the tickets reused) writes the same bits."""
    counts = [2, 3 * CHUNK_SPLITS + 5, CHUNK_SPLITS * CHUNK_SPLITS + 1]
    o, lse, row0 = partials(counts, 64, seed=2)
    merge = prepare_chunked_merge(np.arange(3), row0, counts, HEADS, 64, "cpu")
    first = torch.full((3, HEADS, 64), float("nan"))
    launch_chunked_merge(o, lse, merge, first)
    again = torch.full_like(first, float("nan"))
    launch_chunked_merge(o, lse, merge, again)
    assert torch.equal(first, again) and not merge.tickets.any()


def test_a_requests_bits_do_not_depend_on_the_rest_of_the_launch():
    counts = [CHUNK_SPLITS + 3, 2, 3 * CHUNK_SPLITS + 1]
    o, lse, row0 = partials(counts, 128, seed=1)
    together = torch.zeros(3, HEADS, 128, dtype=torch.bfloat16)
    run(o, lse, np.arange(3), row0, counts, together)
    for i in range(3):
        alone = torch.zeros_like(together)
        run(o, lse, [i], row0[i:i + 1], counts[i:i + 1], alone)
        assert torch.equal(alone[i], together[i])
        assert not alone[torch.arange(3) != i].any()


@pytest.mark.parametrize("args, field", [
    (([0], [0], [1]), "count"),
    (([0, 1], [0], [2]), "requests, row0, count"),
])
def test_bad_input_is_named(args, field):
    with pytest.raises(ValueError, match=field):
        chunked_jobs(*args)
    with pytest.raises(ValueError, match="chunk"):
        chunked_jobs([0], [0], [4], chunk=1)


def test_decode_with_the_chunked_merge_matches_the_reference_and_is_batch_invariant():
    """prepare_decode(merge="chunked"): the split requests (one past a chunk of rows, so two
    levels) merge through kernels/merge_chunked.py within the dtype's bound of the float64
    reference, to the product's merge within rounding, and a request's bits do not depend on
    the rest of the batch."""
    from kvtune.kernels.decode import prepare_decode, run_decode
    from kvtune.kernels.plan import AttentionShape, build_plan
    from kvtune.kernels.reference import decode_reference, relative_error
    from tests.kernels.kernel_cases import make_inputs

    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4)
    chunk = 2
    kv = [2 * chunk * (CHUNK_SPLITS + 3), 5, 3 * chunk + 1]  # 38, 3 and 4 splits
    cache, q = make_inputs(kv, shape, torch.float32, seed=3)
    plan = build_plan(kv, chunk, num_kv_heads=2, page_size=4)
    launch = prepare_decode(plan, cache)  # the default merge
    assert launch.chunked_merge.num_levels == 2 and launch.num_launches == 1 + 1
    assert not launch.merge_pdl  # on by default, but the CPU has none
    assert not prepare_decode(plan, cache, merge_pdl=True).merge_pdl
    out = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=out)
    assert relative_error(out, decode_reference(q, cache)) <= 1e-5
    blocks = torch.full_like(q, float("nan"))
    run_decode(prepare_decode(plan, cache, merge="blocks"), q, cache, out=blocks)
    assert torch.allclose(out, blocks, rtol=1e-5, atol=1e-6)
    # Request 0 alone, its pages copied: the same bits.
    cache1, _ = make_inputs(kv[:1], shape, torch.float32, seed=3)
    cache1.k_pages[cache1.request_pages(0)] = cache.k_pages[cache.request_pages(0)]
    cache1.v_pages[cache1.request_pages(0)] = cache.v_pages[cache.request_pages(0)]
    plan1 = build_plan(kv[:1], chunk, num_kv_heads=2, page_size=4)
    alone = torch.empty_like(q[:1])
    run_decode(prepare_decode(plan1, cache1, merge="chunked"), q[:1].clone(), cache1, out=alone)
    assert torch.equal(alone[0], out[0])
    with pytest.raises(ValueError,
                       match="merge: 'fused' not allowed; allowed: chunked, blocks, tail"):
        prepare_decode(plan, cache, merge="fused")
    # Without a split request there is nothing to merge.
    unsplit = build_plan(kv, 1024, num_kv_heads=2, page_size=4)
    assert prepare_decode(unsplit, cache, merge="chunked").num_launches == 1

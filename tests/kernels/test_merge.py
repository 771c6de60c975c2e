"""Stage 2 (kernels/merge.py) on its own, under the interpreter: split counts below, at and past
the block of rows merged per step, against a float64 merge; and a request's result independent of
the other requests in the launch."""

import pytest
import torch

from kvtune.kernels.merge import launch_merge, merge_block_splits
from tests.kernels.merge_cases import HEADS, partials, reference


def _rows(row0):
    return torch.as_tensor(row0, dtype=torch.int32)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_merge_matches_float64_at_every_block_boundary(head_dim):
    bs = merge_block_splits(head_dim)
    counts = [2, bs - 1, bs, bs + 1, 3 * bs + 5]
    o, lse, row0 = partials(counts, head_dim)
    out = torch.full((len(counts), HEADS, head_dim), float("nan"), dtype=torch.float32)
    requests = torch.arange(len(counts), dtype=torch.int32)
    launch_merge(o, lse, requests, _rows(row0), torch.tensor(counts, dtype=torch.int32), out)
    ref = reference(o, lse, row0, counts)
    assert torch.isfinite(out).all()
    err = (out.double() - ref).abs().max() / ref.abs().max()
    assert err < 1e-5, f"head_dim {head_dim}: relative error {err:.2e}"


def test_a_requests_merge_does_not_depend_on_the_rest_of_the_launch():
    head_dim = 128
    bs = merge_block_splits(head_dim)
    counts = [bs + 3, 2, 2 * bs + 1]
    o, lse, row0 = partials(counts, head_dim, seed=1)
    cnt = torch.tensor(counts, dtype=torch.int32)
    together = torch.zeros(len(counts), HEADS, head_dim, dtype=torch.bfloat16)
    launch_merge(o, lse, torch.arange(3, dtype=torch.int32), _rows(row0), cnt, together)
    for i in range(len(counts)):
        alone = torch.zeros_like(together)
        pick = torch.tensor([i], dtype=torch.int32)
        launch_merge(o, lse, pick, _rows(row0[i:i + 1]), cnt[i:i + 1], alone)
        assert torch.equal(alone[i], together[i])
        assert not alone[torch.arange(3) != i].any()  # nothing else written


def test_block_of_rows_is_fixed_per_head_dim():
    # The reduction order may depend on the request's own split count only: the block of rows
    # merged per step is a function of head_dim, within the register tile.
    assert [merge_block_splits(d) for d in (64, 128, 256)] == [64, 64, 32]

"""kernels/paged.py: the paged KV cache, its page table and its seeded contents."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvtune.kernels.paged import PagedKVCache, make_queries, resolve_dtype
from kvtune.kernels.plan import AttentionShape

SHAPE = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4)


def test_same_seed_same_data_and_other_seed_other_data():
    a = PagedKVCache.from_lengths([5, 9, 1], SHAPE, seed=11)
    b = PagedKVCache.from_lengths([5, 9, 1], SHAPE, seed=11)
    c = PagedKVCache.from_lengths([5, 9, 1], SHAPE, seed=12)
    assert torch.equal(a.k_pages, b.k_pages) and torch.equal(a.v_pages, b.v_pages)
    assert torch.equal(a.page_indices, b.page_indices)
    assert not torch.equal(a.k_pages, c.k_pages)
    assert not torch.equal(a.k_pages, a.v_pages)


def test_layout_and_page_table():
    kv = [5, 9, 1, 8]
    cache = PagedKVCache.from_lengths(kv, SHAPE, seed=1)
    assert cache.k_pages.shape == (2 + 3 + 1 + 2, 4, 2, 64)
    assert cache.dtype == torch.bfloat16
    assert cache.page_indptr.tolist() == [0, 2, 5, 6, 8]
    assert cache.page_indptr.dtype == torch.int32 and cache.page_indices.dtype == torch.int32
    # every page belongs to exactly one request
    assert sorted(cache.page_indices.tolist()) == list(range(8))
    assert cache.last_page_lens.tolist() == [1, 1, 1, 4]
    assert cache.kv_lens_dev.tolist() == kv


def test_request_kv_gathers_the_request_pages_in_token_order():
    cache = PagedKVCache.from_lengths([6, 10], SHAPE, dtype=torch.float32, seed=2)
    k, v = cache.request_kv(1)
    assert k.shape == (10, 2, 64) and v.shape == (10, 2, 64)
    pages = cache.request_pages(1).tolist()
    for t in range(10):
        page, slot = pages[t // 4], t % 4
        assert torch.equal(k[t], cache.k_pages[page, slot])
        assert torch.equal(v[t], cache.v_pages[page, slot])
    with pytest.raises(ValueError, match="request"):
        cache.request_kv(2)


def test_shuffled_pages_are_never_contiguous():
    # Many two- and three-page requests: a plain permutation would leave some adjacent.
    kv = [8] * 40 + [12] * 40
    cache = PagedKVCache.from_lengths(kv, SHAPE, seed=5)
    for b in range(len(kv)):
        pages = np.array(cache.request_pages(b).tolist())
        assert not np.all(np.diff(pages) == 1), f"request {b} pages contiguous: {pages}"
    plain = PagedKVCache.from_lengths(kv, SHAPE, seed=5, shuffle_pages=False)
    assert plain.page_indices.tolist() == list(range(plain.num_pages))


def test_fill_unused_slots_touches_only_slots_past_kv_len():
    cache = PagedKVCache.from_lengths([5, 8, 3], SHAPE, dtype=torch.float32, seed=3)
    cache.fill_unused_slots(float("nan"))
    for b in range(3):
        k, v = cache.request_kv(b)
        assert not torch.isnan(k).any() and not torch.isnan(v).any()
    # request 0 (5 tokens, page 4): 3 NaN slots in its last page; request 1 is page-aligned
    last0 = cache.request_pages(0)[-1]
    assert torch.isnan(cache.k_pages[last0, 1:]).all()
    assert int(torch.isnan(cache.k_pages).any(dim=(2, 3)).sum()) == 3 + 0 + 1


def test_dtype_override_and_queries():
    cache = PagedKVCache.from_lengths([3], SHAPE, dtype=torch.float16, seed=0)
    assert cache.k_pages.dtype == torch.float16
    assert resolve_dtype(None, AttentionShape(dtype="fp16")) == torch.float16
    assert resolve_dtype("fp32", SHAPE) == torch.float32
    q = make_queries(3, SHAPE, seed=4)
    assert q.shape == (3, 4, 64) and q.dtype == torch.bfloat16
    assert torch.equal(q, make_queries(3, SHAPE, seed=4))
    assert q.float().std() > 0.5  # random, never zeros


@pytest.mark.parametrize("kwargs,field", [
    ({"kv_lens": [0, 3]}, "kv_len"),
    ({"kv_lens": [(1 << 20) + 1]}, "kv_len"),
    ({"kv_lens": []}, "kv_lens"),
    ({"dtype": "int8"}, "dtype"),
    ({"dtype": torch.int32}, "dtype"),
    ({"seed": 1.5}, "seed"),
])
def test_bad_input_names_the_field(kwargs, field):
    args = {"kv_lens": [3, 4], "dtype": None, "seed": 0} | kwargs
    with pytest.raises(ValueError, match=field):
        PagedKVCache.from_lengths(args["kv_lens"], SHAPE, dtype=args["dtype"], seed=args["seed"])


def test_subset_is_a_batch_of_the_chosen_requests_on_the_same_pages():
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4,
                           dtype="bf16", kv_dtype="fp8_e4m3")
    cache = PagedKVCache.from_lengths([9, 30, 5, 17], shape, seed=2, k_scale=0.5, v_scale=2.0)
    sub = cache.subset([3, 0])
    assert sub.kv_lens.tolist() == [17, 9] and sub.batch_size == 2
    assert sub.k_pages is cache.k_pages and (sub.k_scale, sub.v_scale) == (0.5, 2.0)
    for i, b in enumerate([3, 0]):
        for mine, theirs in zip(sub.request_kv(i), cache.request_kv(b)):
            assert torch.equal(mine, theirs)
    for bad in ([], [4], [-1]):
        with pytest.raises(ValueError, match="requests"):
            cache.subset(bad)

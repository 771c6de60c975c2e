"""kernels/reference.py: float64 decode attention, checked against cases with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kvtune.kernels.paged import PagedKVCache, make_queries
from kvtune.kernels.plan import AttentionShape
from kvtune.kernels.reference import decode_reference, relative_error

SHAPE = AttentionShape(num_qo_heads=6, num_kv_heads=2, head_dim=64, page_size=4)


def test_single_token_returns_its_value():
    cache = PagedKVCache.from_lengths([1, 1], SHAPE, dtype=torch.float32, seed=1)
    q = make_queries(2, SHAPE, dtype=torch.float32, seed=1)
    out = decode_reference(q, cache)
    for b in range(2):
        _, v = cache.request_kv(b)
        for h in range(6):  # query head h reads KV head h // 3
            assert torch.allclose(out[b, h], v[0, h // 3].double())


def test_equal_keys_average_the_values():
    cache = PagedKVCache.from_lengths([7], SHAPE, dtype=torch.float32, seed=2)
    pages = cache.request_pages(0)
    cache.k_pages[pages] = 0.5  # every key the same: uniform attention weights
    q = make_queries(1, SHAPE, dtype=torch.float32, seed=2)
    out = decode_reference(q, cache)
    _, v = cache.request_kv(0)
    expect = v.double().mean(dim=0).repeat_interleave(3, dim=0)
    assert torch.allclose(out[0], expect, atol=1e-12)


def test_matches_an_explicit_loop():
    kv = [5, 11]
    cache = PagedKVCache.from_lengths(kv, SHAPE, dtype=torch.float32, seed=3)
    q = make_queries(2, SHAPE, dtype=torch.float32, seed=3)
    scale = 0.37
    out = decode_reference(q, cache, sm_scale=scale)
    for b, n in enumerate(kv):
        k, v = (t.double().numpy() for t in cache.request_kv(b))
        for h in range(6):
            qh = q[b, h].double().numpy()
            s = np.array([qh @ k[t, h // 3] * scale for t in range(n)])
            w = np.exp(s - s.max())
            w /= w.sum()
            want = sum(w[t] * v[t, h // 3] for t in range(n))
            np.testing.assert_allclose(out[b, h].numpy(), want, rtol=1e-10, atol=1e-12)


def test_default_scale_and_dtype():
    cache = PagedKVCache.from_lengths([9], SHAPE, seed=4)
    q = make_queries(1, SHAPE, seed=4)
    out = decode_reference(q, cache)
    assert out.dtype == torch.float64 and out.shape == (1, 6, 64)
    same = decode_reference(q, cache, sm_scale=1 / math.sqrt(64))
    assert torch.equal(out, same)
    with pytest.raises(ValueError, match="q: shape"):
        decode_reference(q[:, :3], cache)


def test_relative_error():
    ref = torch.ones(2, 3, dtype=torch.float64)
    assert relative_error(ref.float(), ref) == 0.0
    assert relative_error(ref * 1.1, ref) == pytest.approx(0.1)
    bad = ref.clone()
    bad[0, 0] = float("nan")
    assert math.isnan(relative_error(bad, ref))

"""Hybrid batches (AttentionBatch), the hybrid suite, the chunked-prefill simulator, --q-len."""

import numpy as np
import pytest

from kvtune.kernels.plan import AttentionShape
from kvtune.workloads.batch import AttentionBatch, DecodeBatch
from kvtune.workloads.hybrid import (
    ChunkedPrefillBatcher,
    HybridCase,
    accepted_tokens,
    halves,
    resolve_hybrid_params,
)
from kvtune.workloads.selection import CaseSettings, resolve_shape, resolve_suite
from kvtune.workloads.suites import get_suite


def test_attention_batch_columns():
    b = AttentionBatch([1, 4, 512], [100, 200, 4608], AttentionShape())
    assert b.summary() == {"prefill_tokens": 512, "num_prefills": 1, "num_decodes": 2,
                           "max_q_len": 512, "q_tokens": 517}
    # causal pairs: decode 100, speculative 4*196 + 10, chunk 512*4096 + 512*513/2
    pairs = 100 + 4 * 196 + 10 + 512 * 4096 + 512 * 513 // 2
    assert b.causal_flops == 4 * pairs * 32 * 128
    d = AttentionBatch.decode(DecodeBatch([5, 6]))
    assert d.q_lens.tolist() == [1, 1] and d.num_prefills == 0


@pytest.mark.parametrize("q, kv, field", [
    ([0], [10], "q_lens"), ([11], [10], "q_lens"), ([2_000_000], [10], "q_lens"),
    ([1, 1], [10], "q_lens"), ([1], [0], "kv_len"), ([1.5], [10], "q_lens"),
])
def test_attention_batch_bad_input(q, kv, field):
    with pytest.raises(ValueError, match=field):
        AttentionBatch(q, kv)


def test_unsupported_head_dim_names_field():
    with pytest.raises(ValueError, match="head_dim"):
        AttentionShape(head_dim=96)


def test_prefill_only_and_decode_only_cases():
    pre = HybridCase({"decodes": 0, "chunk_tokens": 64, "context_tokens": 100}, 4).batch()
    assert pre.q_lens.tolist() == [64] and pre.kv_lens.tolist() == [164] and pre.num_decodes == 0
    dec = HybridCase({"chunk_tokens": 0, "decode_q_len": 3}, 4).batch()
    assert dec.q_lens.tolist() == [3] * 4 and dec.num_prefills == 0
    with pytest.raises(ValueError, match="chunk_tokens"):
        HybridCase({"decodes": 0, "chunk_tokens": 0}, 4).batch()


def test_hybrid_suite_is_the_paper_sweep_plus_mixes():
    suite = get_suite("hybrid")
    sweep = [c for c in suite if c.params["source"] == "sweep" and c.params["decodes"]
             and c.params["chunk_tokens"]]
    assert len(sweep) == 4 * 3 * 6
    # Both halves of every sweep case are in the suite (the overlap bound, parity cases).
    ids = {c.case_id for c in suite}
    for c in sweep:
        pre, dec = halves(c.params)
        assert HybridCase(pre, 1).case_id in ids and HybridCase(dec, c.batch_size).case_id in ids
    ctx = {c.params["context_tokens"] for c in sweep}
    assert min(ctx) == 4096 and max(ctx) == 20480
    assert {c.params["chunk_tokens"] for c in sweep} == {512, 1024, 2048}
    assert {c.batch_size for c in sweep} == {8, 16, 32, 64, 128, 256}
    mixes = [c for c in suite if c.params["source"] == "continuous"]
    assert mixes and any(c.params["draft_tokens"] > 0 for c in mixes)
    b = mixes[-1].batch()
    assert b.num_prefills >= 1 and b.num_decodes >= 1
    assert (b.q_lens[: b.num_decodes] == mixes[-1].params["draft_tokens"] + 1).all()


def test_chunked_prefill_simulator_respects_budget():
    p = resolve_hybrid_params({"source": "continuous", "step_token_budget": 512,
                               "arrival_rate_per_step": 0.5, "draft_tokens": 2})
    sim = ChunkedPrefillBatcher(p, max_batch=16, seed=3)
    saw_chunk = False
    for _ in range(400):
        q, kv = sim.step()
        assert q.sum() <= 512 and q.shape[0] <= 16 + 16
        assert (q >= 1).all() and (q <= kv).all()
        saw_chunk |= bool((q > 16).any())
    assert saw_chunk


def test_accepted_tokens_rate():
    rng = np.random.default_rng(0)
    kept = accepted_tokens(rng, 20000, 3, 0.5)
    # E[kept] = 1 + 0.5 + 0.25 + 0.125
    assert abs(kept.mean() - 1.875) < 0.03 and kept.min() == 1 and kept.max() == 4
    assert (accepted_tokens(rng, 5, 0, 0.9) == 1).all()


def test_selection_q_len_and_hybrid_distribution():
    shape = resolve_shape(CaseSettings())
    s = resolve_suite(CaseSettings(distribution="hybrid", batch_sizes="8",
                                   params=("chunk_tokens=2048",), q_len=4), shape)
    b = s.cases[0].batch()
    assert b.q_lens.tolist() == [4] * 8 + [2048]
    s = resolve_suite(CaseSettings(suite="smoke", q_len=3), shape)
    assert all((c.batch().q_lens == 3).all() for c in s)
    with pytest.raises(ValueError, match="q_len"):
        resolve_suite(CaseSettings(suite="smoke", q_len=17), shape)
    with pytest.raises(ValueError, match="q-len"):
        resolve_suite(CaseSettings(suite="hybrid", q_len=2), shape)
    with pytest.raises(ValueError, match="q-len: the hybrid-holdout suite"):
        resolve_suite(CaseSettings(suite="hybrid-holdout", q_len=2), shape)


def test_quick_and_holdout_suites():
    """hybrid-quick is a subset of hybrid (same case ids); hybrid-holdout shares no case with
    either, and every one of its batches differs from every tuning batch in lengths too."""
    from kvtune.workloads.suites import get_suite

    full = {c.case_id: c for c in get_suite("hybrid").cases}
    quick = get_suite("hybrid-quick").cases
    held = get_suite("hybrid-holdout").cases
    assert len(quick) == 20 and {c.case_id for c in quick} <= set(full)
    assert len(held) == 43 and not {c.case_id for c in held} & set(full)
    tuned_lengths = {(tuple(b.q_lens), tuple(b.kv_lens))
                     for b in (c.batch() for c in full.values())}
    for c in held:
        b = c.batch()
        assert (tuple(b.q_lens), tuple(b.kv_lens)) not in tuned_lengths, c.case_id
    kinds = {("chunk" if b.prefill_tokens else "none", "dec" if b.num_decodes else "none")
             for b in (c.batch() for c in held)}
    assert kinds == {("chunk", "dec"), ("none", "dec"), ("chunk", "none")}
    mixes = [c for c in held if c.params["source"] == "continuous"]
    assert {c.seed for c in mixes} == {100, 101} and len(mixes) == 12

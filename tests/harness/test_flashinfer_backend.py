"""The flashinfer backend on CPU: how plans map onto FlashInfer's plan() (fixed_split_size,
disable_split_kv, its own planner), what is refused, the page table handed over, the workspace,
reading back FlashInfer's decision, the study hook, and the not-installed path through the CLI.
The GPU half (running FlashInfer) is benchmarks/bench_flashinfer.py."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtune.harness.backends import flashinfer_plan as fip
from kvtune.harness.device import device_model
from kvtune.kernels import policies
from kvtune.kernels.paged import PagedKVCache
from kvtune.kernels.plan import AttentionShape, Plan, SplitParams, build_plan
from kvtune.workloads.suites import get_suite

SHAPE = AttentionShape()  # 32 q heads, 8 KV heads, head_dim 128, page 16, bf16
H100 = device_model("h100")
NOT_INSTALLED = ("backend flashinfer: flashinfer-python is not installed; pip install -e "
                 ".[flashinfer] (needs a CUDA GPU)")


def flashinfer_cut(kv_lens, page_size: int, chunk_pages: int | None) -> list[tuple[int, int, int]]:
    """(request, kv_start, kv_end) of every piece FlashInfer's fixed_split_size (or
    disable_split_kv) makes, in its launch order: request by request, c pages each, last shorter."""
    pieces = []
    for b, n in enumerate(np.asarray(kv_lens, dtype=np.int64)):
        step = int(n) if chunk_pages is None else chunk_pages * page_size
        pieces += [(b, s, min(s + step, int(n))) for s in range(0, int(n), step)]
    return pieces


def plan_pieces(plan: Plan) -> list[tuple[int, int, int]]:
    return list(zip(plan.work_request.tolist(), plan.work_kv_start.tolist(),
                    plan.work_kv_end.tolist()))


def threshold_batch(dist: str, batch: int) -> np.ndarray:
    case = next(c for c in get_suite("threshold").cases
                if c.distribution == dist and c.batch_size == batch)
    return case.kv_lens()


# -- the policy -> FlashInfer call mapping -----------------------------------------------------

@pytest.mark.parametrize("chunk_tokens, pages", [(2048, 128), (512, 32), (2000, 125), (2001, 126)])
def test_fixed_split_becomes_fixed_split_size_in_pages(chunk_tokens, pages):
    kv = threshold_batch("skew80", 64)
    plan = policies.get("fixed-split", chunk_tokens=chunk_tokens).plan(kv, SHAPE, H100)
    setting = fip.choose_setting(plan, SHAPE, H100)
    assert (setting.path, setting.planner) == ("tensor-core", "fixed-split")
    assert setting.fixed_split_pages == pages
    assert setting.plan_kwargs() == {"fixed_split_size": pages}
    assert setting.items == plan.num_items  # G = 4: one query tile per piece
    assert flashinfer_cut(kv, 16, pages) == plan_pieces(plan)
    assert np.array_equal(fip.flashinfer_splits(kv, 16, pages), plan.splits)


def test_no_split_plans_become_disable_split_kv():
    kv = threshold_batch("uniform", 512)  # 512 tokens each: a 2048-token chunk splits nothing
    for plan in (policies.get("no-split").plan(kv, SHAPE, H100),
                 policies.get("fixed-split", chunk_tokens=2048).plan(kv, SHAPE, H100)):
        setting = fip.choose_setting(plan, SHAPE, H100)
        assert (setting.planner, setting.chunk_pages) == ("no-split", None)
        assert setting.plan_kwargs() == {"disable_split_kv": True}
        assert fip.workspace_bytes(setting, SHAPE, H100) == (0, 0)


@pytest.mark.parametrize("dist, batch", [("skew80", 16), ("skew80", 64), ("uniform", 1)])
def test_flashinfer_default_policies_run_flashinfers_own_planner_on_their_path(dist, batch):
    kv = threshold_batch(dist, batch)
    tc_plan = policies.get("flashinfer-tensor-core").plan(kv, SHAPE, H100)
    cc_plan = policies.get("flashinfer-cuda-core").plan(kv, SHAPE, H100)
    tc = fip.choose_setting(tc_plan, SHAPE, H100)
    cc = fip.choose_setting(cc_plan, SHAPE, H100)
    assert (tc.path, tc.planner, tc.plan_kwargs()) == ("tensor-core", "flashinfer", {})
    assert (cc.path, cc.planner, cc.plan_kwargs()) == ("cuda-core", "flashinfer", {})
    # The own-planner setting still knows what kvtune expects, for the read-back check.
    assert tc.chunk_pages is None if batch > 33 else tc.chunk_pages is not None


def test_overridden_flashinfer_policy_is_a_fixed_split_not_the_own_planner():
    kv = threshold_batch("skew80", 64)
    plan = policies.get("flashinfer-tensor-core", fixed_split_size=64).plan(kv, SHAPE, H100)
    setting = fip.choose_setting(plan, SHAPE, H100)
    assert (setting.planner, setting.fixed_split_pages) == ("fixed-split", 64)


def test_backend_path_restricts_the_kernel_variant():
    kv = threshold_batch("skew80", 16)
    cc_plan = policies.get("flashinfer-cuda-core").plan(kv, SHAPE, H100)
    fixed = policies.get("fixed-split").plan(kv, SHAPE, H100)
    on_tc = fip.choose_setting(cc_plan, SHAPE, H100, path="tensor-core")
    assert (on_tc.path, on_tc.planner) == ("tensor-core", "fixed-split")
    assert on_tc.fixed_split_pages == cc_plan.notes["chunk_pages"]
    assert fip.choose_setting(cc_plan, SHAPE, H100, path="cuda-core").path == "cuda-core"
    assert fip.unsupported_reason(cc_plan, "cuda-core") is None
    reason = fip.unsupported_reason(fixed, "cuda-core")
    assert "cuda-core" in reason and "fixed_split_size" in reason and "\n" not in reason
    with pytest.raises(fip.NotExpressible, match="tensor-core path only"):
        fip.choose_setting(fixed, SHAPE, H100, path="cuda-core")
    with pytest.raises(ValueError, match="path"):
        fip.check_path("tensor")


def test_cuda_core_group_sizes_outside_its_kernels_are_refused():
    shape = AttentionShape(num_qo_heads=48, num_kv_heads=8)  # G = 6
    # The planner itself refuses (one line); a CUDA-core plan of another shape is not FlashInfer's
    # own on this one, so it would run as a fixed split on the tensor-core path.
    with pytest.raises(ValueError, match="group_size: 6"):
        policies.get("flashinfer-cuda-core").plan([4096, 70000], shape, H100)
    plan = policies.get("flashinfer-cuda-core").plan([4096, 70000], SHAPE, H100)
    assert fip.own_planner_path(plan, shape, H100) is None


def test_cuda_graph_setting_pads_and_sizes_the_workspace():
    # A plan made with enable_cuda_graph (or the backend's cuda_graph setting) runs with
    # use_cuda_graph wrappers: FlashInfer pads to max(2 * S // H_kv, ceil(B * G / 16) + B - 1)
    # pieces on the tensor-core path and to occupancy * S // H_kv on the CUDA-core path.
    kv = [1_000] * 40
    graph = policies.get("flashinfer-tensor-core", enable_cuda_graph=True).plan(kv, SHAPE, H100)
    setting = fip.choose_setting(graph, SHAPE, H100)
    assert setting.planner == "flashinfer" and setting.cuda_graph and setting.padded_items == 49
    need, _ = fip.workspace_bytes(setting, SHAPE, H100)
    assert need == fip.float_workspace_bytes("tensor-core", 49, SHAPE)
    eager = policies.get("flashinfer-tensor-core").plan(kv, SHAPE, H100)
    assert not fip.choose_setting(eager, SHAPE, H100).cuda_graph
    forced = fip.choose_setting(eager, SHAPE, H100, cuda_graph=True)
    assert forced.cuda_graph and forced.to_extra()["fi_cuda_graph"] is True
    cc = policies.get("flashinfer-cuda-core", enable_cuda_graph=True).plan([100, 50], SHAPE, H100)
    cc_setting = fip.choose_setting(cc, SHAPE, H100)
    assert cc_setting.path == "cuda-core" and cc_setting.padded_items == 132


# -- what FlashInfer cannot express ------------------------------------------------------------

def test_persistent_and_heaviest_first_schedules_are_unsupported():
    kv = threshold_batch("skew80", 64)
    fa3 = policies.get("fa3").plan(kv, SHAPE, H100)
    assert fa3.is_persistent
    reason = fip.unsupported_reason(fa3)
    assert reason.startswith("schedule 'persistent-heavy-first'") and "\n" not in reason
    heavy = policies.get("fixed-split", schedule="static-heavy-first").plan(kv, SHAPE, H100)
    assert "heaviest-first" in fip.unsupported_reason(heavy)
    with pytest.raises(fip.NotExpressible):
        fip.choose_setting(heavy, SHAPE, H100)


def test_per_request_chunk_sizes_are_unsupported_not_approximated():
    plan = build_plan([8192, 8192], [2048, 1024], num_kv_heads=8, page_size=16)
    reason = fip.unsupported_reason(plan)
    assert "per-request chunk sizes" in reason and "2048" in reason and "1024" in reason
    # A request left whole although longer than the others' chunk would be cut by FlashInfer.
    whole = build_plan([4096, 4096], [1024, 4096], num_kv_heads=8, page_size=16)
    assert "left whole" in fip.unsupported_reason(whole)


def test_a_last_piece_longer_than_the_chunk_is_unsupported():
    plan = Plan(kv_lens=np.array([3072]), splits=np.array([2]), work_request=np.array([0, 0]),
                work_split=np.array([0, 1]), work_kv_start=np.array([0, 1024]),
                work_kv_end=np.array([1024, 3072]), num_kv_heads=8, page_size=16,
                schedule="static", grid_size=16)
    assert "last piece" in fip.unsupported_reason(plan)


def test_equal_split_parametric_plan_is_unsupported_where_pieces_differ():
    # 100 pages cut into ceil(100 / 32) = 4 equal pieces of 25 pages; 64 pages into 2 of 32.
    params = SplitParams(min_tokens_per_cta=512, max_waves=16, max_splits=128, ctas_per_sm=2)
    plan = policies.get("parametric", **params.to_dict()).plan([1600, 1024], SHAPE, H100)
    assert "per-request chunk sizes" in fip.unsupported_reason(plan)


@settings(max_examples=60, deadline=None)
@given(
    kv_lens=st.lists(st.integers(1, 40_000), min_size=1, max_size=24),
    chunk_tokens=st.integers(16, 20_000),
    min_tokens_log2=st.integers(7, 14),
    max_splits=st.sampled_from([1, 2, 4, 32, 128]),
)
def test_every_supported_plan_is_exactly_flashinfers_cut(kv_lens, chunk_tokens, min_tokens_log2,
                                                         max_splits):
    """Whatever a policy plans: if the backend accepts it, FlashInfer's cut under the chosen
    setting gives the very same pieces in the same order; if not, it says why in one line."""
    plans = [
        policies.get("fixed-split", chunk_tokens=chunk_tokens).plan(kv_lens, SHAPE, H100),
        policies.get("parametric", min_tokens_per_cta=1 << min_tokens_log2, max_waves=16,
                     max_splits=max_splits, ctas_per_sm=2).plan(kv_lens, SHAPE, H100),
        policies.get("flashinfer-tensor-core").plan(kv_lens, SHAPE, H100),
        policies.get("trtllm-oversub").plan(kv_lens, SHAPE, H100),
        policies.get("sglang-triton").plan(kv_lens, SHAPE, H100),
    ]
    for plan in plans:
        try:
            setting = fip.choose_setting(plan, SHAPE, H100, path="tensor-core")
        except fip.NotExpressible as exc:
            assert str(exc) and "\n" not in str(exc)
            assert fip.unsupported_reason(plan) == str(exc)
            continue
        assert fip.unsupported_reason(plan) is None
        assert flashinfer_cut(plan.kv_lens, 16, setting.chunk_pages) == plan_pieces(plan)
    fixed = fip.choose_setting(plans[0], SHAPE, H100)  # a fixed split is always expressible
    pages = -(-chunk_tokens // 16)
    assert fixed.chunk_pages == (pages if max(-(-k // 16) for k in kv_lens) > pages else None)


# -- the page table FlashInfer reads -----------------------------------------------------------

def test_page_table_is_the_caches_own_and_reads_back_every_request():
    shape = AttentionShape(num_qo_heads=2, num_kv_heads=1, head_dim=64, page_size=16)
    kv_lens = [1, 15, 16, 17, 40, 33]
    cache = PagedKVCache.from_lengths(kv_lens, shape, device="cpu", seed=3)
    indptr, indices, last = fip.flashinfer_page_table(cache)
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32
    assert indptr.shape == (7,) and last.shape == (6,) and int(indptr[-1]) == indices.shape[0]
    assert last.tolist() == [1, 15, 16, 1, 8, 1]
    # FlashInfer's get_seq_lens: (pages - 1) * page_size + last_page_len.
    pages = (indptr[1:] - indptr[:-1]).long()
    assert ((pages - 1) * 16 + last.long()).tolist() == kv_lens
    for b, n in enumerate(kv_lens):
        ids = indices[indptr[b]:indptr[b + 1]].long()
        k = cache.k_pages[ids].reshape(-1, 1, 64)[:n]
        v = cache.v_pages[ids].reshape(-1, 1, 64)[:n]
        ref_k, ref_v = cache.request_kv(b)
        assert torch.equal(k, ref_k) and torch.equal(v, ref_v)


# -- workspace and reading back FlashInfer's decision ------------------------------------------

def test_float_workspace_matches_flashinfers_allocations():
    # tensor-core, G = 4: cta_tile_q 16; tmp_v 32 x 10 x 16 x 128 x 4, tmp_s 32 x 10 x 16 x 4.
    assert fip.float_workspace_bytes("tensor-core", 10, SHAPE) == 2_621_440 + 20_480
    assert fip.float_workspace_bytes("cuda-core", 10, SHAPE) == 163_840 + 1_280
    assert fip.float_workspace_bytes("tensor-core", 0, SHAPE) == 0
    # BACKGROUND's example order of size: 512-token chunks of a prod-mix batch need GBs.
    kv = get_suite("prod-mix").cases[-3].kv_lens()  # batch 256
    plan = policies.get("fixed-split", chunk_tokens=512).plan(kv, SHAPE, H100)
    setting = fip.choose_setting(plan, SHAPE, H100)
    need, alloc = fip.workspace_bytes(setting, SHAPE, H100)
    assert need == alloc > 3 << 30
    # The own planner may decide otherwise than kvtune's model: allocate for its largest choice.
    own = fip.choose_setting(policies.get("flashinfer-tensor-core").plan(
        threshold_batch("uniform", 64), SHAPE, H100), SHAPE, H100)
    need, alloc = fip.workspace_bytes(own, SHAPE, H100)
    assert need == 0 and alloc == fip.float_workspace_bytes("tensor-core", 2 * 132 // 8, SHAPE)


def test_decision_read_back_and_disagreement():
    tc_info = [40, 40, 0, 16, 0, 0, 0, 0, 0, 4096, 0, 0, 0, 0, 1]
    assert fip.chunk_size_offset("tensor-core", tc_info) == 4096
    decision = fip.decision_from_plan_info("tensor-core", tc_info, 2048)
    assert decision == fip.FlashInferDecision(split_kv=True, chunk_tokens=2048, items=40)
    setting = fip.FlashInferSetting("tensor-core", "fixed-split", 128, 40, fixed_split_pages=128)
    assert fip.disagreement(setting, decision, 16) is None
    assert "1024-token" in fip.disagreement(
        setting, fip.FlashInferDecision(True, 1024, 40), 16)
    unsplit = fip.FlashInferDecision(False, None, 40)
    assert "split_kv=False" in fip.disagreement(setting, unsplit, 16)
    assert "pieces" in fip.disagreement(setting, fip.FlashInferDecision(True, 2048, 41), 16)
    cc = fip.decision_from_plan_info("cuda-core", [64, 0, 0, 0, 0, 0, 0, 96, 0, 0], 999)
    assert cc == fip.FlashInferDecision(split_kv=False, chunk_tokens=None, items=64)
    with pytest.raises(ValueError, match="plan_info"):
        fip.decision_from_plan_info("cuda-core", tc_info, 16)


# -- tuning on this backend --------------------------------------------------------------------

def test_study_space_on_flashinfer_varies_the_chunk_alone_and_every_trial_runs():
    from kvtune.studies.space import space_for

    backend = SimpleNamespace(supported_schedules=fip.SUPPORTED_SCHEDULES,
                              fixed_split_params=fip.fixed_split_params(H100))
    space = space_for(H100, SHAPE, backend)
    assert space.schedules == ("static",) and space.ctas_per_sm == (2,)
    assert space.max_waves == (16, 16) and space.max_splits == (128, 128)
    assert space.min_tokens_values() == tuple(1 << k for k in range(7, 15))
    batches = [threshold_batch("skew80", 64), threshold_batch("2x40", 512),
               get_suite("prod-mix").cases[4].kv_lens()]
    for tokens in space.min_tokens_values():
        params = SplitParams(tokens, 16, 128, 2, "static")
        for kv in batches:
            plan = fip.chunk_policy(params).plan(kv, SHAPE, H100)
            setting = fip.choose_setting(plan, SHAPE, H100)
            assert setting.chunk_pages in (None, tokens // 16)


# -- without flashinfer installed --------------------------------------------------------------

def test_bench_without_flashinfer_exits_2_with_one_install_line(tmp_path, capsys, monkeypatch):
    from kvtune.cli import main

    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer -> ImportError
    monkeypatch.delitem(sys.modules, "kvtune.harness.backends.flashinfer", raising=False)
    out = tmp_path / "res"
    code = main(["bench", "--suite", "smoke", "--backend", "flashinfer", "--no-progress",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"kvtune: error: {NOT_INSTALLED}\n"
    assert not out.exists() or not any(out.iterdir())
    assert main(["info"]) == 0
    assert f"flashinfer: not available: {NOT_INSTALLED}" in capsys.readouterr().out

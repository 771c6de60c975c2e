"""The hybrid Triton kernel (interpreter) against the float64 causal reference, and HybridPlan."""

import dataclasses

import numpy as np
import pytest
import torch

from kvtune.kernels import policies
from kvtune.kernels.hybrid import attention, make_hybrid_queries, prepare_hybrid
from kvtune.kernels.hybrid_plan import HybridPlan, build_prefill_tiles
from kvtune.kernels.hybrid_policies import make_hybrid_plan, modelled_times_s
from kvtune.kernels.paged import PagedKVCache
from kvtune.kernels.plan import AttentionShape, DeviceSpec
from kvtune.kernels.reference import attention_reference, decode_reference, relative_error

TOY = DeviceSpec("toy", sm_count=3, l2_bytes=0, hbm_bytes_per_s=1e12)
SPLITTY = dict(min_tokens_per_cta=8, max_waves=2, min_prefill_split_tokens=16,
               prefill_split_cap_waves=4)


def _run(q_lens, kv_lens, shape, policy, dtype=torch.float16, seed=0, nan_tail=True):
    cache = PagedKVCache.from_lengths(kv_lens, shape, dtype=dtype, seed=seed)
    if nan_tail:
        cache.fill_unused_slots(float("nan"))
    q = make_hybrid_queries(q_lens, shape, dtype=dtype, seed=seed)
    plan = policy.plan_hybrid(q_lens, kv_lens, shape, TOY)
    out = attention(q, cache, q_lens, plan)
    ref = attention_reference(q, cache, q_lens)
    assert not torch.isnan(out).any()
    return relative_error(out, ref), plan


@pytest.mark.parametrize("schedule", ["serial", "streams", "fused", "sm-aware", "partitioned",
                                      "colocated"])
def test_schedules_match_reference_with_splits(schedule):
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    pol = policies.get("hybrid-parametric", schedule=schedule, prefill_block_m=64, **SPLITTY)
    err, plan = _run([1, 5, 24, 17], [40, 23, 50, 17], shape, pol)
    assert err < 2e-3
    assert plan.splits.max() > 1 and plan.tile_splits.max() > 1  # merge exercised on both kinds


@pytest.mark.parametrize("q_len", [1, 2, 7, 16])
def test_speculative_decodes_are_causal(q_len):
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=1, head_dim=64, page_size=8, dtype="fp16")
    # Splits of 8 keys put a speculative token's later split wholly past its position.
    pol = policies.get("hybrid-parametric", schedule="fused", **SPLITTY)
    err, plan = _run([q_len, q_len], [q_len + 20, 40], shape, pol)
    assert err < 2e-3
    if q_len > 4:  # some split starts past the first new token: its early rows see no key there
        dp = plan.decode_plan
        assert (dp.work_kv_start[dp.work_request == 0] > 20).any()


@pytest.mark.parametrize("G, page, dtype", [(1, 1, torch.bfloat16), (4, 16, torch.float16),
                                            (16, 128, torch.bfloat16), (2, 32, torch.float16)])
def test_groups_pages_dtypes(G, page, dtype):
    shape = AttentionShape(num_qo_heads=G * 2, num_kv_heads=2, head_dim=64, page_size=page,
                           dtype="bf16" if dtype == torch.bfloat16 else "fp16")
    err, _ = _run([1, 3, 24], [40, 30, 150], shape, policies.get("pod"), dtype=dtype)
    assert err < (2e-2 if dtype == torch.bfloat16 else 2e-3)


def test_prefill_only_and_decode_only_batches():
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    for q_lens, kv_lens in (([20, 33], [20, 60]), ([1, 1, 1], [9, 30, 5])):
        for name in ("hybrid-serial", "pod", "hybrid-fused"):
            err, plan = _run(q_lens, kv_lens, shape, policies.get(name))
            assert err < 2e-3


def test_decode_only_equals_decode_reference():
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    kv = [9, 30, 5]
    cache = PagedKVCache.from_lengths(kv, shape, dtype=torch.float16, seed=3)
    q = make_hybrid_queries([1, 1, 1], shape, dtype=torch.float16, seed=3)
    a = attention_reference(q, cache, [1, 1, 1])
    b = decode_reference(q, cache)
    assert torch.allclose(a, b)


def test_sm_aware_counters_reset_between_launches():
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    q_lens, kv_lens = [1, 20], [30, 40]
    cache = PagedKVCache.from_lengths(kv_lens, shape, dtype=torch.float16)
    q = make_hybrid_queries(q_lens, shape, dtype=torch.float16)
    plan = policies.get("pod").plan_hybrid(q_lens, kv_lens, shape, TOY)
    launch = prepare_hybrid(plan, cache, q_lens)
    from kvtune.kernels.hybrid import run_hybrid

    first = run_hybrid(launch, q, cache).clone()
    assert int(launch.counter.abs().sum()) == 0
    assert torch.equal(run_hybrid(launch, q, cache), first)


def test_pod_rule_picks_ctas_by_dominance():
    shape = AttentionShape()
    h100 = DeviceSpec("h100", sm_count=132, l2_bytes=0, hbm_bytes_per_s=3.35e12)
    pod = policies.get("pod")
    big_prefill = pod.plan_hybrid([2048, 1, 1], [18432, 4096, 4096], shape, h100)
    many_decodes = pod.plan_hybrid([512] + [1] * 256, [4608] + [16384] * 256, shape, h100)
    assert big_prefill.ctas_per_sm == 2 and big_prefill.prefill_block_m == 128
    assert many_decodes.ctas_per_sm == 4 and many_decodes.prefill_block_m == 64
    pre_s, dec_s = modelled_times_s(np.array([2048]), np.array([18432]), shape, h100)
    assert pre_s > 0 and dec_s == 0
    # Prefill tasks within the two-wave cap.
    assert big_prefill.num_prefill_tasks <= 2 * 132 * 2 or big_prefill.tile_splits.max() == 1
    assert big_prefill.sm_ratio() != (0, 0)


def test_sm_ratio_policies():
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=1, head_dim=64, page_size=16)
    base = dict(prefill_split_cap_waves=1, min_prefill_split_tokens=1 << 20)
    prop = policies.get("hybrid-parametric", sm_policy="proportional", **base)
    half = policies.get("hybrid-parametric", sm_policy="50:50", **base)
    q, kv = [1] * 64 + [64], [4096] * 64 + [64]  # 2 prefill tiles, 64 decode tasks
    assert prop.plan_hybrid(q, kv, shape, TOY).sm_ratio() == (1, 32)
    assert half.plan_hybrid(q, kv, shape, TOY).sm_ratio() == (1, 1)
    assert prop.plan_hybrid([1], [10], shape, TOY).sm_ratio() == (0, 1)


def test_plan_invariants_reject_broken_plans():
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=1, head_dim=64, page_size=4)
    plan = policies.get("hybrid-serial").plan_hybrid([1, 40], [10, 50], shape, TOY)
    fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    bad_end = dict(fields, tile_kv_end=plan.tile_kv_end + 4)
    with pytest.raises(ValueError, match="causal"):
        HybridPlan(**bad_end)
    with pytest.raises(ValueError, match="decode_requests"):
        HybridPlan(**dict(fields, decode_requests=np.array([1])))
    with pytest.raises(ValueError, match="schedule"):
        HybridPlan(**dict(fields, schedule="nope"))
    with pytest.raises(ValueError, match="tiles"):
        HybridPlan(**dict(fields, tile_request=plan.tile_request[:1],
                          **{k: fields[k][:1] for k in ("tile_q_start", "tile_q_end", "tile_split",
                                                        "tile_kv_start", "tile_kv_end",
                                                        "tile_splits")}))


def test_prefill_tiles_cover_tokens_once():
    t = build_prefill_tiles([1, 100, 17], [5, 300, 17], group_size=4, block_m=64, page_size=16,
                            kv_splits=3, min_split_tokens=32)
    first = t["tile_split"] == 0
    assert t["tile_q_end"][first & (t["tile_request"] == 1)].max() == 100
    assert set(t["tile_request"]) == {1, 2}
    lengths = t["tile_kv_end"] - t["tile_kv_start"]
    assert list(lengths) == sorted(lengths, reverse=True)


@pytest.mark.parametrize("kw, field", [
    (dict(schedule="x"), "schedule"), (dict(ctas_per_sm=0), "ctas_per_sm"),
    (dict(sm_policy="1:3"), "sm_policy"), (dict(prefill_block_m=32), "prefill_block_m"),
    (dict(prefill_split_cap_waves=0), "prefill_split_cap_waves"),
])
def test_policy_bad_params(kw, field):
    with pytest.raises(ValueError, match=field):
        policies.get("hybrid-parametric", **kw)


def test_bad_lengths_and_queries():
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=1, head_dim=64, page_size=4)
    pol = policies.get("pod")
    with pytest.raises(ValueError, match="q_lens"):
        pol.plan_hybrid([0], [4], shape, TOY)
    with pytest.raises(ValueError, match="q_lens"):
        pol.plan_hybrid([5], [4], shape, TOY)
    plan = pol.plan_hybrid([2], [4], shape, TOY)
    cache = PagedKVCache.from_lengths([4], shape)
    with pytest.raises(ValueError, match="q:"):
        attention(torch.zeros(3, 4, 64, dtype=torch.bfloat16), cache, [2], plan)
    with pytest.raises(ValueError, match="q_lens"):
        attention(torch.zeros(2, 4, 64, dtype=torch.bfloat16), cache, [3], plan)
    wide = AttentionShape(num_qo_heads=256, num_kv_heads=1, head_dim=64)
    with pytest.raises(ValueError, match="num_qo_heads"):
        make_hybrid_plan([1], [4], wide, TOY, decode_planner=None, schedule="fused",
                         ctas_per_sm=2, sm_policy="50:50", prefill_split_cap_waves=1,
                         prefill_block_m=128)


def test_decode_only_plan_for_decode_callers():
    shape = AttentionShape()
    plan = policies.get("pod").plan([100, 5000], shape, TOY)
    assert plan.batch_size == 2


def test_partitioned_plan_programs_and_share_rule():
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    dev = DeviceSpec("toy", sm_count=20, l2_bytes=0, hbm_bytes_per_s=1e12)
    q, kv = [1] * 6 + [40], [300] * 6 + [400]
    auto = policies.get("hybrid-parametric", schedule="partitioned").plan_hybrid(q, kv, shape, dev)
    from kvtune.kernels.hybrid_policies import DECODE_HBM_EFFICIENCY, PREFILL_TENSOR_EFFICIENCY

    t_p, t_d = modelled_times_s(np.array(q), np.array(kv), shape, dev)
    t_p, t_d = t_p / PREFILL_TENSOR_EFFICIENCY, t_d / DECODE_HBM_EFFICIENCY
    share = min(0.9, max(0.1, t_d / (t_p + t_d)))
    assert auto.notes["decode_sm_share"] == pytest.approx(share)
    assert auto.decode_programs == min(max(1, round(share * 20)), auto.num_decode_tasks)
    fixed = policies.get("hybrid-parametric", schedule="partitioned",
                         decode_sm_share=0.5).plan_hybrid(q, kv, shape, dev)
    assert fixed.decode_programs == min(10, fixed.num_decode_tasks)
    assert fixed.summary()["decode_programs"] == fixed.decode_programs
    # Other schedules carry no persistent decode grid; a partitioned plan with decodes needs one.
    assert policies.get("hybrid-parametric").plan_hybrid(q, kv, shape, dev).decode_programs == 0
    with pytest.raises(ValueError, match="decode_programs"):
        dataclasses.replace(fixed, decode_programs=0)
    with pytest.raises(ValueError, match="decode_programs"):
        dataclasses.replace(auto, schedule="streams")
    with pytest.raises(ValueError, match="decode_sm_share"):
        policies.get("hybrid-parametric", schedule="partitioned", decode_sm_share=0.99)


@pytest.mark.parametrize("share", [0.05, 0.5, 0.95])
def test_partitioned_persistent_decodes_match_reference(share):
    # Few decode programs stride over many decode tasks (speculative rows included), beside
    # prefill tiles whose keys split and whose diagonal is masked.
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    pol = policies.get("hybrid-parametric", schedule="partitioned", prefill_block_m=64,
                       decode_sm_share=share, **SPLITTY)
    err, plan = _run([1, 3, 70, 1, 2], [40, 23, 150, 9, 33], shape, pol)
    assert err < 2e-3
    assert plan.decode_programs < plan.num_decode_tasks


def test_prefill_tile_unmasked_steps_and_tail():
    # Long prefix (unmasked full steps), a diagonal and a ragged kv end; group 4, 128-row tiles.
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=16,
                           dtype="bf16")
    for q_lens, kv_lens in (([50], [50]), ([40], [237]), ([33, 1], [300, 77])):
        err, _ = _run(q_lens, kv_lens, shape, policies.get("hybrid-serial"), dtype=torch.bfloat16)
        assert err < 2e-2


@pytest.mark.parametrize("pre, dec, tail, ahead", [(2, 0, 0, False), (0, 2, 0, False),
                                                   (1, 0, 2, True), (0, 1, 0, True),
                                                   (3, 0, 1, False)])
def test_persistent_colocated_launches_match_reference(pre, dec, tail, ahead):
    # One kind runs as a persistent grid of a few programs striding over its tasks (the
    # co-located two-stream launch); the other kind keeps one program per task.
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    q_lens, kv_lens = [1, 3, 70, 1, 2], [40, 23, 150, 9, 33]
    pol = policies.get("hybrid-parametric", schedule="streams", prefill_block_m=64, **SPLITTY)
    cache = PagedKVCache.from_lengths(kv_lens, shape, dtype=torch.float16, seed=1)
    cache.fill_unused_slots(float("nan"))
    q = make_hybrid_queries(q_lens, shape, dtype=torch.float16, seed=1)
    plan = pol.plan_hybrid(q_lens, kv_lens, shape, TOY)
    launch = prepare_hybrid(plan, cache, q_lens)
    launch = dataclasses.replace(launch, config=dataclasses.replace(
        launch.config, persistent_prefill_programs=pre, persistent_decode_programs=dec,
        prefill_tail_programs=tail, decode_ahead=ahead, ahead_block_n=32))
    assert launch.num_prefill > 2 * pre and launch.num_decode > 2 * dec  # programs stride
    from kvtune.kernels.hybrid import run_hybrid
    ref = attention_reference(q, cache, q_lens)
    for _ in range(2):  # the dynamic grid's counters reset for the next run
        out = run_hybrid(launch, q, cache, out=torch.full_like(q, float("nan")))
        assert relative_error(out, ref) < 2e-3
    assert not launch.counter.any()


@pytest.mark.parametrize("schedule", ["serial", "colocated"])
def test_decode_ahead_plan_knob_reaches_the_launch(schedule):
    """hybrid-parametric's decode_ahead (a tuned knob) is the plan's, the launch config's, and
    the page-ahead decode loop matches the reference; a non-bool is refused naming the field."""
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    q_lens, kv_lens = [1, 3, 70, 1, 2], [40, 23, 150, 9, 33]
    pol = policies.get("hybrid-parametric", schedule=schedule, prefill_block_m=64,
                       decode_ahead=True, **SPLITTY)
    plan = pol.plan_hybrid(q_lens, kv_lens, shape, TOY)
    assert plan.decode_ahead and plan.summary()["decode_ahead"] is True
    cache = PagedKVCache.from_lengths(kv_lens, shape, dtype=torch.float16, seed=2)
    cache.fill_unused_slots(float("nan"))
    launch = prepare_hybrid(plan, cache, q_lens)
    assert launch.config.decode_ahead
    assert not prepare_hybrid(dataclasses.replace(plan, decode_ahead=False), cache,
                              q_lens).config.decode_ahead
    q = make_hybrid_queries(q_lens, shape, dtype=torch.float16, seed=2)
    from kvtune.kernels.hybrid import run_hybrid
    out = run_hybrid(launch, q, cache, out=torch.full_like(q, float("nan")))
    assert relative_error(out, attention_reference(q, cache, q_lens)) < 2e-3
    with pytest.raises(ValueError, match="decode_ahead"):
        policies.get("hybrid-parametric", decode_ahead="yes")


@pytest.mark.parametrize("schedule, qdtype", [("serial", torch.float16), ("fused", torch.bfloat16),
                                              ("colocated", torch.float16),
                                              ("sm-aware", torch.bfloat16)])
def test_fp8_cache_matches_the_reference_of_its_dequantised_values(schedule, qdtype):
    """e4m3 pages with scales far from 1 (so a scale left out is an error of orders of magnitude):
    every schedule, prefill tiles, splits and speculative decodes, against the float64 reference
    of the dequantised cache; the tolerance is the 16-bit one, because the widened tiles hold the
    dequantised values exactly (up to the scales, applied in float32)."""
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4,
                           dtype="bf16" if qdtype == torch.bfloat16 else "fp16",
                           kv_dtype="fp8_e4m3")
    q_lens, kv_lens = [1, 5, 24, 17], [40, 23, 50, 17]
    cache = PagedKVCache.from_lengths(kv_lens, shape, seed=3, k_scale=0.05, v_scale=3.0)
    cache.fill_unused_slots(float("nan"))
    q = make_hybrid_queries(q_lens, shape, seed=3)
    pol = policies.get("hybrid-parametric", schedule=schedule, prefill_block_m=64, **SPLITTY)
    plan = pol.plan_hybrid(q_lens, kv_lens, shape, TOY)
    out = attention(q, cache, q_lens, plan)
    assert not torch.isnan(out).any() and out.dtype == qdtype
    err = relative_error(out, attention_reference(q, cache, q_lens))
    assert err < (2e-2 if qdtype == torch.bfloat16 else 2e-3)
    assert plan.splits.max() > 1 and plan.tile_splits.max() > 1


@pytest.mark.parametrize("widen_max_bytes", [None, 0])
def test_fp8_prefill_reads_a_widened_copy_of_its_pages_or_widens_where_it_loads(
        monkeypatch, widen_max_bytes):
    """An fp8 cache's prefill requests get a 16-bit copy of their pages (one extra launch), equal
    to the raw e4m3 values widened; above PREFILL_WIDEN_MAX_BYTES (0 here) tiles widen where they
    load instead. Both match the float64 reference of the dequantised cache; a 16-bit cache and
    a batch without a prefill tile get no copy."""
    from kvtune.kernels import hybrid_plan
    from kvtune.kernels.hybrid import prefill_pages, run_hybrid

    if widen_max_bytes is not None:
        monkeypatch.setattr(hybrid_plan, "PREFILL_WIDEN_MAX_BYTES", widen_max_bytes)
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4,
                           dtype="bf16", kv_dtype="fp8_e4m3")
    q_lens, kv_lens = [1, 24, 3, 17], [40, 50, 23, 17]
    cache = PagedKVCache.from_lengths(kv_lens, shape, seed=5, k_scale=0.05, v_scale=3.0)
    q = make_hybrid_queries(q_lens, shape, seed=5)
    plan = policies.get("hybrid-parametric", schedule="serial", prefill_block_m=64,
                        **SPLITTY).plan_hybrid(q_lens, kv_lens, shape, TOY)
    launch = prepare_hybrid(plan, cache, q_lens)
    pages = launch.prefill_pages
    if widen_max_bytes == 0:
        assert pages is None
    else:
        prefill_reqs = sorted(set(plan.tile_request.tolist()))
        assert prefill_reqs == [1, 3]
        indptr = cache.page_indptr.tolist()
        want_src = [p for r in prefill_reqs for p in cache.page_indices[indptr[r]:indptr[r + 1]]
                    .tolist()]
        assert pages.src_pages.tolist() == want_src
        counts = [indptr[r + 1] - indptr[r] if r in prefill_reqs else 0 for r in range(4)]
        assert pages.page_indptr.tolist() == [0, *np.cumsum(counts).tolist()]
        assert pages.k.dtype == torch.bfloat16 and pages.k.shape[0] == len(want_src)
    out = run_hybrid(launch, q, cache, out=torch.full_like(q, float("nan")))
    if pages is not None:  # the copy holds the raw e4m3 values, widened exactly
        src = pages.src_pages.long()
        assert torch.equal(pages.k, cache.k_pages[src].to(torch.bfloat16))
        assert torch.equal(pages.v, cache.v_pages[src].to(torch.bfloat16))
        assert launch.num_launches == 3 + (launch.merge.shape[0] > 0)
    assert relative_error(out, attention_reference(q, cache, q_lens)) < 2e-2
    cache16 = PagedKVCache.from_lengths(kv_lens, AttentionShape(
        num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="bf16"), seed=5)
    assert prefill_pages(plan, cache16) is None
    decodes = policies.get("hybrid-serial").plan_hybrid([1, 1], [40, 23], shape, TOY)
    assert prefill_pages(decodes, PagedKVCache.from_lengths([40, 23], shape, seed=5)) is None
    # The simulator's count (kernels/hybrid_plan.py) is the kernel's: 13 + 5 pages of 4 tokens.
    assert hybrid_plan.widened_prefill_pages(plan, shape) == (0 if pages is None else 18)
    assert hybrid_plan.widened_prefill_pages(plan, cache16.shape) == 0


def test_ordered_launch_chains_decode_and_tail_behind_the_resident_prefill_grid(monkeypatch):
    """HybridConfig.ordered_launch (colocated's default, sm_90+): the persistent prefill grid
    signals (GDC_TRIGGER) and counts out (role 1), the decode grid and then the tail launch as
    programmatic dependents on the same stream, and the tail (role 2) waits for the persistent
    programs (dynamic_programs of them); without it no flag is passed. Recorded as on a GPU (the
    interpreter passes no programmatic-launch flag), not run."""
    from kvtune.kernels import hybrid as hybrid_mod

    calls = []

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                calls.append((grid[0], kw["HAS_PREFILL"], kw["HAS_DECODE"],
                              kw.get("GDC_TRIGGER", False), kw.get("launch_pdl", False),
                              kw.get("ORDERED_ROLE", 0), args[14]))  # args[14]: dynamic_programs
            return launch
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    q_lens, kv_lens = [24, 1, 1], [50, 40, 23]
    plan = policies.get("hybrid-colocated").plan_hybrid(q_lens, kv_lens, shape, TOY)
    cache = PagedKVCache.from_lengths(kv_lens, shape, seed=1)
    q = make_hybrid_queries(q_lens, shape, seed=1)
    launch = prepare_hybrid(plan, cache, q_lens)
    assert launch.config.ordered_launch  # colocated's default (kernels/hybrid.py hybrid_config)
    serial = prepare_hybrid(policies.get("hybrid-serial").plan_hybrid(q_lens, kv_lens, shape,
                                                                       TOY), cache, q_lens)
    assert not serial.config.ordered_launch
    assert not hybrid_mod.has_programmatic_launch(cache.device)
    monkeypatch.setattr(hybrid_mod, "_hybrid_kernel", Recorder())
    monkeypatch.setattr(hybrid_mod, "_merge_rows_kernel", Recorder())
    monkeypatch.setattr(hybrid_mod, "INTERPRETED", False)
    from kvtune.kernels.hybrid import run_hybrid

    # A GPU without programmatic launch keeps the two-stream order.
    run_hybrid(launch, q, cache)
    assert all(c[3:6] == (False, False, 0) for c in calls if c[1] or c[2])
    calls.clear()
    monkeypatch.setattr(hybrid_mod, "has_programmatic_launch", lambda device: True)

    run_hybrid(launch, q, cache)
    pprog = min(launch.num_prefill, TOY.sm_count)  # one persistent prefill program per SM
    assert launch.num_prefill > pprog and launch.num_decode > 0
    assert [c for c in calls if c[1] or c[2]] == [
        (pprog, True, False, True, False, 1, 0),              # prefill grid: signals, counts out
        (launch.num_decode, False, True, False, True, 0, 0),  # decode grid, its dependent
        (pprog, True, False, False, True, 2, pprog)]          # the tail: leaves after them
    calls.clear()
    off = dataclasses.replace(launch, config=dataclasses.replace(launch.config,
                                                                  ordered_launch=False))
    run_hybrid(off, q, cache)
    assert all(c[3:6] == (False, False, 0) for c in calls if c[1] or c[2])
    # Decodes through kernels/decode.py in the chain: its stage-1 launch is the dependent.
    from kvtune.kernels import decode as decode_mod

    dec_calls = []

    class DecodeRecorder:
        def __getitem__(self, grid):
            return lambda *args, **kw: dec_calls.append(kw.get("launch_pdl", False))
    monkeypatch.setattr(decode_mod, "_attend_kernel", DecodeRecorder())
    monkeypatch.setattr(decode_mod, "INTERPRETED", False)
    monkeypatch.setattr(decode_mod, "launch_merge", lambda *a: dec_calls.append("merge"))
    calls.clear()
    run_hybrid(prepare_hybrid(plan, cache, q_lens, decode_kernel=True), q, cache)
    assert dec_calls[0] is True
    assert [c[3:6] for c in calls if c[1] or c[2]] == [(True, False, 1), (False, True, 2)]


@pytest.mark.parametrize("ordered", [False, True])
def test_colocated_counters_are_reset_for_the_next_step(ordered):
    """The colocated step, on two streams or as the ordered chain (run in launch order on the
    interpreter, with the tail's wait for the persistent programs and its reset): correct twice
    in a row, the counters all back at zero after each step."""
    from kvtune.kernels.hybrid import run_hybrid

    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    q_lens, kv_lens = [24, 1, 1, 3], [50, 40, 23, 30]
    plan = policies.get("hybrid-colocated").plan_hybrid(q_lens, kv_lens, shape, TOY)
    cache = PagedKVCache.from_lengths(kv_lens, shape, seed=4)
    q = make_hybrid_queries(q_lens, shape, seed=4)
    launch = prepare_hybrid(plan, cache, q_lens)
    launch = dataclasses.replace(launch, config=dataclasses.replace(launch.config,
                                                                     ordered_launch=ordered))
    assert launch.config.persistent_prefill_programs and launch.config.prefill_tail_programs
    ref = attention_reference(q, cache, q_lens)
    for _ in range(2):
        out = run_hybrid(launch, q, cache, out=torch.full_like(q, float("nan")))
        assert relative_error(out, ref) < 2e-3
        assert int(launch.counter.abs().sum()) == 0


@pytest.mark.parametrize("q_lens, kv_lens, schedule, kv_dtype", [
    ([1, 24, 1, 17, 1], [40, 50, 9, 17, 33], "serial", "fp16"),     # decodes between chunks
    ([1, 1, 24], [40, 9, 50], "streams", "fp8_e4m3"),                # decodes first, fp8 pages
    ([1, 1, 1], [40, 9, 33], "fused", "fp16"),                       # decode-only, one launch
])
def test_single_token_decodes_run_the_decode_kernel(q_lens, kv_lens, schedule, kv_dtype):
    """Where the decodes (q_len 1) have a launch of their own, kernels/decode.py runs them on the
    decodes' page tables: its output rows are bit for bit those of decode.py on the same decode
    plan, and the whole step matches the float64 reference; forced back to the hybrid kernel's
    items (decode_kernel=False) it matches too."""
    from kvtune.kernels.decode import decode
    from kvtune.kernels.hybrid import run_hybrid

    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4,
                           dtype="fp16", kv_dtype=kv_dtype)
    scales = {"k_scale": 0.05, "v_scale": 3.0} if kv_dtype == "fp8_e4m3" else {}
    cache = PagedKVCache.from_lengths(kv_lens, shape, dtype=torch.float16, seed=4, **scales)
    cache.fill_unused_slots(float("nan"))
    q = make_hybrid_queries(q_lens, shape, dtype=torch.float16, seed=4)
    pol = policies.get("hybrid-parametric", schedule=schedule, prefill_block_m=64, **SPLITTY)
    plan = pol.plan_hybrid(q_lens, kv_lens, shape, TOY)
    assert plan.splits[plan.decode_requests].max() > 1  # decode.py's own merge runs too
    launch = prepare_hybrid(plan, cache, q_lens)
    assert launch.decode_kernel is not None and launch.decode_tasks.shape[0] == 0
    contiguous = np.array_equal(plan.decode_requests, np.arange(plan.num_decodes))
    assert (launch.decode_index is None) == contiguous
    out = run_hybrid(launch, q, cache, out=torch.full_like(q, float("nan")))
    ref = attention_reference(q, cache, q_lens)
    tol = 2e-3 if kv_dtype == "fp16" else 5e-3
    assert relative_error(out, ref) < tol
    rows = np.concatenate(([0], np.cumsum(q_lens)[:-1]))[plan.decode_requests]
    alone = decode(q[torch.from_numpy(rows)], cache.subset(plan.decode_requests),
                   plan.decode_plan)
    assert torch.equal(out[torch.from_numpy(rows)], alone)
    items = prepare_hybrid(plan, cache, q_lens, decode_kernel=False)
    assert items.decode_kernel is None and items.decode_tasks.shape[0] == plan.num_decode_tasks
    out_items = run_hybrid(items, q, cache, out=torch.full_like(q, float("nan")))
    assert relative_error(out_items, ref) < tol


def test_decodes_that_share_sms_or_verify_several_tokens_keep_the_hybrid_items():
    """colocated / fused beside prefill tiles and speculative decodes (q_len > 1) keep the hybrid
    kernel's decode items by default; asking for decode.py is refused naming the argument where
    it cannot run (one launch, several query tokens)."""
    from kvtune.kernels.hybrid_plan import decodes_through_decode_kernel

    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    cache = PagedKVCache.from_lengths([40, 50, 9], shape, dtype=torch.float16)
    for schedule, q_lens in (("colocated", [1, 24, 1]), ("fused", [1, 24, 1]),
                             ("serial", [1, 24, 3])):
        plan = policies.get("hybrid-parametric", schedule=schedule, prefill_block_m=64,
                            **SPLITTY).plan_hybrid(q_lens, [40, 50, 9], shape, TOY)
        assert not decodes_through_decode_kernel(plan)
        assert prepare_hybrid(plan, cache, q_lens).decode_kernel is None
        if schedule == "colocated":  # allowed when asked (measured, not the default)
            assert prepare_hybrid(plan, cache, q_lens, decode_kernel=True).decode_kernel
            continue
        with pytest.raises(ValueError, match="decode_kernel"):
            prepare_hybrid(plan, cache, q_lens, decode_kernel=True)


@pytest.mark.parametrize("ordered", [False, True])
def test_colocated_step_with_decodes_through_the_decode_kernel(ordered):
    """decode_kernel=True on a colocated plan (not its default): kernels/decode.py's launch takes
    the decode grid's place beside the persistent prefill grid, on two streams or in the ordered
    chain (launch order on the interpreter); correct twice in a row, counters back at zero."""
    from kvtune.kernels.hybrid import run_hybrid
    from kvtune.kernels.hybrid_plan import decode_kernel_allowed, decodes_through_decode_kernel

    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4,
                           dtype="bf16", kv_dtype="fp8_e4m3")
    q_lens, kv_lens = [1, 24, 1, 1], [40, 50, 23, 30]
    plan = policies.get("hybrid-colocated").plan_hybrid(q_lens, kv_lens, shape, TOY)
    assert decode_kernel_allowed(plan) and not decodes_through_decode_kernel(plan)
    cache = PagedKVCache.from_lengths(kv_lens, shape, seed=6, k_scale=0.05, v_scale=3.0)
    q = make_hybrid_queries(q_lens, shape, seed=6)
    launch = prepare_hybrid(plan, cache, q_lens, decode_kernel=True)
    launch = dataclasses.replace(launch, config=dataclasses.replace(launch.config,
                                                                     ordered_launch=ordered))
    assert launch.decode_index is not None  # rows 0, 25, 26: gathered before, scattered after
    ref = attention_reference(q, cache, q_lens)
    for _ in range(2):
        out = run_hybrid(launch, q, cache, out=torch.full_like(q, float("nan")))
        assert relative_error(out, ref) < 2e-2
        assert int(launch.counter.abs().sum()) == 0


def test_decode_kernel_plan_knob_reaches_the_launch():
    """hybrid-parametric's decode_kernel (a tuned knob): True puts a colocated plan's decodes on
    kernels/decode.py, False keeps a serial plan's as hybrid items, None is the schedule's
    default; where decode.py cannot run (speculative decodes) the knob has no effect; the
    result matches the reference either way; a non-bool is refused naming the field."""
    from kvtune.kernels.hybrid import run_hybrid

    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4, dtype="fp16")
    q_lens, kv_lens = [1, 24, 1], [40, 50, 23]
    cache = PagedKVCache.from_lengths(kv_lens, shape, dtype=torch.float16, seed=7)
    q = make_hybrid_queries(q_lens, shape, dtype=torch.float16, seed=7)
    ref = attention_reference(q, cache, q_lens)
    for schedule, knob, want in (("colocated", True, True), ("colocated", None, False),
                                 ("serial", False, False), ("serial", None, True)):
        pol = policies.get("hybrid-parametric", schedule=schedule, prefill_block_m=64,
                           decode_kernel=knob, **SPLITTY)
        plan = pol.plan_hybrid(q_lens, kv_lens, shape, TOY)
        assert plan.decode_kernel is knob and plan.summary()["decode_kernel"] is want
        launch = prepare_hybrid(plan, cache, q_lens)
        assert (launch.decode_kernel is not None) is want, (schedule, knob)
        out = run_hybrid(launch, q, cache, out=torch.full_like(q, float("nan")))
        assert relative_error(out, ref) < 2e-3
    spec = policies.get("hybrid-parametric", schedule="serial", decode_kernel=True).plan_hybrid(
        [3, 24], [40, 50], shape, TOY)
    assert spec.summary()["decode_kernel"] is False
    with pytest.raises(ValueError, match="decode_kernel"):
        policies.get("hybrid-parametric", decode_kernel="yes")


def test_hybrid_tuned_file_refuses_another_shape_naming_the_field():
    """A hybrid heuristic plans only the shape it was tuned for (as a decode heuristic): the
    H100 file (llama3-8b, bf16 pages) refuses fp8 pages and another head_dim, naming the field,
    and plans its own shape."""
    path = "benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json"
    pol = policies.get("hybrid-tuned", path=path)
    h100 = DeviceSpec("h100", sm_count=132, l2_bytes=0, hbm_bytes_per_s=3.35e12)
    q_lens, kv_lens = [1] * 32 + [2048], [8192] * 32 + [10240]
    assert pol.plan_hybrid(q_lens, kv_lens, AttentionShape(), h100).schedule == "colocated"
    with pytest.raises(ValueError, match=r"shape\.kv_dtype: .*'bf16'.*'fp8_e4m3'"):
        pol.plan_hybrid(q_lens, kv_lens, AttentionShape(kv_dtype="fp8_e4m3"), h100)
    with pytest.raises(ValueError, match=r"shape\.head_dim"):
        pol.plan_hybrid(q_lens, kv_lens, AttentionShape(head_dim=64), h100)


def test_the_decode_part_launches_in_the_order_asked_with_the_same_bits():
    """prepare_hybrid(decode_launch_order=...): the decodes' own launch (kernels/decode.py) in the
    product's order by default (longest first for a static plan, as the decode-only product) or
    in the plan's, the same bits either way; another order is refused naming the field."""
    from kvtune.kernels.hybrid import run_hybrid

    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4,
                           dtype="bf16")
    q_lens, kv_lens = [1, 24, 1, 1], [90, 50, 7, 30]
    plan = policies.get("hybrid-serial").plan_hybrid(q_lens, kv_lens, shape, TOY)
    cache = PagedKVCache.from_lengths(kv_lens, shape, seed=8)
    q = make_hybrid_queries(q_lens, shape, seed=8)
    default = prepare_hybrid(plan, cache, q_lens, decode_kernel=True)
    in_plan = prepare_hybrid(plan, cache, q_lens, decode_kernel=True, decode_launch_order="plan")
    assert not plan.decode_plan.is_persistent
    assert default.decode_kernel.launch_order == "longest-first"
    assert in_plan.decode_kernel.launch_order == "plan"
    outs = [run_hybrid(launch, q, cache, out=torch.full_like(q, float("nan")))
            for launch in (default, in_plan)]
    assert torch.equal(outs[0], outs[1])
    assert relative_error(outs[1], attention_reference(q, cache, q_lens)) < 2e-2
    with pytest.raises(ValueError, match="launch_order: 'fifo' not allowed"):
        prepare_hybrid(plan, cache, q_lens, decode_launch_order="fifo")

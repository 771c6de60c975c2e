"""Tests of the SM simulator (harness/sim_model.py) and its backend (harness/backends/simulator.py).

Qualitative checks reproduce the seed article's H200 observations with the default shape
(32 q heads, 8 KV heads, head_dim 128, page 16, bf16) at 262,144 total tokens; model-sanity checks
pin the event model itself.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvtune.harness.backends import Measurement, Verification, backend_class
from kvtune.harness.backends.simulator import BACKEND, SimulatorBackend
from kvtune.harness.device import device_model
from kvtune.harness.sim_model import (
    DEFAULT_CONSTANTS,
    SimConstants,
    cta_rate_cap_bytes_per_s,
    kernel_block_tokens,
    merge_bytes,
    partial_block_us,
    simulate,
    task_bytes,
)
from kvtune.kernels.plan import AttentionShape, DeviceSpec, build_plan
from kvtune.workloads.batch import DecodeBatch

TOTAL_TOKENS = 262_144
LONG_SKEW80_TOKENS = 209_715  # 80% of 262,144, rounded down
SHAPE = AttentionShape()
H200 = device_model("h200")


def skew80(batch_size: int) -> np.ndarray:
    """One request of 209,715 tokens at index 0, the rest split evenly (remainder spread)."""
    rest = TOTAL_TOKENS - LONG_SKEW80_TOKENS
    base, rem = divmod(rest, batch_size - 1)
    kv = np.full(batch_size, base, dtype=np.int64)
    kv[0] = LONG_SKEW80_TOKENS
    kv[1 : 1 + rem] += 1
    assert kv.sum() == TOTAL_TOKENS
    return kv


def uniform(batch_size: int) -> np.ndarray:
    base, rem = divmod(TOTAL_TOKENS, batch_size)
    kv = np.full(batch_size, base, dtype=np.int64)
    kv[:rem] += 1
    assert kv.sum() == TOTAL_TOKENS
    return kv


def policy_time_us(policy: str, kv_lens: np.ndarray, **overrides) -> float:
    from kvtune.kernels.policies import get

    plan = get(policy, **overrides).plan(kv_lens, SHAPE, H200)
    return simulate(plan, SHAPE, H200).time_us


def floor_us(
    kv_lens: np.ndarray, device: DeviceSpec = H200, constants: SimConstants = DEFAULT_CONSTANTS
) -> float:
    """KV bytes over the achievable bandwidth: no schedule can beat it in the model."""
    kv_bytes = kv_lens.sum() * SHAPE.num_kv_heads * SHAPE.kv_bytes_per_token_per_head
    return kv_bytes / (device.hbm_bytes_per_s * constants.hbm_efficiency) * 1e6


# --- the seed article's observations --------------------------------------------------------


def test_tensor_core_threshold_on_skew80():
    t16 = policy_time_us("flashinfer-tensor-core", skew80(16))
    t32 = policy_time_us("flashinfer-tensor-core", skew80(32))
    t48 = policy_time_us("flashinfer-tensor-core", skew80(48))
    # The issue text asks for ">= 3x from batch 32 to 48", but the H200 measurement it cites is
    # 1.48 ms at B=32 (long request already only 2 chunks) and 2.68 ms at B=48 (no split): 1.8x.
    # The 10x cliff the article describes is from a well-split batch (B=16, 290 us) to B=48.
    assert t48 >= 3 * t16
    assert t48 >= 1.5 * t32
    assert t32 >= 3 * t16


def test_fa3_stays_flat_on_skew80():
    t = {b: policy_time_us("fa3", skew80(b)) for b in (16, 32, 48, 256)}
    assert max(t[32], t[48]) <= 1.3 * min(t[32], t[48])
    assert max(t[16], t[256]) <= 1.3 * min(t[16], t[256])


POWERS_OF_TWO = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


@pytest.mark.parametrize(
    "policy, sizes",
    [
        ("flashinfer-tensor-core", POWERS_OF_TWO),
        ("fa3", POWERS_OF_TWO),
        # A small fixed split keeps every CTA short, so no batch size leaves a long straggler.
        ("fixed-split", POWERS_OF_TWO + [3, 33, 34, 48, 96, 200, 300]),
    ],
)
def test_uniform_batches_stay_flat(policy, sizes):
    # Policies that hand whole requests to CTAs are flat only where the CTAs fill whole waves:
    # e.g. tensor-core at B=34 leaves 8 CTAs of 7,710 tokens for a second wave, which run alone
    # at one CTA's rate cap (wave quantization; test_wave_quantization_tail pins it).
    times = np.array([policy_time_us(policy, uniform(b)) for b in sizes])
    floor = floor_us(uniform(1))
    assert (times >= floor).all()
    assert (times <= 1.3 * floor).all(), dict(zip(sizes, times.round(1)))
    assert times.max() / times.min() <= 1.3


def test_wave_quantization_tail():
    # 34 x 8 = 272 equal CTAs on 264 slots: the last 8 stream alone at the CTA cap.
    plan = build_plan(uniform(34), 1 << 20, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    c = SimConstants()
    result = simulate(plan, SHAPE, H200, c)
    straggler_us = task_bytes(plan, SHAPE).max() / c.cta_rate_cap_bytes_per_s * 1e6
    assert result.time_us >= floor_us(uniform(34)) + 0.9 * straggler_us
    late = np.argsort(result.start_us)[-8:]
    assert result.start_us[late].min() >= result.end_us.min() - 1e-9


def test_no_split_tail_grows_with_longest_request():
    lengths = [4_096, 16_384, 65_536, 131_072, 262_144, 524_288, 1_048_576]
    times = []
    for longest in lengths:
        kv = np.full(64, 2_048, dtype=np.int64)
        kv[0] = longest
        times.append(policy_time_us("no-split", kv))
    assert all(b > a for a, b in itertools.pairwise(times)), times
    # Past the point where the long CTA dominates, its time is its bytes at one CTA's cap.
    long_bytes = 1_048_576 * SHAPE.kv_bytes_per_token_per_head
    assert times[-1] >= long_bytes / SimConstants().cta_rate_cap_bytes_per_s * 1e6


def test_ballpark_of_h200_measurements():
    assert policy_time_us("flashinfer-tensor-core", uniform(16)) == pytest.approx(262, rel=0.20)
    assert policy_time_us("flashinfer-tensor-core", uniform(256)) == pytest.approx(273, rel=0.20)
    assert policy_time_us("flashinfer-tensor-core", skew80(32)) == pytest.approx(1484, rel=0.20)
    assert policy_time_us("flashinfer-tensor-core", skew80(48)) == pytest.approx(2681, rel=0.20)
    assert policy_time_us("flashinfer-tensor-core", skew80(256)) == pytest.approx(2702, rel=0.20)
    assert policy_time_us("fixed-split", skew80(64)) == pytest.approx(283, rel=0.25)
    assert policy_time_us("fixed-split", skew80(256)) == pytest.approx(284, rel=0.25)


# --- model sanity ---------------------------------------------------------------------------


def _check_timeline(result, plan):
    n = plan.num_tasks
    assert np.array_equal(np.sort(result.task), np.arange(n))  # every task exactly once
    item = np.arange(n) % plan.num_items
    assert np.array_equal(result.request, plan.work_request[item])
    assert np.array_equal(result.kv_head, np.arange(n) // plan.num_items)
    assert (result.start_us <= result.stream_start_us).all()
    assert (result.stream_start_us < result.end_us).all()
    slot_id = result.slot * 100_000 + result.sm
    order = np.lexsort((result.start_us, slot_id))
    same = slot_id[order][1:] == slot_id[order][:-1]
    gaps = result.start_us[order][1:] - result.end_us[order][:-1]
    assert (gaps[same] >= -1e-9).all()  # tasks never overlap on a slot
    assert result.stage1_us == pytest.approx(result.end_us.max())
    assert result.time_us == pytest.approx(result.stage1_us + result.merge_us)


plan_cases = st.tuples(
    st.lists(st.integers(1, 200_000), min_size=1, max_size=40),
    st.sampled_from([64, 512, 2048, 1 << 20]),
    st.sampled_from(
        ["static", "static-heavy-first", "persistent-round-robin", "persistent-heavy-first"]
    ),
    st.integers(1, 300),
    st.integers(1, 4),
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(plan_cases)
def test_model_invariants_on_random_plans(case):
    kv_lens, chunk, schedule, grid, ctas_per_sm = case
    plan = build_plan(
        kv_lens,
        chunk,
        num_kv_heads=8,
        page_size=16,
        schedule=schedule,
        grid_size=grid,
        ctas_per_sm=ctas_per_sm,
    )
    result = simulate(plan, SHAPE, H200)
    _check_timeline(result, plan)
    c = SimConstants()
    streamed_bytes = task_bytes(plan, SHAPE).sum()
    assert (
        result.stage1_us - c.launch_us
        >= streamed_bytes / (H200.hbm_bytes_per_s * c.hbm_efficiency) * 1e6
    )
    assert result.time_us >= floor_us(plan.kv_lens)
    assert (result.sm < H200.sm_count).all() and (result.slot < ctas_per_sm).all()
    assert (result.merge_us > 0) == bool((plan.splits > 1).any())


def test_single_task_runs_at_the_cta_cap():
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=1)
    plan = build_plan([100_000], 1 << 20, num_kv_heads=1, page_size=16)
    c = SimConstants()
    result = simulate(plan, shape, H200, c)
    nbytes = 100_000 * shape.kv_bytes_per_token_per_head + 2 * 4 * 128 * 2  # KV, q rows, output
    expected = c.launch_us + c.cta_start_us + nbytes / c.cta_rate_cap_bytes_per_s * 1e6
    assert result.time_us == pytest.approx(expected, rel=1e-9)
    assert result.merge_us == 0


def test_start_costs_per_cta_and_per_persistent_task():
    c = SimConstants(cta_start_us=2.0, persistent_task_us=0.25)
    kv = skew80(40)
    static = simulate(
        build_plan(kv, 8_192, num_kv_heads=8, page_size=16, ctas_per_sm=2), SHAPE, H200, c
    )
    assert np.allclose(static.stream_start_us - static.start_us, 2.0)
    plan = build_plan(
        kv,
        8_192,
        num_kv_heads=8,
        page_size=16,
        schedule="persistent-round-robin",
        grid_size=132,
        ctas_per_sm=1,
    )
    persistent = simulate(plan, SHAPE, H200, c)
    first = np.arange(plan.num_tasks) < 132
    assert np.allclose((persistent.stream_start_us - persistent.start_us)[first], 2.0)
    assert np.allclose((persistent.stream_start_us - persistent.start_us)[~first], 0.25)


def test_task_and_merge_bytes():
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64)
    plan = build_plan([100, 1_000], 512, num_kv_heads=2, page_size=16)  # request 1 splits in 2
    nbytes = task_bytes(plan, shape)
    kv_per_token = 2 * 64 * 2
    q = 4 * 64 * 2
    final_out, partial_out = 4 * 64 * 2, 4 * (64 * 4 + 4)
    per_item = [
        100 * kv_per_token + q + final_out,
        512 * kv_per_token + q + partial_out,
        488 * kv_per_token + q + partial_out,
    ]
    assert np.array_equal(nbytes, np.tile(per_item, 2))
    assert merge_bytes(plan, shape) == 2 * 8 * (64 * 4 + 4) + 8 * 64 * 2
    assert merge_bytes(build_plan([100, 1_000], 1 << 20, num_kv_heads=2, page_size=16), shape) == 0


def test_many_equal_tasks_share_bandwidth():
    # 264 equal tasks on 264 slots: all stream together at bandwidth / 264 (below the cap).
    plan = build_plan(np.full(33, 8_192), 8_192, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    c = SimConstants()
    result = simulate(plan, SHAPE, H200, c)
    total = task_bytes(plan, SHAPE).sum()
    expected = (
        c.launch_us + c.cta_start_us + total / (H200.hbm_bytes_per_s * c.hbm_efficiency) * 1e6
    )
    assert result.stage1_us == pytest.approx(expected, rel=1e-9)
    assert np.allclose(result.end_us, result.end_us[0])


def test_static_grid_fills_first_free_slot():
    device = DeviceSpec("tiny", sm_count=2, l2_bytes=0, hbm_bytes_per_s=1e12)
    plan = build_plan([1_024, 4_096, 1_024, 1_024, 1_024], 1 << 20, num_kv_heads=1, page_size=16)
    result = simulate(plan, AttentionShape(num_qo_heads=1, num_kv_heads=1), device)
    # Tasks 0, 1 start at once on SM 0 and SM 1; SM 0 frees first and takes 2, 3, 4 in order.
    assert list(result.sm) == [0, 1, 0, 0, 0]
    assert np.all(np.diff(result.start_us) >= 0)
    assert result.start_us[2] == pytest.approx(result.end_us[0])


def test_round_robin_assignment():
    device = DeviceSpec("tiny", sm_count=2, l2_bytes=0, hbm_bytes_per_s=1e12)
    shape = AttentionShape(num_qo_heads=2, num_kv_heads=2)
    kv = [1_024, 8_192, 512, 1_024, 2_048, 256, 4_096]
    for grid, ctas_per_sm in [(3, 2), (4, 1)]:  # grid below and above the 2 x ctas_per_sm slots
        plan = build_plan(
            kv,
            1 << 20,
            num_kv_heads=2,
            page_size=16,
            schedule="persistent-round-robin",
            grid_size=grid,
            ctas_per_sm=ctas_per_sm,
        )
        result = simulate(plan, shape, device)
        _check_timeline(result, plan)
        assert np.array_equal(result.cta, np.arange(plan.num_tasks) % grid)
        for cta in range(grid):
            mine = np.flatnonzero(result.cta == cta)
            assert np.all(np.diff(result.start_us[mine]) > 0)  # its tasks run in order
            assert len(set(zip(result.sm[mine], result.slot[mine]))) == 1  # on one slot
        if grid > 2 * ctas_per_sm:
            late = np.flatnonzero(result.cta >= 2)
            assert result.start_us[late].min() >= result.end_us[result.cta < 2].min() - 1e-9


def test_heavy_first_counter_hands_out_tasks_in_order():
    plan = build_plan(
        skew80(64),
        2_048,
        num_kv_heads=8,
        page_size=16,
        schedule="persistent-heavy-first",
        grid_size=132,
    )
    result = simulate(plan, SHAPE, H200)
    _check_timeline(result, plan)
    assert np.all(np.diff(result.start_us) >= -1e-9)
    assert len(np.unique(result.cta)) == 132
    # The next task goes to whichever CTA frees first.
    assert result.start_us[132] == pytest.approx(result.end_us[:132].min())


def test_heavy_first_beats_static_on_skew():
    kv = np.full(256, 205, dtype=np.int64)
    kv[-1] = 209_715  # the long request last in request order, so static runs it last
    times = {}
    for chunk in (1 << 20, 16_384):
        for schedule in (
            "static",
            "static-heavy-first",
            "persistent-round-robin",
            "persistent-heavy-first",
        ):
            plan = build_plan(
                kv,
                chunk,
                num_kv_heads=8,
                page_size=16,
                schedule=schedule,
                grid_size=264,
                ctas_per_sm=2,
            )
            times[chunk, schedule] = simulate(plan, SHAPE, H200).time_us
        assert times[chunk, "static-heavy-first"] <= times[chunk, "static"]
        assert times[chunk, "persistent-heavy-first"] < times[chunk, "static"]
    # Round-robin piles several long chunks on the same CTAs; the counter balances them.
    assert times[16_384, "persistent-heavy-first"] < 0.5 * times[16_384, "persistent-round-robin"]


def test_constants_override():
    plan = build_plan(skew80(16), 4_096, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    base = simulate(plan, SHAPE, H200)
    slower_launch = simulate(plan, SHAPE, H200, SimConstants(launch_us=10.0))
    assert slower_launch.time_us == pytest.approx(base.time_us + 7.0)  # the first launch
    slower_merge = simulate(plan, SHAPE, H200, SimConstants(merge_launch_us=10.0))
    assert slower_merge.time_us == pytest.approx(base.time_us + 7.0)  # the merge launch
    half_bw = simulate(plan, SHAPE, H200, SimConstants(hbm_efficiency=0.435))
    assert half_bw.time_us > 1.8 * base.time_us - 20
    plan_long = build_plan(skew80(64), 1 << 20, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    capped = simulate(plan_long, SHAPE, H200, SimConstants(cta_rate_cap_bytes_per_s=20e9))
    assert capped.time_us > 1.9 * simulate(plan_long, SHAPE, H200).time_us - 100
    with pytest.raises(ValueError, match="hbm_efficiency"):
        SimConstants(hbm_efficiency=1.5)
    with pytest.raises(ValueError, match="cta_start_us"):
        SimConstants(cta_start_us=-1)


def test_shape_must_match_plan():
    plan = build_plan([4_096], 1 << 20, num_kv_heads=4, page_size=16)
    with pytest.raises(ValueError, match="num_kv_heads"):
        simulate(plan, SHAPE, H200)


def test_100k_tasks_is_fast():
    kv = np.random.default_rng(0).integers(1, 8_192, 12_500)
    plan = build_plan(kv, 1 << 20, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    assert plan.num_tasks == 100_000
    t0 = time.perf_counter()
    result = simulate(plan, SHAPE, H200)
    assert time.perf_counter() - t0 < 2.0
    assert result.time_us >= floor_us(kv)


def test_to_frame_has_the_timeline():
    plan = build_plan(skew80(8), 8_192, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    frame = simulate(plan, SHAPE, H200).to_frame()
    assert len(frame) == plan.num_tasks
    for column in ("task", "request", "split", "kv_head", "sm", "slot", "start_us", "end_us"):
        assert column in frame.columns
    assert (frame["end_us"] > frame["start_us"]).all()


# --- the backend ----------------------------------------------------------------------------


def test_backend_protocol():
    assert backend_class("simulator") is SimulatorBackend is BACKEND
    backend = SimulatorBackend(H200)
    batch = DecodeBatch(skew80(32), SHAPE)
    plan = build_plan(batch.kv_lens, 4_096, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    assert backend.name == "simulator" and backend.device is H200
    assert backend.unsupported_reason(plan) is None
    check = backend.verify(batch, plan)
    assert isinstance(check, Verification) and check.ok and not check.checked
    m = backend.measure(batch, plan)
    assert isinstance(m, Measurement)
    expected = simulate(plan, SHAPE, H200)
    assert m.status == "ok" and m.timer == "simulated" and m.samples == 1
    assert m.latency_us == m.p10_us == m.p90_us == pytest.approx(expected.time_us)
    assert m.rel_spread == 0 and m.noise_met
    assert m.bytes_moved == batch.min_bytes
    assert m.achieved_bytes_per_s == pytest.approx(batch.min_bytes / (expected.time_us * 1e-6))
    assert m.extra["sim_stage1_us"] == pytest.approx(expected.stage1_us)
    assert m.extra["sim_merge_us"] == pytest.approx(expected.merge_us)
    assert m.extra["sim_model"] == "h200"
    row = m.to_row()
    assert row["timer"] == "simulated" and row["sim_model"] == "h200"
    slow = SimulatorBackend(H200, SimConstants(launch_us=50.0)).measure(batch, plan)
    assert slow.latency_us > m.latency_us
    backend.close()


def test_backend_rejects_plan_of_another_batch():
    backend = SimulatorBackend(H200)
    plan = build_plan(skew80(32), 4_096, num_kv_heads=8, page_size=16)
    with pytest.raises(ValueError, match="plan"):
        backend.measure(DecodeBatch(uniform(32), SHAPE), plan)


def test_smooth_roofline_rates():
    from kvtune.harness.sim_model import stream_rates

    bw, cap = 4000.0, 30.0  # bytes/us: 133 tasks at the cap would ask for the bandwidth
    hard = np.array(stream_rates(1000, bw, cap, float("inf")))
    n = np.arange(1, 1001)
    assert hard[0] == 0 and np.allclose(hard[1:], np.minimum(n * cap, bw) / n)
    soft = np.array(stream_rates(1000, bw, cap, 2.0))
    total = soft[1:] * n
    assert (total < np.minimum(n * cap, bw)).all() and (np.diff(total) > 0).all()
    # Where n x cap equals the bandwidth, k = 2 gives 2 ** -0.5 of it; far above, nearly all.
    assert total[132] == pytest.approx(bw * (1 + (bw / (133 * cap)) ** 2) ** -0.5, rel=1e-12)
    assert total[-1] > 0.99 * bw and total[0] == pytest.approx(cap, rel=1e-3)


def test_kernel_occupancy_sets_the_slots():
    # 272 equal tasks of a plan counting 2 CTAs per SM (264 slots): 8 tasks run a second wave
    # alone at the cap; a kernel that runs 3 per SM whatever the plan says takes them in one.
    plan = build_plan(np.full(34, 8_192), 8_192, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    counted = simulate(plan, SHAPE, H200, SimConstants())
    own = simulate(plan, SHAPE, H200, SimConstants(kernel_ctas_per_sm=3))
    assert counted.num_slots == 264 and own.num_slots == 396
    per_task_at_cap_us = task_bytes(plan, SHAPE)[0] / DEFAULT_CONSTANTS.cta_rate_cap_bytes_per_s * 1e6
    assert counted.time_us - own.time_us > 0.9 * per_task_at_cap_us
    # The one-CTA-per-SM variant fills an SM: such plans keep one slot per SM.
    one = build_plan(np.full(34, 8_192), 8_192, num_kv_heads=8, page_size=16, ctas_per_sm=1)
    c = SimConstants(kernel_ctas_per_sm=3, single_cta_variant=True)
    assert simulate(one, SHAPE, H200, c).num_slots == 132
    assert simulate(one, SHAPE, H200, SimConstants(kernel_ctas_per_sm=3)).num_slots == 396


def test_merge_costs_and_earliest_start():
    kv = np.full(16, 4_096)
    plan = build_plan(kv, 1_024, num_kv_heads=8, page_size=16, ctas_per_sm=2)  # 4 splits each
    base = simulate(plan, SHAPE, H200, SimConstants())
    rows = SimConstants(merge_row_us=0.5, merge_per_split_us=0.25)
    with_rows = simulate(plan, SHAPE, H200, rows)
    merged_rows_per_sm = 16 * SHAPE.num_qo_heads / H200.sm_count
    assert with_rows.merge_us - base.merge_us == pytest.approx(
        0.5 * merged_rows_per_sm + 0.25 * 4, rel=1e-12)
    # The host issues the merge no earlier than merge_issue_us after the first launch started.
    late = simulate(plan, SHAPE, H200, SimConstants(merge_issue_us=base.stage1_us + 10.0))
    assert late.time_us == pytest.approx(base.time_us + 10.0, rel=1e-12)
    early = simulate(plan, SHAPE, H200, SimConstants(merge_issue_us=1.0))
    assert early.time_us == pytest.approx(base.time_us, rel=1e-12)
    # No merge, no merge costs.
    whole = build_plan(kv, 1 << 20, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    assert simulate(whole, SHAPE, H200, SimConstants(merge_issue_us=500.0)).time_us < 500.0


@pytest.mark.parametrize("bad", [{"kernel_ctas_per_sm": 33}, {"kernel_ctas_per_sm": 1.5},
                                 {"saturation_sharpness": 0.1}, {"merge_row_us": -1.0},
                                 {"merge_issue_us": float("nan")}, {"single_cta_variant": 1},
                                 {"one_program_per_task": "yes"}])
def test_new_constants_are_checked(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SimConstants(**bad)


def test_calibration_without_the_new_constants_keeps_the_old_model():
    # A file written before these constants existed (h200-flashinfer-cuda-core) loads with
    # defaults that reproduce the old model: the plan's occupancy, a hard roofline, no merge
    # extras.
    c = SimConstants.from_dict({"hbm_efficiency": 0.9, "cta_rate_cap_bytes_per_s": 30e9})
    assert (c.kernel_ctas_per_sm, c.single_cta_variant, c.saturation_sharpness) == (0, False, float("inf"))
    assert c.one_program_per_task is False  # extra programs of the plan's notes are modelled
    assert c.merge_issue_us == c.merge_row_us == c.merge_per_split_us == 0.0
    assert SimConstants.from_dict(c.to_dict()) == c


def test_partial_last_block_costs_a_whole_step_without_hbm_traffic():
    # One task per KV head of 100 tokens: with 64-token steps the second step holds 28 masked
    # tokens, which cost their time at the per-CTA cap on the slot but move no bytes.
    plan = build_plan(np.array([100]), 1 << 20, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    bare = SimConstants(kernel_ctas_per_sm=2, single_cta_variant=True)
    blocked = SimConstants(kernel_ctas_per_sm=2, single_cta_variant=True, block_tokens=64,
                           single_cta_block_tokens=128)
    assert kernel_block_tokens(plan, blocked) == 64 and kernel_block_tokens(plan, bare) == 0
    cap = cta_rate_cap_bytes_per_s(plan, SHAPE, H200, blocked) * 1e-6
    extra = partial_block_us(plan, SHAPE, cap, blocked)
    assert partial_block_us(plan, SHAPE, cap, bare) is None
    assert extra == pytest.approx(np.full(8, 28 * SHAPE.kv_bytes_per_token_per_head / cap))
    a, b = simulate(plan, SHAPE, H200, bare), simulate(plan, SHAPE, H200, blocked)
    assert b.time_us - a.time_us == pytest.approx(extra[0], rel=1e-9)  # 8 tasks side by side
    assert b.hbm_bytes == a.hbm_bytes
    # The one-CTA-per-SM variant steps 128 tokens: 100 tokens leave 28 masked there too, 128 none.
    one = build_plan(np.array([100, 128]), 1 << 20, num_kv_heads=8, page_size=16, ctas_per_sm=1)
    assert kernel_block_tokens(one, blocked) == 128
    masked = partial_block_us(one, SHAPE, 1.0, blocked) / SHAPE.kv_bytes_per_token_per_head
    assert masked[:2].tolist() == [28.0, 0.0]
    # A whole number of steps costs nothing extra.
    whole = build_plan(np.array([128]), 1 << 20, num_kv_heads=8, page_size=16, ctas_per_sm=2)
    assert simulate(whole, SHAPE, H200, blocked).time_us == simulate(whole, SHAPE, H200, bare).time_us


@pytest.mark.parametrize("bad", [{"block_tokens": -1}, {"block_tokens": 5000},
                                 {"single_cta_block_tokens": 64.0}, {"block_tokens": True}])
def test_block_tokens_are_checked(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SimConstants(**bad)


def test_longest_first_launch_order_runs_every_task_once_and_ends_a_skewed_plan_sooner():
    """simulate(launch_order="longest-first"): the same tasks (request, split, KV head) as the
    plan's order, dispatched with every KV head of the longest item first; on a skewed plan whose
    long pieces of the last heads enter late in plan order it ends sooner, on equal items it
    is the same launch; persistent plans refuse it."""
    kv = skew80(64)
    plan = build_plan(kv, 7952, num_kv_heads=SHAPE.num_kv_heads, page_size=SHAPE.page_size)
    plain = simulate(plan, SHAPE, H200)
    longest = simulate(plan, SHAPE, H200, launch_order="longest-first")
    key = lambda r: sorted(zip(r.request.tolist(), r.split.tolist(), r.kv_head.tolist()))
    assert key(plain) == key(longest) and len(key(plain)) == plan.num_tasks
    assert longest.bytes.sum() == plain.bytes.sum()
    first = longest.bytes[: SHAPE.num_kv_heads]
    assert (first == longest.bytes.max()).all() and (np.diff(longest.bytes) <= 1e-9).all()
    assert longest.stage1_us < 0.95 * plain.stage1_us
    uniform = build_plan(np.full(64, 4096), 1024, num_kv_heads=SHAPE.num_kv_heads,
                         page_size=SHAPE.page_size)
    assert simulate(uniform, SHAPE, H200, launch_order="longest-first").time_us == \
        pytest.approx(simulate(uniform, SHAPE, H200).time_us)
    persistent = build_plan(kv, 7952, num_kv_heads=SHAPE.num_kv_heads,
                            page_size=SHAPE.page_size, schedule="persistent-heavy-first",
                            grid_size=264)
    with pytest.raises(ValueError, match="launch_order: 'longest-first' needs a static"):
        simulate(persistent, SHAPE, H200, launch_order="longest-first")
    with pytest.raises(ValueError, match="launch_order: 'lpt' not allowed"):
        simulate(plan, SHAPE, H200, launch_order="lpt")

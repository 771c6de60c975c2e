"""The side split of a skewed launch (decode_config.side_launch_split, DecodeLaunch.side): where
the one-program-per-SM entry would leave short tasks queued on the SMs the long ones leave, the
long tasks run as one launch of the entry and the short ones as a second launch of its shallow
twin beside it. The rule fires on the case it was measured on and nowhere else in the shape
matrix; in Triton's interpreter the two launches compute the one launch's bits."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kvtune.kernels import decode as decode_mod
from kvtune.kernels.decode import prepare_decode, run_decode
from kvtune.kernels.decode_config import (ONE_TASK_SLACK, SHALLOW_TWIN, KernelConfig,
                                          default_config, element_bytes, side_launch_split)
from kvtune.kernels.plan import AttentionShape, build_plan, launch_item_order
from kvtune.kernels.reference import decode_reference, relative_error
from tests.kernels.kernel_cases import BOUNDS, make_inputs

ENTRY = KernelConfig.from_label("bn128-w8-s3-pa")  # one KV head, 16-bit: one program per SM
TWIN = KernelConfig.from_label("bn128-w8-s2-pa")


def _split(keys, sms, heads=1, config=ENTRY, head_dim=128, elem=2):
    return side_launch_split(config, head_dim, elem, sms, np.asarray(keys), heads)


def test_the_split_takes_the_twin_and_the_long_items_where_short_tasks_would_queue():
    assert SHALLOW_TWIN[(128, 2, ENTRY)] == TWIN
    # 4 long tasks on 6 SMs; 5 short ones of 50 keys queue three deep on the 2 SMs left
    # (150 > 1.1 x 128), but fit there in volume (250 <= 1.1 x 128 x 2).
    assert _split([128] * 4 + [50] * 5, 6) == (TWIN, 4)


@pytest.mark.parametrize("keys, sms, heads, why", [
    ([128] * 6 + [50] * 5, 6, 1, "the long tasks take every SM"),
    ([128] * 4 + [40] * 4, 6, 1, "one launch finishes on time: two rounds of 40 on 2 SMs"),
    ([128] * 4 + [40] * 2, 6, 1, "no more tasks than SMs: one launch runs each alone"),
    ([128] * 4 + [60] * 8, 6, 1, "the short tasks' keys overflow the SMs left"),
    ([128] * 8, 12, 1, "no short task"),
    ([128] * 2 + [50] * 5, 6, 2, "the long tasks (x 2 KV heads) take 4 SMs: 4 x 2 x 50 too much"),
    ([0, 0], 6, 1, "no keys"),
])
def test_no_split(keys, sms, heads, why):
    assert _split(keys, sms, heads) is None, why


def test_no_split_for_an_entry_of_several_programs_per_sm_or_without_a_twin():
    keys = [128] * 4 + [50] * 5
    assert _split(keys, 6, config=TWIN) is None  # two per SM
    assert _split(keys, 6, config=KernelConfig.from_label("bn64-w4-s4-pa")) is None
    assert _split(keys, 6, config=KernelConfig.from_label("bn128-w8-s1-pa")) is None


def test_on_the_h200_matrix_the_split_fires_only_on_the_case_it_was_measured_on():
    # docs/PERFORMANCE.md, thirty-third session, call 5: llama3-70b-tp8 skew80 B=64 fixed-2048
    # (166 tasks) ran 49.3 us as two launches against 55.8 as one (FlashInfer 51.0). Not on
    # skew80 B=256 fixed-2048, where one launch finishes on time (call 8: the split 51.6 us
    # against 51.7).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_kernels
    from kvtune.harness.device import DEVICE_MODELS

    device = DEVICE_MODELS["h200"]
    fired = []
    for variant in bench_kernels.full_variants():
        shape = bench_kernels.variant_shape(variant)
        dtype = torch.float8_e4m3fn if shape.kv_dtype == "fp8_e4m3" else torch.bfloat16
        for dist in ("uniform", "skew80"):
            for batch in (8, 64, 256):
                for chunk in ("2048", "balanced"):
                    kv = bench_kernels.matrix_kv_lens(dist, batch, bench_kernels.TOTAL_TOKENS)
                    plan, _ = bench_kernels.fixed_split_plan(kv, shape, device, chunk)
                    entry = default_config(shape.head_dim, dtype, shape.page_size,
                                           plan.ctas_per_sm, num_kv_heads=shape.num_kv_heads,
                                           group_size=shape.group_size)
                    keys = (plan.work_kv_end - plan.work_kv_start)[
                        launch_item_order(plan, "longest-first")]
                    split = side_launch_split(entry, shape.head_dim, element_bytes(dtype),
                                              device.sm_count, keys, plan.num_kv_heads)
                    if split is not None:
                        assert split == (TWIN, 102)
                        fired.append((variant[0], variant[2], dist, batch, chunk))
    assert fired and set(fired) == {("llama3-70b-tp8", kv, "skew80", 64, "2048")
                                    for kv in ("bf16", "fp16")}, fired


@pytest.fixture
def cpu_sms(monkeypatch):
    monkeypatch.setattr(decode_mod, "SIDE_CPU_SM_COUNT", 6)


def test_two_launches_compute_the_one_launchs_bits(cpu_sms):
    shape = AttentionShape(num_qo_heads=2, num_kv_heads=1, head_dim=128, page_size=16)
    kv = [512, 50, 50, 50, 50, 50]
    cache, q = make_inputs(kv, shape, torch.bfloat16)
    plan = build_plan(kv, 128, num_kv_heads=1, page_size=16)
    keys = plan.work_kv_end - plan.work_kv_start
    assert _split(np.sort(keys)[::-1], 6) == (TWIN, 4)

    launch = prepare_decode(plan, cache)
    assert launch.side is not None and launch.config == ENTRY
    assert launch.side.config == TWIN and launch.side.stream is None  # the CPU: one by one
    assert launch.grid == (4,) and launch.side.grid == (5,)
    assert launch.num_launches == 3  # two stage-1 launches and the merge
    assert not launch.merge_pdl
    out = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=out)

    one = prepare_decode(plan, cache, side_launch=False)
    assert one.side is None
    ref_out = torch.full_like(q, float("nan"))
    run_decode(one, q, cache, out=ref_out)
    assert not torch.isnan(out).any()
    assert torch.equal(out, ref_out)
    assert relative_error(out, decode_reference(q, cache)) <= BOUNDS[torch.bfloat16]
    assert ONE_TASK_SLACK > 1


def test_no_split_with_a_given_configuration_or_the_tail_merge(cpu_sms):
    shape = AttentionShape(num_qo_heads=2, num_kv_heads=1, head_dim=64, page_size=16)
    kv = [512, 50, 50, 50, 50, 50]
    cache, q = make_inputs(kv, shape, torch.float32)
    plan = build_plan(kv, 128, num_kv_heads=1, page_size=16)
    assert prepare_decode(plan, cache, config=KernelConfig(32, 4, 2)).side is None
    assert prepare_decode(plan, cache, merge="tail").side is None
    launch = prepare_decode(plan, cache)
    if launch.side is not None:
        with pytest.raises(ValueError, match="launch_pdl: not with a side split"):
            run_decode(launch, q, cache, launch_pdl=True)


@pytest.mark.parametrize("batch, skew, total, chunk, fires", [
    # H200, thirty-third session, calls 7-8 (docs/PERFORMANCE.md): the split ran 1.16x faster
    # on the first, as fast on the second; on the last three it ran 1.03-1.11x slower than one
    # launch, which finishes on time there.
    (64, 80, 524_288, 4096, True), (64, 80, 131_072, 1024, True),
    (192, 80, 262_144, 2048, False), (64, 50, 262_144, 2048, False),
    (32, 90, 262_144, 2048, False),
])
def test_the_split_on_the_held_out_batches(batch, skew, total, chunk, fires):
    from kvtune.workloads.distributions import fixed_total_kv_lens

    kv = fixed_total_kv_lens(batch, total, (skew,))
    plan = build_plan(kv, chunk, num_kv_heads=1, page_size=16)
    keys = (plan.work_kv_end - plan.work_kv_start)[launch_item_order(plan, "longest-first")]
    assert (_split(keys, 132) is not None) == fires

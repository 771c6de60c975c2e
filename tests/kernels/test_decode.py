"""kernels/decode.py in Triton's interpreter against the float64 reference (no GPU).

Every case draws fresh random inputs, poisons the output with NaN before the run and checks that
every element was written, and bounds ||out - ref|| / ||ref|| by 2e-2 (bf16/fp16) or 1e-5
(float32). Shapes are tiny: the interpreter runs each program in numpy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from kvtune.kernels import policies
from kvtune.kernels.decode import (
    KernelConfig,
    decode,
    default_config,
    launch_config,
    prepare_decode,
    run_decode,
)
from kvtune.kernels.plan import SCHEDULES, AttentionShape, DeviceSpec, build_plan
from kvtune.kernels.reference import decode_reference, relative_error
from tests.kernels.kernel_cases import (check_against_reference, make_inputs,
                                        small_inside_large)

SMALL = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4)
TINY_GPU = DeviceSpec("tiny", sm_count=4, l2_bytes=1 << 20, hbm_bytes_per_s=1e12,
                      max_ctas_per_sm=2)


@pytest.mark.parametrize("name", policies.names())
def test_every_policy_plan_matches_reference(name):
    # One KV head and a long first request make most policies split on a 4-SM device.
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=1, head_dim=64, page_size=16)
    kv = [1500, 5, 200]
    plan = policies.get(name).plan(np.array(kv), shape, TINY_GPU)
    cache, q = make_inputs(kv, shape, torch.bfloat16)
    check_against_reference(q, cache, plan)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_schedule(schedule, dtype):
    kv = [1, 13, 33, 6]
    plan = build_plan(kv, 8, num_kv_heads=2, page_size=4, schedule=schedule, grid_size=3)
    assert plan.num_split_requests >= 2
    cache, q = make_inputs(kv, SMALL, dtype)
    check_against_reference(q, cache, plan)


def test_lengths_at_page_edges():
    # kv_len 1, page_size - 1, page_size, page_size + 1, split on every second page.
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=8)
    kv = [1, 7, 8, 9]
    cache, q = make_inputs(kv, shape, torch.float32)
    check_against_reference(q, cache, build_plan(kv, 16, num_kv_heads=2, page_size=8))
    check_against_reference(q, cache, build_plan(kv, 8, num_kv_heads=2, page_size=8))


def test_one_request_split_and_unsplit():
    kv = [29]
    cache, q = make_inputs(kv, SMALL, torch.float32)
    for chunk in (4, 12, 29):
        check_against_reference(q, cache, build_plan(kv, chunk, num_kv_heads=2, page_size=4))


def test_requests_all_different():
    kv = [3, 11, 27, 40, 64, 2]
    cache, q = make_inputs(kv, SMALL, torch.bfloat16)
    check_against_reference(q, cache, build_plan(kv, 16, num_kv_heads=2, page_size=4,
                                                 schedule="static-heavy-first"))


def test_request_split_into_maximum_pieces():
    # page_size 1 and a chunk of one token: 40 splits, more than one merge block (32 rows).
    shape = AttentionShape(num_qo_heads=2, num_kv_heads=1, head_dim=64, page_size=1)
    kv = [40, 3]
    plan = build_plan(kv, 1, num_kv_heads=1, page_size=1)
    assert plan.splits.tolist() == [40, 3]
    cache, q = make_inputs(kv, shape, torch.float32)
    check_against_reference(q, cache, plan)


@pytest.mark.parametrize("num_qo_heads", [2, 16])  # G = 1 and G = 8
def test_group_sizes(num_qo_heads):
    shape = AttentionShape(num_qo_heads=num_qo_heads, num_kv_heads=2, head_dim=64, page_size=4)
    kv = [5, 22]
    cache, q = make_inputs(kv, shape, torch.bfloat16)
    check_against_reference(q, cache, build_plan(kv, 8, num_kv_heads=2, page_size=4))


@pytest.mark.parametrize("head_dim,dtype", [(128, torch.float16), (256, torch.bfloat16),
                                            (256, torch.float32)])
def test_head_dims(head_dim, dtype):
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=1, head_dim=head_dim, page_size=8)
    kv = [19, 4]
    cache, q = make_inputs(kv, shape, dtype)
    check_against_reference(q, cache, build_plan(kv, 8, num_kv_heads=1, page_size=8))


@pytest.mark.parametrize("schedule", ["static", "persistent-heavy-first"])
def test_register_prefetch_variant(schedule):
    kv = [1, 30, 9]
    cache, q = make_inputs(kv, SMALL, torch.bfloat16)
    plan = build_plan(kv, 12, num_kv_heads=2, page_size=4, schedule=schedule, grid_size=2)
    check_against_reference(q, cache, plan, KernelConfig(16, 4, 1, prefetch=True))


@pytest.mark.parametrize("schedule", ["static", "persistent-round-robin"])
def test_page_ahead_variant(schedule):
    # Page ids loaded one block ahead; blocks of 16 tokens over pages of 4 and a split at 12.
    kv = [1, 30, 9]
    cache, q = make_inputs(kv, SMALL, torch.bfloat16)
    plan = build_plan(kv, 12, num_kv_heads=2, page_size=4, schedule=schedule, grid_size=2)
    check_against_reference(q, cache, plan, KernelConfig(16, 4, 3, page_ahead=True))


@pytest.mark.parametrize("schedule,kv_dtype", [("static", "bf16"),
                                              ("persistent-heavy-first", "fp8_e4m3")])
def test_warp_split_variant(schedule, kv_dtype):
    # Two slices of 16 tokens per 32-token step over pages of 4; requests shorter than a slice
    # (1 token) and tail steps where the second slice holds no valid token (its running max
    # stays -inf until the merge) must not produce NaN.
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4,
                           kv_dtype=kv_dtype)
    kv = [1, 45, 9, 70]
    cache, q = make_inputs(kv, shape, torch.bfloat16)
    plan = build_plan(kv, 40, num_kv_heads=2, page_size=4, schedule=schedule, grid_size=3)
    check_against_reference(q, cache, plan,
                            KernelConfig(32, 2, 2, page_ahead=True, warp_split=2))


def test_config_labels_round_trip_and_bad_ones_name_the_field():
    for label in ("bn128-w4-s2", "bn64-w4-s4-pa", "bn128-w4-s3-pa-vw", "bn64-w4-s3-pa-ws4",
                  "bn128-w4-s3-pa-r168", "bn128-w8-s1-pf"):
        assert KernelConfig.from_label(label).label() == label
    with pytest.raises(ValueError, match="config"):
        KernelConfig.from_label("bn128-w4")
    with pytest.raises(ValueError, match="warp_split"):
        KernelConfig(32, 4, 2, page_ahead=True, warp_split=4)  # 8 tokens per slice
    with pytest.raises(ValueError, match="warp_split"):
        KernelConfig(64, 4, 2, prefetch=True, warp_split=2)
    with pytest.raises(ValueError, match="max_registers"):
        KernelConfig(64, 4, 2, max_registers=300)


def test_heavy_first_counter_is_reset_for_the_next_launch():
    kv = [17, 5, 9]
    cache, q = make_inputs(kv, SMALL, torch.float32)
    plan = build_plan(kv, 8, num_kv_heads=2, page_size=4, schedule="persistent-heavy-first",
                      grid_size=2)
    first, launch = check_against_reference(q, cache, plan)
    assert launch.counter.tolist() == [0, 0]
    second = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=second)
    assert torch.equal(first, second)


def test_fixed_split_is_batch_invariant():
    """A request's bits do not depend on the rest of the batch under `fixed-split`."""
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4)
    policy = policies.get("fixed-split", chunk_tokens=8)
    kv_small = [21, 3, 12]
    kv_large = kv_small + [30, 1, 17, 8]
    cache_s, q_s, cache_l, q_l = small_inside_large(kv_small, kv_large, shape, torch.bfloat16)
    out_s = decode(q_s, cache_s, policy.plan(np.array(kv_small), shape, TINY_GPU))
    out_l = decode(q_l, cache_l, policy.plan(np.array(kv_large), shape, TINY_GPU))
    assert torch.equal(out_s, out_l[: len(kv_small)])


def test_sm_scale_is_used():
    kv = [9, 14]
    cache, q = make_inputs(kv, SMALL, torch.float32)
    plan = build_plan(kv, 8, num_kv_heads=2, page_size=4)
    from kvtune.kernels.reference import decode_reference, relative_error

    out = decode(q, cache, plan, sm_scale=0.3)
    assert relative_error(out, decode_reference(q, cache, sm_scale=0.3)) <= 1e-5
    assert relative_error(out, decode_reference(q, cache)) > 1e-3


def test_rejects_plan_of_another_batch():
    cache, _ = make_inputs([5, 9], SMALL, torch.float32)
    with pytest.raises(ValueError, match="kv_lens"):
        prepare_decode(build_plan([5, 10], 8, num_kv_heads=2, page_size=4), cache)
    with pytest.raises(ValueError, match="num_kv_heads"):
        prepare_decode(build_plan([5, 9], 8, num_kv_heads=1, page_size=4), cache)
    with pytest.raises(ValueError, match="page_size"):
        prepare_decode(build_plan([5, 9], 8, num_kv_heads=2, page_size=8), cache)


def test_rejects_bad_queries():
    cache, q = make_inputs([5, 9], SMALL, torch.float32)
    plan = build_plan([5, 9], 8, num_kv_heads=2, page_size=4)
    with pytest.raises(ValueError, match="q: shape"):
        decode(q[:1], cache, plan)
    with pytest.raises(ValueError, match="q.dtype"):
        decode(q.to(torch.bfloat16), cache, plan)
    with pytest.raises(ValueError, match="out"):
        run_decode(prepare_decode(plan, cache), q, cache, out=torch.empty_like(q[:, :1]))


def test_merge_launched_only_for_split_requests(monkeypatch):
    import kvtune.kernels.decode as decode_module

    calls = []
    real = decode_module.launch_chunked_merge
    monkeypatch.setattr(
        decode_module, "launch_chunked_merge",
        lambda *args, **kw: calls.append(args[2].dest.tolist()) or real(*args, **kw))
    kv = [9, 30, 4]
    cache, q = make_inputs(kv, SMALL, torch.float32)
    unsplit = build_plan(kv, 64, num_kv_heads=2, page_size=4)
    _, launch = check_against_reference(q, cache, unsplit)
    assert launch.num_launches == 1 and calls == []
    split = build_plan(kv, 12, num_kv_heads=2, page_size=4)
    _, launch = check_against_reference(q, cache, split)
    # Only request 1 (30 tokens, 3 splits) is split: one job, into its output row.
    assert launch.num_launches == 2 and calls == [[1]]
    # The same with kernels/merge.py.
    blocks = []
    real_blocks = decode_module.launch_merge
    monkeypatch.setattr(decode_module, "launch_merge",
                        lambda *args: blocks.append(args[2].tolist()) or real_blocks(*args))
    launch = decode_module.prepare_decode(split, cache, merge="blocks")
    out = decode_module.run_decode(launch, q, cache)
    assert launch.num_launches == 2 and blocks == [[1]] and calls == [[1]]
    assert relative_error(out, decode_reference(q, cache)) <= 1e-5


def test_config_table_is_complete_and_keyed_by_shape_and_occupancy_only():
    from kvtune.kernels.decode_config import (CANDIDATES, CONFIG_TABLE, HEAD_DIMS, REGIMES,
                                              SMALL_PAGE_TABLE,
                                              config_key)

    for d in HEAD_DIMS:
        for elem in (1, 2, 4):
            for regime in REGIMES:
                assert (d, elem, regime) in CONFIG_TABLE
            if elem < 4:  # every table entry of the real types is among the swept candidates
                assert {CONFIG_TABLE[(d, elem, r)] for r in REGIMES} <= set(CANDIDATES[(d, elem)])
    # One KV head (llama3-70b-tp8) or a one-program-per-SM plan: a page-ahead (multi-buffered)
    # variant, whatever the batch; several KV heads and programs per SM: the measured default.
    assert default_config(128, torch.bfloat16, 16, 8, num_kv_heads=1).page_ahead
    assert default_config(128, torch.bfloat16, 16, 1, num_kv_heads=8).page_ahead
    assert default_config(128, torch.bfloat16, 16, 8, num_kv_heads=4) == KernelConfig(64, 4, 4, page_ahead=True)
    assert default_config(128, torch.float8_e4m3fn, 16) == CONFIG_TABLE[(128, 1, "many")]
    assert config_key(256, 1, 1, 2) == (256, 1, "one-per-sm")
    # More than 4 query heads per KV head with several KV heads: their own entry (page-ahead at
    # head_dim 128, measured on G = 16); G <= 4 keeps the "many" entry; one KV head or one
    # program per SM wins over the group size.
    assert config_key(128, 2, 4, None, group_size=16) == (128, 2, "many-large-group")
    assert config_key(128, 2, 4, None, group_size=7) == (128, 2, "many-large-group")
    assert config_key(128, 2, 8, None, group_size=4) == (128, 2, "many")
    assert config_key(128, 2, 1, None, group_size=8) == (128, 2, "one-per-sm")
    assert config_key(128, 2, 4, 1, group_size=16) == (128, 2, "one-per-sm")
    assert default_config(128, torch.bfloat16, 16, 4, num_kv_heads=4, group_size=16).page_ahead
    # Token-granular pages (SGLang's page size 1): the 16-bit head_dim-128 entries of several
    # programs per SM drop the page-ahead gather (measured slower there); one-per-sm keeps it.
    assert default_config(128, torch.bfloat16, 1, 2, num_kv_heads=8) == KernelConfig(128, 4, 3)
    # G > 4 and head_dim 256 too (H200, thirtieth session: g16 and head_dim 256 at page 1).
    assert default_config(128, torch.bfloat16, 8, 2, num_kv_heads=4, group_size=8) == KernelConfig(128, 4, 3)
    assert default_config(256, torch.bfloat16, 1, 2, num_kv_heads=8, group_size=2) == KernelConfig(64, 4, 3)
    assert default_config(256, torch.bfloat16, 16, 2, num_kv_heads=8, group_size=2) == KernelConfig(64, 4, 2)
    assert default_config(128, torch.bfloat16, 1, 8, num_kv_heads=1).page_ahead
    assert default_config(128, torch.bfloat16, 16, 2) != default_config(128, torch.bfloat16, 1, 2)
    assert all(c in CANDIDATES[(k[0], k[1])] for k, c in SMALL_PAGE_TABLE.items())
    with pytest.raises(ValueError, match="kv element size"):
        config_key(128, 8, 1, 1)
    with pytest.raises(ValueError, match="group_size"):
        config_key(128, 2, 4, None, group_size=0)


def test_wave_fill_counts_the_last_wave_and_names_bad_input():
    from kvtune.kernels.decode_config import wave_fill

    assert wave_fill(264, 132, 2) == 1.0
    assert wave_fill(265, 132, 2) == pytest.approx((265 / 264) / 2)
    assert wave_fill(320, 132, 3) == pytest.approx(320 / 396)
    assert wave_fill(1, 132, 1) == pytest.approx(1 / 132)
    for kw, field in (({"programs": 0}, "programs"), ({"sm_count": 2.5}, "sm_count"),
                      ({"per_sm": -1}, "per_sm")):
        args = {"programs": 10, "sm_count": 4, "per_sm": 2, **kw}
        with pytest.raises(ValueError, match=field):
            wave_fill(**args)


def test_tasks_of_one_length_counts_the_items_near_the_longest():
    from kvtune.kernels.decode_config import tasks_of_one_length

    assert tasks_of_one_length([2048] * 103 + [1000] * 7)  # a fixed split, ragged tails
    assert not tasks_of_one_length([7952] * 27 + [205] * 255)  # skew80: a long request's chunks
    assert not tasks_of_one_length([7952, 7952, 7952, 7952, 960])  # 4 of 5 at full length
    assert tasks_of_one_length([])
    assert tasks_of_one_length([0, 0])
    with pytest.raises(ValueError, match="item_keys"):
        tasks_of_one_length([10, -1])


def test_plans_of_long_uniform_requests_have_tasks_of_one_length_and_skewed_ones_not():
    from kvtune.kernels.decode_config import tasks_of_one_length
    from kvtune.workloads.distributions import fixed_total_kv_lens

    shape = AttentionShape(num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                           dtype="bf16")
    device = DeviceSpec("h200-like", sm_count=132, l2_bytes=60 * 2**20, hbm_bytes_per_s=4.8e12)
    policy = policies.get("fixed-split", chunk_tokens=2048)

    def items(kv):
        plan = policy.plan(np.asarray(kv), shape, device)
        return plan.work_kv_end - plan.work_kv_start

    # Uniform 4096-token requests: every chunk 2048. One request of 80% of the tokens beside
    # short ones (skew80 at B = 64): the short requests' single items dominate the count.
    assert tasks_of_one_length(items(fixed_total_kv_lens(64, 262_144, ())))
    assert not tasks_of_one_length(items(fixed_total_kv_lens(64, 262_144, (80,))))


def test_launch_config_takes_the_twin_for_one_program_per_task_on_a_known_device():
    from kvtune.kernels.decode import launch_config
    from kvtune.kernels.decode_config import CONFIG_TABLE, SHALLOW_TWIN
    from kvtune.workloads.distributions import fixed_total_kv_lens

    shape = AttentionShape(num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                           dtype="bf16")
    device = DeviceSpec("h200-like", sm_count=132, l2_bytes=60 * 2**20, hbm_bytes_per_s=4.8e12)
    kv = fixed_total_kv_lens(64, 262_144, (80,))
    entry = CONFIG_TABLE[(128, 2, "many")]
    static = policies.get("fixed-split", chunk_tokens=2048).plan(kv, shape, device)
    persistent = policies.get("fixed-split", chunk_tokens=2048,
                              schedule="persistent-round-robin").plan(kv, shape, device)
    twin = SHALLOW_TWIN[(128, 2, entry)]
    # In the plan's order the skewed plan's tasks of many lengths take the twin; longest first
    # (the product's order) 824 long tasks outnumber both configurations' slots, so neither
    # finishes in about one long task and the deeper entry streams faster (H200, twenty-ninth
    # session: 6-8% on such plans).
    assert launch_config(static, shape, torch.bfloat16, 132, "plan") == twin
    assert launch_config(static, shape, torch.bfloat16, 132) == entry
    # Longest first, the twin where its extra slots save a late round: skew80 B=8 cut into
    # about two programs per SM (272 tasks on 264 entry slots; measured 12% faster).
    few = fixed_total_kv_lens(8, 262_144, (80,))
    chunk = int(np.ceil(few.sum() * 8 / (132 * 2) / 16)) * 16
    balanced = policies.get("fixed-split", chunk_tokens=chunk).plan(few, shape, device)
    assert balanced.num_tasks == 272
    assert launch_config(balanced, shape, torch.bfloat16, 132) == twin
    # No SM count (the CPU) or a persistent grid (programs are not tasks): the table's entry.
    assert launch_config(static, shape, torch.bfloat16, None) == entry
    assert launch_config(persistent, shape, torch.bfloat16, 132) == entry


def test_fits_one_task_hands_tasks_in_grid_order_to_the_first_free_sm():
    from kvtune.kernels.decode_config import ONE_TASK_SLACK, fits_one_task

    # At most one task per SM, or nothing to do.
    assert fits_one_task([2048] * 132, 1, 132) and fits_one_task([], 1, 132)
    assert fits_one_task([0] * 500, 1, 132)
    # llama3-70b-tp8 skew80 fixed-2048 (H100 sixteenth session): 103 chunks and 255 requests of
    # 205 tokens cycle on the 29 SMs left over within one chunk's time; 63 requests of 832 do
    # not (the last five start after 832 x 2 tokens): 1.22 x the chunk.
    assert fits_one_task([2048] * 103 + [205] * 255, 1, 132)
    assert not fits_one_task([2048] * 103 + [832] * 63, 1, 132)
    # The order counts: short tasks first delay the long ones past the slack.
    assert not fits_one_task([205] * 255 + [2048] * 103, 1, 132)
    # Every KV head repeats the items (items fastest): 2 heads x 70 chunks do not fit 132 SMs.
    assert fits_one_task([2048] * 66, 2, 132) and not fits_one_task([2048] * 70, 2, 132)
    # Exactly at the slack: a task that ends at ONE_TASK_SLACK x the longest still fits.
    assert fits_one_task([100, 100, ONE_TASK_SLACK * 100 - 100], 1, 2)
    for kw, field in (({"num_kv_heads": 0}, "num_kv_heads"), ({"sm_count": 1.5}, "sm_count"),
                      ({"item_keys": [5, -1]}, "item_keys"),
                      ({"item_keys": [float("nan")]}, "item_keys")):
        args = {"item_keys": [1, 2, 3], "num_kv_heads": 1, "sm_count": 2, **kw}
        with pytest.raises(ValueError, match=field):
            fits_one_task(**args)


def test_launch_config_keeps_the_deep_entry_where_long_tasks_each_get_an_sm():
    from kvtune.kernels.decode import launch_config
    from kvtune.kernels.decode_config import CONFIG_TABLE, SHALLOW_TWIN
    from kvtune.workloads.distributions import fixed_total_kv_lens

    shape = AttentionShape(num_qo_heads=8, num_kv_heads=1, head_dim=128, page_size=16,
                           dtype="bf16")
    device = DeviceSpec("h100-like", sm_count=132, l2_bytes=50 * 2**20, hbm_bytes_per_s=3.35e12)
    policy = policies.get("fixed-split", chunk_tokens=2048)
    deep = CONFIG_TABLE[(128, 2, "one-per-sm")]
    twin = SHALLOW_TWIN[(128, 2, deep)]

    def config(batch, skew):
        kv = fixed_total_kv_lens(batch, 262_144, skew)
        return launch_config(policy.plan(kv, shape, device), shape, torch.bfloat16, 132)

    assert config(256, (80,)) == deep  # 358 tasks, the long request's 103 chunks first
    assert config(64, (80,)) == twin  # 166 tasks, the short ones 40% of a chunk
    assert config(8, ()) == deep  # 128 tasks: one per SM
    assert config(256, ()) == twin  # 256 equal tasks of 1024 tokens: two per SM fill as well


def test_shallow_twin_unless_equal_tasks_fill_the_deep_waves_better():
    from kvtune.kernels.decode_config import (CANDIDATES, CONFIG_TABLE, RESIDENT_PER_SM,
                                              SHALLOW_TWIN, SMALL_PAGE_TABLE, occupancy_twin)

    for (d, elem, deep), twin in SHALLOW_TWIN.items():
        # The same block, warps and loop: only the stages differ (and, for a twin that needs it
        # to fit one program more per SM, a register cap), so the bits are the same (checked
        # bitwise on the GPU by benchmarks/profile_decode.py --configs).
        assert dataclasses.replace(twin, max_registers=deep.max_registers) == \
            dataclasses.replace(deep, num_stages=deep.num_stages - 1)
        assert RESIDENT_PER_SM[(d, elem, twin)] > RESIDENT_PER_SM[(d, elem, deep)]
        assert (deep in CONFIG_TABLE.values() or deep in SMALL_PAGE_TABLE.values()) \
            and twin in CANDIDATES[(d, elem)]
    many = CONFIG_TABLE[(128, 2, "many")]
    one = CONFIG_TABLE[(128, 2, "one-per-sm")]
    twin, twin_one = SHALLOW_TWIN[(128, 2, many)], SHALLOW_TWIN[(128, 2, one)]
    # 132 SMs, tasks of one length. 512 and 1024 programs fill whole waves of 2 per SM (0.97)
    # and leave a part-empty last wave at 3: the deep entry stays.
    assert occupancy_twin(many, 128, 2, 512, 132, True) == many
    assert occupancy_twin(many, 128, 2, 1024, 132, True) == many
    # 272-320 programs leave half a second wave at 2 per SM and fit one wave at 3: the twin.
    for programs in (272, 320):
        assert occupancy_twin(many, 128, 2, programs, 132, True) == twin
    # Tasks of many lengths backfill the waves: always the twin.
    for programs in (512, 1024, 2256):
        assert occupancy_twin(many, 128, 2, programs, 132, False) == twin
    # One program per SM (128 equal tasks on 132 SMs) keeps the deep one-per-sm entry; 264 fill
    # 2 per SM as well as 1 per SM: the twin.
    assert occupancy_twin(one, 128, 2, 128, 132, True) == one
    assert occupancy_twin(one, 128, 2, 264, 132, True) == twin_one
    # 265 equal tasks: a third wave of one program at 1 per SM (fill 0.67) against a second of
    # one at 2 per SM (0.50): the deep entry's own last wave is nearly empty, so the twin.
    assert occupancy_twin(one, 128, 2, 265, 132, True) == twin_one
    # At most one program per SM (tasks of any lengths): the twin's extra slot buys nothing and
    # the deep pipeline streams faster; one program more than the SMs gives way to the twin.
    for programs in (1, 96, 128, 132):
        assert occupancy_twin(one, 128, 2, programs, 132, False) == one
        assert occupancy_twin(many, 128, 2, programs, 132, False) == many
    assert occupancy_twin(one, 128, 2, 133, 132, False) == twin_one
    # ... unless one program per SM would still finish them in about one long task's time.
    assert occupancy_twin(one, 128, 2, 358, 132, False, one_task=True) == one
    assert occupancy_twin(many, 128, 2, 358, 132, False, one_task=True) == many
    # Entries without a shallow twin (without item keys: no capped twin either), and the CPU
    # (no SM count), keep the table's choice.
    fp8 = CONFIG_TABLE[(128, 1, "many")]
    assert occupancy_twin(fp8, 128, 1, 320, 132, False) == fp8
    assert default_config(128, torch.bfloat16, 16, None, num_kv_heads=8, group_size=4,
                          programs=320) == many
    assert default_config(128, torch.bfloat16, 16, None, num_kv_heads=8, group_size=4,
                          programs=320, sm_count=132) == twin


def test_config_table_never_depends_on_the_batch():
    # Keyed by head_dim and element size only: bf16 and fp16 share a compiled configuration.
    for d in (64, 128, 256):
        assert default_config(d, torch.bfloat16, 16) == default_config(d, torch.float16, 16)
        assert default_config(d, torch.float32, 1) == default_config(d, torch.float32, 128)
    with pytest.raises(ValueError, match="head_dim"):
        default_config(96, torch.bfloat16, 16)
    with pytest.raises(ValueError, match="block_n"):
        KernelConfig(48, 4, 2)


def test_capped_twins_compute_the_same_bits_with_a_program_more_per_sm():
    from kvtune.kernels.decode_config import (CANDIDATES, CAPPED_TWIN, CAPPED_TWIN_COST,
                                              CONFIG_TABLE, RESIDENT_PER_SM, SHALLOW_TWIN)

    assert set(CAPPED_TWIN_COST) == set(CAPPED_TWIN)
    for (d, elem, entry), capped in CAPPED_TWIN.items():
        # Only the register cap differs, so the bits are the same (checked bitwise on the GPU
        # by benchmarks/profile_decode.py --configs); the cap buys a program per SM.
        assert capped == dataclasses.replace(entry, max_registers=capped.max_registers)
        assert capped.max_registers is not None and entry.max_registers is None
        assert RESIDENT_PER_SM[(d, elem, capped)] > RESIDENT_PER_SM[(d, elem, entry)]
        assert entry in CONFIG_TABLE.values() or entry in SHALLOW_TWIN.values()
        assert capped in CANDIDATES[(d, elem)]


def test_costly_capped_twin_only_where_it_saves_the_entry_a_late_second_wave():
    from kvtune.kernels.decode_config import (CAPPED_TWIN, CAPPED_TWIN_COST,
                                              CAPPED_TWIN_MAX_COST, CAPPED_TWIN_SLACK,
                                              CONFIG_TABLE, in_order_finish, occupancy_twin)

    entry = CONFIG_TABLE[(256, 2, "many")]
    capped = CAPPED_TWIN[(256, 2, entry)]
    assert CAPPED_TWIN_COST[(256, 2, entry)] > CAPPED_TWIN_MAX_COST  # 5-6% slower programs

    def pick(keys, heads):
        return occupancy_twin(entry, 256, 2, len(keys) * heads, 132, True, False, keys, heads)

    # 34 equal tasks x 8 heads = 272 programs on 264 slots (2 per SM): the last 8 start when
    # the first wave ends (finish 2.0 tasks); 396 slots (3 per SM) hold them all.
    assert in_order_finish([100] * 34, 8, 264) == 2.0 > CAPPED_TWIN_SLACK
    assert pick([100] * 34, 8) == capped
    # 8 requests of 4 long chunks and a short tail, x 8 heads = 320: the tails free slots
    # early, so the late long tasks end near 1.24 tasks: the entry (measured 1.4% faster).
    tails = ([100] * 4 + [12]) * 8
    assert 1.0 < in_order_finish(tails, 8, 264) < CAPPED_TWIN_SLACK
    assert pick(tails, 8) == entry
    # One wave for the entry already, more than the twin holds at once (of any lengths), or
    # no item keys: the entry.
    assert pick([100] * 33, 8) == entry and pick([100] * 50, 8) == entry
    assert pick(([100] + [10] * 3) * 20, 8) == entry
    assert occupancy_twin(entry, 256, 2, 272, 132, True) == entry


def test_cheap_capped_twin_wherever_the_entry_slots_are_all_taken():
    from kvtune.kernels.decode_config import (CAPPED_TWIN, CAPPED_TWIN_COST,
                                              CAPPED_TWIN_MAX_COST, CONFIG_TABLE, SHALLOW_TWIN,
                                              capped_twin, occupancy_twin)

    fp8 = CONFIG_TABLE[(128, 1, "many")]
    fp8_capped = CAPPED_TWIN[(128, 1, fp8)]
    assert CAPPED_TWIN_COST[(128, 1, fp8)] <= CAPPED_TWIN_MAX_COST

    def pick(keys, heads, equal=True):
        # The capped twin's rule alone (occupancy_twin would first take the SHORT_TASK_TWIN of
        # launches of short tasks: test_short_task_twin_only_for_many_short_tasks).
        return capped_twin(fp8, 128, 1, len(keys) * heads, 132, keys, heads, equal)

    assert occupancy_twin(fp8, 128, 1, 264, 132, True, False, [992] * 264, 1) == fp8_capped
    # Fewer programs than the entry's 264 slots: the entry (llama3-70b-tp8 fixed-2048, 128).
    assert pick([2048] * 128, 1) == fp8
    # Exactly its slots, or up to the twin's 396, whatever the lengths: the twin (H100:
    # llama3-8b fp8 uniform B=8 balanced-2x, 320 programs, 208.8 against 218.2 us, where the
    # entry's in-order finish is only 1.2 tasks).
    assert pick([992] * 264, 1) == fp8_capped
    assert pick(([7952] * 4 + [1344]) * 8, 8) == fp8_capped
    # Beyond the twin's first wave: tasks of many lengths whose work is about one round of the
    # entry's slots at the longest task backfill its waves (llama3-8b skew80 B=256 balanced-2x,
    # 2256 programs, 1.00 rounds: 244.7 against 264.3) ...
    skew = [7952] * 26 + [300] * 256
    assert pick(skew, 8, equal=False) == fp8_capped
    # ... but more work than that keeps every SM streaming, and the twin only contends (arxiv
    # B=40 split in chunks of 2,048, 528 programs, 1.44 rounds: 98.1 against 91.9)
    chunks = [2048] * 26 + [1000] * 40
    assert pick(chunks, 8, equal=False) == fp8
    # ... and not where more long tasks than SMs are each longer than
    # CAPPED_BACKFILL_MAX_TASK_KEYS: launch order puts three long ones on some SMs (H200: MHA
    # fp8 uniform B=8 balanced-2x, 256 pieces of 31,744 keys beside 256 short ones, 588 against
    # 671 us; llama3-8b B=32, 8 KV heads, the same at 593 against 670) ...
    from kvtune.kernels.decode_config import CAPPED_BACKFILL_MAX_TASK_KEYS

    long = CAPPED_BACKFILL_MAX_TASK_KEYS + 1
    assert pick([long, 992] * 8, 32, equal=False) == fp8
    assert pick([long, 992] * 32, 8, equal=False) == fp8
    # ... while the same pattern of shorter pieces (3,968 keys: 93.7 against 94.8 us) and a few
    # long tasks among many short ones (FlashInfer's unsplit plans of skewed traces, 3-11%
    # faster under the twin) keep it.
    assert pick([CAPPED_BACKFILL_MAX_TASK_KEYS, 992] * 8, 32, equal=False) == fp8_capped
    few = [100_000] * 8 + [300] * 56
    assert pick(few, 8, equal=False) == fp8_capped
    # ... equal tasks that fill two waves of two per SM and 1.29 of three keep the entry
    # (llama3-8b uniform B=64 balanced-2x, 512 programs: 199.5 against 231.1) ...
    assert pick([4096] * 64, 8) == fp8
    # ... and equal tasks that fill the twin's waves as well take it (768 programs: 2.91 waves
    # of two, 1.94 of three).
    assert pick([2048] * 96, 8) == fp8_capped
    # The one-KV-head 16-bit entry: the deep entry first gives way to its shallow twin, which
    # in turn gives way to its capped twin (llama3-70b-tp8 uniform B=8 balanced-2x: 264
    # programs, 59.7 against 62.1 us at 262,144 tokens, 48.4 against 50.4 at 196,608).
    one = CONFIG_TABLE[(128, 2, "one-per-sm")]
    twin = SHALLOW_TWIN[(128, 2, one)]
    keys = [1008] * 264
    assert occupancy_twin(one, 128, 2, 264, 132, True, False, keys, 1) == \
        CAPPED_TWIN[(128, 2, twin)]
    # Where the deep entry stays (one program per SM), no cap either.
    assert occupancy_twin(one, 128, 2, 128, 132, True, False, [2048] * 128, 1) == one
    # An entry without a capped twin, or no item keys: unchanged.
    assert capped_twin(one, 128, 2, 400, 132, [1] * 400) == one
    assert capped_twin(fp8, 128, 1, 400, 132, None) == fp8


def test_short_task_twin_only_for_many_short_tasks():
    # H200, thirty-first session, call 7 (llama3-8b fp8 page 16): bn128-w4-s2-pa-vp-r128, four
    # programs per SM, was faster on 1,024 and 2,864 tasks of up to 2,048 keys and on 512 of
    # 4,096, slower on 320 of 6,553 and on skew80 balanced-2x pieces of 7,952.
    from kvtune.kernels.decode_config import (CAPPED_TWIN, CONFIG_TABLE, RESIDENT_PER_SM,
                                              SHORT_TASK_MAX_KEYS, SHORT_TASK_TWIN,
                                              occupancy_twin, short_task_twin)

    fp8 = CONFIG_TABLE[(128, 1, "many")]
    short = SHORT_TASK_TWIN[(128, 1, fp8)]
    assert dataclasses.replace(short, num_stages=3, max_registers=None) == fp8  # same bits
    assert RESIDENT_PER_SM[(128, 1, short)] == 4 > RESIDENT_PER_SM[(128, 1, fp8)]

    def pick(keys, heads, equal=True):
        return occupancy_twin(fp8, 128, 1, len(keys) * heads, 132, equal, False, keys, heads)

    assert pick([2048] * 128, 8) == short                        # 1,024 tasks of 2,048
    assert pick([SHORT_TASK_MAX_KEYS] * 64, 8) == short          # 512 of 4,096
    assert pick([2048] * 103 + [206] * 255, 8, False) == short   # skew80 B=256 fixed-2048
    assert pick([6553] * 40, 8) == CAPPED_TWIN[(128, 1, fp8)]    # 320 long: the capped twin
    assert pick([7952] * 27 + [832] * 63, 8, False) != short     # skew80 B=64 balanced-2x
    # Pieces of 3,984 keys beside short ones (G = 7-16 balanced-2x plans, call 8: slower) and one
    # KV head (llama3-70b-tp8: slower) keep the entry's rules.
    assert pick([3984, 112] * 64, 4, False) != short
    assert pick([2048] * 103 + [206] * 255, 1, False) != short
    # Not where the entry's own slots hold every task, nor without the plan's keys.
    assert short_task_twin(fp8, 128, 1, 264, 132, [1000] * 264, 1) is None
    assert short_task_twin(fp8, 128, 1, 1000, 132, None, 1) is None
    assert short_task_twin(fp8, 128, 1, 1000, 132, [], 1) is None


def test_in_order_finish_counts_in_longest_tasks():
    from kvtune.kernels.decode_config import in_order_finish

    assert in_order_finish([], 1, 4) == 1.0 and in_order_finish([0, 0, 0], 1, 1) == 1.0
    assert in_order_finish([10, 10, 10], 1, 2) == 2.0
    assert in_order_finish([10, 5, 5, 5], 1, 2) == 1.5  # the 5s follow each other on one slot
    assert in_order_finish([10] * 9, 1, 2, stop_above=1.5) == 2.0  # stops once above 1.5
    for kw, field in (({"num_kv_heads": 0}, "num_kv_heads"), ({"slots": 0}, "slots"),
                      ({"item_keys": [1, -1]}, "item_keys")):
        args = {"item_keys": [1, 2], "num_kv_heads": 1, "slots": 1, **kw}
        with pytest.raises(ValueError, match=field):
            in_order_finish(**args)


def test_large_pages_take_their_own_entry_and_its_twin_by_wave_fill():
    # Page 64 (H200, twenty-fifth session): bn128-w4-s3 / bn128-w4-s2, the page-1 pair, by the
    # same wave-fill rule; the hybrid kernels keep the page-16 entry.
    from kvtune.kernels.decode_config import (CONFIG_TABLE, LARGE_PAGE, LARGE_PAGE_TABLE,
                                              SHALLOW_TWIN)

    big = LARGE_PAGE_TABLE[(128, 2, "many")]
    assert big != CONFIG_TABLE[(128, 2, "many")]
    assert (big.block_n, big.num_warps, big.num_stages, big.page_ahead) == (128, 4, 3, False)
    shallow = SHALLOW_TWIN[(128, 2, big)]
    assert dataclasses.replace(big, num_stages=2) == shallow
    for page in (LARGE_PAGE, 2 * LARGE_PAGE):
        def pick(programs, equal, page=page):
            return default_config(128, torch.bfloat16, page, 2, num_kv_heads=8, group_size=4,
                                  programs=programs, sm_count=132, equal_tasks=equal)

        assert default_config(128, torch.bfloat16, page, 2, num_kv_heads=8, group_size=4) == big
        assert pick(512, True) == big  # 1.94 waves of two per SM against 1.29 of three
        assert pick(1024, True) == big
        assert pick(320, True) == shallow  # 1.21 waves against 0.81
        assert pick(272, False) == shallow and pick(2256, False) == shallow
        assert default_config(128, torch.bfloat16, page, 2, num_kv_heads=8, group_size=4,
                              decode_launch=False) == CONFIG_TABLE[(128, 2, "many")]
    # Page 32 and keys without a large-page entry keep the page-16 table.
    assert default_config(128, torch.bfloat16, 32, 2, num_kv_heads=8) == \
        CONFIG_TABLE[(128, 2, "many")]
    assert default_config(128, torch.bfloat16, 64, 2, num_kv_heads=1) == \
        CONFIG_TABLE[(128, 2, "one-per-sm")]


def test_head_dim_64_takes_the_deeper_entry_only_where_equal_tasks_fill_its_waves():
    # H200, twenty-fifth session: uniform B=64 balanced-2x (512 equal tasks) ran s3-pa at 0.876x
    # FlashInfer and s4-pa at 0.995x; tasks of many lengths were faster with s3-pa (H100).
    from kvtune.kernels.decode_config import (CONFIG_TABLE, HYBRID_DECODE_TABLE,
                                              RESIDENT_PER_SM, SHALLOW_TWIN)

    deep = CONFIG_TABLE[(64, 2, "many")]
    shallow = SHALLOW_TWIN[(64, 2, deep)]
    assert dataclasses.replace(deep, num_stages=3) == shallow
    assert RESIDENT_PER_SM[(64, 2, deep)] == 2 and RESIDENT_PER_SM[(64, 2, shallow)] == 3

    def pick(programs, equal):
        return default_config(64, torch.bfloat16, 16, 2, num_kv_heads=8, group_size=2,
                              programs=programs, sm_count=132, equal_tasks=equal)

    # Deep only where the twin's last wave is far emptier: 512 programs (fills 0.97 / 0.65),
    # not 1,024 or 2,048 (0.97 / 0.86: the twin streams faster per SM at head_dim 64).
    assert pick(512, True) == deep
    assert pick(1024, True) == shallow and pick(2048, True) == shallow
    assert pick(320, True) == shallow and pick(272, False) == shallow
    assert pick(2256, False) == shallow and pick(100, False) == deep  # one wave: deep
    # The hybrid kernels keep the tile they were checked with.
    hybrid = default_config(64, torch.bfloat16, 16, 2, num_kv_heads=8, group_size=2,
                            decode_launch=False)
    assert hybrid == HYBRID_DECODE_TABLE[(64, 2, "many")] == shallow


@pytest.mark.parametrize("batch,skew,chunk,tasks,want_stages", [
    (64, (), 4096, 512, 4),      # 1.94 waves of two per SM, 1.29 of three: the deep entry
    (64, (), 2048, 1024, 3),     # fills 0.97 / 0.86: the twin streams faster (margin 0.2)
    (64, (80,), 7952, 720, 4),   # longest first, the entry's slots finish in one long task
    (8, (80,), 7952, 272, 3),    # eight tasks late under two per SM, on time under three
    (64, (80,), 2048, 1328, 3),  # several rounds under both: SEVERAL_ROUNDS_TWIN
    (256, (80,), 2048, 2864, 3),
])
def test_fp8_head_dim_256_picks_the_faster_of_its_pair_on_the_h200_plans(batch, skew, chunk,
                                                                          tasks, want_stages):
    # H200, thirty-first session (docs/PERFORMANCE.md, calls 2 and 5): on each of these plans
    # the configuration picked here was the faster of bn64-w4-s4-pa-vp and bn64-w4-s3-pa-vp; the
    # entries now prefetch the page ids into L2 (-l2, thirty-third session), and on the plans
    # timed with both of the -l2 pair (call 3, page 16: skew80 B=8 and B=64 balanced-2x, and
    # 1,024 equal tasks of 2,048 keys as uniform B=8 fixed-2048) the pick was again the faster.
    from kvtune.workloads.distributions import fixed_total_kv_lens

    shape = AttentionShape(num_qo_heads=16, num_kv_heads=8, head_dim=256, page_size=16,
                           kv_dtype="fp8_e4m3")
    device = DeviceSpec("h200", sm_count=132, l2_bytes=60 * 2**20, hbm_bytes_per_s=4.8e12)
    kv = fixed_total_kv_lens(batch, 262_144, skew)
    plan = policies.get("fixed-split", chunk_tokens=chunk).plan(kv, shape, device)
    assert plan.num_tasks == tasks
    config = launch_config(plan, shape, torch.float8_e4m3fn, 132)
    assert config == KernelConfig(64, 4, want_stages, page_ahead=True, v_pairs=True,
                                  page_ids_l2=True)
    # The hybrid kernel's decode items keep the three stages they were checked with.
    assert default_config(256, torch.float8_e4m3fn, 16, 2, num_kv_heads=8, group_size=2,
                          decode_launch=False).num_stages == 3


def test_fp8_head_dim_64_entry_is_the_capped_kernel():
    # Triton 3.6 gives bn128-w4-s3-pa-vp 148 registers (three per SM); capped at 120, the same
    # bits, four fit (H200, thirty-first session, call 5: faster or within 0.4% on four plans).
    from kvtune.kernels.decode_config import CANDIDATES, CONFIG_TABLE

    entry = CONFIG_TABLE[(64, 1, "many")]
    assert entry == KernelConfig(128, 4, 3, page_ahead=True, v_pairs=True, max_registers=120)
    assert dataclasses.replace(entry, max_registers=None) == CONFIG_TABLE[(128, 1, "many")]
    assert entry in CANDIDATES[(64, 1)]


@pytest.mark.parametrize("heads,head_dim,want", [((4, 2), 256, KernelConfig(64, 4, 3)),
                                                  ((16, 2), 128, KernelConfig(128, 4, 3))])
def test_token_page_entries_of_head_dim_256_and_large_groups_match_the_reference(heads,
                                                                                 head_dim, want):
    # The page-1 entries of the thirtieth session (head_dim 256; G = 8), as the product's launch
    # picks them, over requests shorter than, equal to and longer than one block, split and not.
    shape = AttentionShape(num_qo_heads=heads[0], num_kv_heads=heads[1], head_dim=head_dim,
                           page_size=1)
    kv = [1, want.block_n, 2 * want.block_n + 7, 40]
    plan = build_plan(kv, want.block_n - 3, num_kv_heads=heads[1], page_size=1, ctas_per_sm=2)
    assert plan.num_split_requests >= 2
    cache, q = make_inputs(kv, shape, torch.bfloat16)
    _, launch = check_against_reference(q, cache, plan)
    assert launch.config == want


def test_token_pages_take_the_deeper_entry_only_where_equal_tasks_fill_its_waves():
    # Page 1 (H100, eighteenth session): bn128-w4-s3 (two programs per SM) beat its same-bits
    # twin bn128-w4-s2 (three) on 512 equal tasks (1.94 waves against 1.29), lost on 320 equal
    # tasks (1.21 waves against 0.81) and on tasks of many lengths.
    from kvtune.kernels.decode_config import SHALLOW_TWIN, SMALL_PAGE_TABLE

    deep = SMALL_PAGE_TABLE[(128, 2, "many")]
    shallow = SHALLOW_TWIN[(128, 2, deep)]
    assert (deep.block_n, deep.num_warps, deep.num_stages) == (128, 4, 3)
    assert dataclasses.replace(deep, num_stages=2) == shallow

    def pick(programs, equal):
        return default_config(128, torch.bfloat16, 1, 2, num_kv_heads=8, group_size=4,
                              programs=programs, sm_count=132, equal_tasks=equal)

    assert pick(512, True) == deep
    assert pick(320, True) == shallow
    assert pick(720, False) == shallow
    assert pick(100, False) == deep  # one program per SM either way: the deeper one
    # The hybrid kernels keep the entry they were measured with.
    assert default_config(128, torch.bfloat16, 1, 2, num_kv_heads=8, group_size=4,
                          decode_launch=False) == shallow

"""kernels/decode_config's choices for stage 1 launched longest first (the product's order):
in_order_finish hands tasks out in the kernel's own launch order, and longest_first_config
walks entry -> shallow twin -> capped twin to the first configuration whose slots finish the
tasks in about one long task's time."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from kvtune.kernels.decode_config import (CAPPED_TWIN, CAPPED_TWIN_COST, CAPPED_TWIN_MAX_COST,
                                          CONFIG_TABLE, RESIDENT_PER_SM, SEVERAL_ROUNDS_TWIN,
                                          SHALLOW_TWIN, KernelConfig,
                                          in_order_finish, longest_first_config,
                                          occupancy_twin)
from kvtune.kernels.plan import LAUNCH_ORDERS, build_plan, launch_tasks

ONE_KV_HEAD = KernelConfig.from_label("bn128-w8-s3-pa")  # one program per SM
TWIN = KernelConfig.from_label("bn128-w8-s2-pa")
CAPPED = KernelConfig.from_label("bn128-w8-s2-pa-r80")
HD256 = KernelConfig.from_label("bn64-w4-s2")
HD256_CAPPED = KernelConfig.from_label("bn64-w4-s2-r168")
SMS = 4


def _greedy_finish(task_keys, slots):
    free = [0.0] * slots
    finish = 0.0
    for k in task_keys:
        end = heapq.heappop(free) + k
        finish = max(finish, end)
        heapq.heappush(free, end)
    return finish / max(task_keys)


def test_the_tables_chain_the_one_kv_head_entry_through_both_twins():
    assert RESIDENT_PER_SM[(128, 2, ONE_KV_HEAD)] == 1
    assert SHALLOW_TWIN[(128, 2, ONE_KV_HEAD)] == TWIN and CAPPED_TWIN[(128, 2, TWIN)] == CAPPED
    assert (RESIDENT_PER_SM[(128, 2, TWIN)], RESIDENT_PER_SM[(128, 2, CAPPED)]) == (2, 3)
    assert CAPPED_TWIN[(256, 2, HD256)] == HD256_CAPPED
    assert CAPPED_TWIN_COST[(256, 2, HD256)] > CAPPED_TWIN_MAX_COST  # a costly twin


@pytest.mark.parametrize("order", LAUNCH_ORDERS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_order_finish_hands_tasks_out_in_the_kernels_launch_order(order, seed):
    rng = np.random.default_rng(seed)
    kv = rng.integers(1, 400, size=9)
    kv[0] = 3000  # one long request cut in many pieces
    plan = build_plan(kv, 128, num_kv_heads=3, page_size=16)
    keys = (plan.work_kv_end - plan.work_kv_start).astype(np.float64)
    tasks = keys[launch_tasks(plan, order)[0]]
    for slots in (2, 5, 11):
        assert in_order_finish(keys, 3, slots, launch_order=order) == pytest.approx(
            _greedy_finish(tasks, slots))


def test_longest_first_short_tasks_backfill_where_the_plans_order_leaves_a_long_one_late():
    keys = [1, 1, 1, 3]
    assert in_order_finish(keys, 1, 2) == pytest.approx(4 / 3)
    assert in_order_finish(keys, 1, 2, launch_order="longest-first") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="launch_order: 'fifo' not allowed"):
        in_order_finish(keys, 1, 2, launch_order="fifo")


@pytest.mark.parametrize("keys, heads, want", [
    ([10] * 4, 1, ONE_KV_HEAD),         # one per SM holds them: the deep entry
    ([10] * 8, 1, TWIN),                # a second round for the entry, one wave of the twin
    ([10] * 3, 4, CAPPED),              # 12 tasks (KV heads count): only three per SM hold them
    ([10] * 20, 1, ONE_KV_HEAD),        # late under all three: the entry's faster programs
    ([10] * 4 + [2] * 12, 1, TWIN),     # long ones at once, short ones backfill the twin's slots
    ([10] * 4 + [1] * 3, 1, ONE_KV_HEAD),  # three shorts after the longs: within the slack
])
def test_longest_first_config_takes_the_first_configuration_on_time(keys, heads, want):
    assert longest_first_config(ONE_KV_HEAD, 128, 2, SMS, keys, heads) == want


def test_a_costly_capped_twin_runs_only_where_the_entry_is_well_late():
    # 2 programs per SM for the entry, 3 for its capped twin: 8 and 12 slots on 4 SMs.
    assert longest_first_config(HD256, 256, 2, SMS, [10] * 12, 1) == HD256_CAPPED  # late 2.0
    # Two short tasks after eight long ones: the entry finishes at 1.3 longest tasks, below
    # CAPPED_TWIN_SLACK, so the twin's slower programs are not worth its extra slots.
    assert longest_first_config(HD256, 256, 2, SMS, [10] * 8 + [3] * 2, 1) == HD256
    lone = KernelConfig.from_label("bn32-w2-s2")  # no twin of either kind: itself
    assert longest_first_config(lone, 128, 2, SMS, [10] * 40, 1) == lone


def test_a_several_rounds_twin_runs_where_neither_finishes_in_one_long_task():
    # fp8 head_dim 256: the entry fits 2 programs per SM (8 slots on 4 SMs), its twin 3 (12).
    entry = CONFIG_TABLE[(256, 1, "many")]
    twin = SHALLOW_TWIN[(256, 1, entry)]
    assert (256, 1, entry) in SEVERAL_ROUNDS_TWIN
    assert RESIDENT_PER_SM[(256, 1, entry)] == 2 and RESIDENT_PER_SM[(256, 1, twin)] == 3
    assert longest_first_config(entry, 256, 1, SMS, [10] * 6 + [1] * 10, 1) == entry  # on time
    assert longest_first_config(entry, 256, 1, SMS, [10] * 10 + [1] * 4, 1) == twin  # 12 slots
    # Several rounds under both (40 long tasks on 8 or 12 slots): the twin, where the 16-bit
    # head_dim-128 pair, not in the set, keeps its entry.
    assert longest_first_config(entry, 256, 1, SMS, [10] * 40 + [1] * 9, 1) == twin
    deep16 = KernelConfig.from_label("bn64-w4-s4-pa")
    assert (128, 2, deep16) not in SEVERAL_ROUNDS_TWIN
    assert longest_first_config(deep16, 128, 2, SMS, [10] * 40 + [1] * 9, 1) == deep16


def test_occupancy_twin_uses_the_longest_first_rule_for_many_lengths_and_lone_entries():
    # Equal tasks on an entry of one program per SM: longest_first_config (a second round for
    # one per SM, one wave of two).
    keys = [10] * 8
    assert occupancy_twin(ONE_KV_HEAD, 128, 2, 8, SMS, True, item_keys=keys, num_kv_heads=1,
                          launch_order="longest-first") == TWIN
    # Tasks of many lengths on a deep entry of two per SM whose slots hold the long ones: the
    # entry, where the plan's order gives its twin.
    entry = KernelConfig.from_label("bn64-w4-s4-pa")
    many = [10] * 6 + [1] * 14
    kw = dict(item_keys=many, num_kv_heads=1)
    assert occupancy_twin(entry, 128, 2, 20, SMS, False, **kw) == SHALLOW_TWIN[(128, 2, entry)]
    assert occupancy_twin(entry, 128, 2, 20, SMS, False, launch_order="longest-first",
                          **kw) == entry
    # Without the item keys the rule cannot tell: the entry.
    assert occupancy_twin(entry, 128, 2, 20, SMS, False, launch_order="longest-first") == entry

"""kernels/decode.py's launch_order "longest-first" (MODE 3) in Triton's interpreter: the same
tasks as the plan's order, launched longest item first with the KV heads inner; the output is
the plan order's bit for bit, within the reference's bound, batch invariant, and refused where
programs take tasks in their own order."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from kvtune.kernels.decode import LAUNCH_ORDERS, KernelConfig, prepare_decode, run_decode
from kvtune.kernels.plan import AttentionShape, build_plan, product_launch_order
from kvtune.kernels.reference import decode_reference, relative_error
from tests.kernels.kernel_cases import BOUNDS, make_inputs, small_inside_large

SHAPE = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4)
CONFIG = KernelConfig(16, 4, 3, page_ahead=True)


def _run(q, cache, plan, **kw):
    launch = prepare_decode(plan, cache, config=CONFIG, **kw)
    out = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=out)
    return out, launch


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_longest_first_computes_the_plan_orders_bits(dtype):
    # One long request cut in pieces beside short ones (a skewed batch): items of many lengths,
    # split and unsplit requests, a request shorter than a page.
    kv = [3, 61, 9, 2, 17]
    cache, q = make_inputs(kv, SHAPE, dtype)
    plan = build_plan(kv, 12, num_kv_heads=2, page_size=4)
    assert plan.num_split_requests >= 2
    plain, launch_plain = _run(q, cache, plan, launch_order="plan")
    assert launch_plain.mode == 0 and launch_plain.launch_order == "plan"
    longest, launch = _run(q, cache, plan, launch_order="longest-first")
    assert launch.launch_order == "longest-first"
    assert launch.mode == 3 and launch.grid == (plan.num_tasks,)
    keys = (launch.items[:, 2] - launch.items[:, 1]).numpy()
    assert (np.diff(keys) <= 0).all()  # longest item first
    # the same items, each with its own partial row
    assert sorted(map(tuple, launch.items.tolist())) == sorted(
        map(tuple, launch_plain.items.tolist()))
    assert not torch.isnan(longest).any()
    assert torch.equal(longest, plain)
    assert relative_error(longest, decode_reference(q, cache)) <= BOUNDS[dtype]


def test_longest_first_is_batch_invariant():
    """A request's bits do not depend on the other requests nor on where its tasks launch."""
    kv_small = [21, 3, 12]
    kv_large = kv_small + [40, 1, 17, 8]
    cache_s, q_s, cache_l, q_l = small_inside_large(kv_small, kv_large, SHAPE, torch.bfloat16)
    out_s, _ = _run(q_s, cache_s, build_plan(kv_small, 8, num_kv_heads=2, page_size=4),
                    launch_order="plan")
    out_l, _ = _run(q_l, cache_l, build_plan(kv_large, 8, num_kv_heads=2, page_size=4),
                    launch_order="longest-first")
    assert torch.equal(out_s, out_l[: len(kv_small)])


def test_longest_first_is_refused_where_programs_take_tasks_in_their_own_order():
    kv = [9, 33]
    cache, _ = make_inputs(kv, SHAPE, torch.float32)
    plan = build_plan(kv, 8, num_kv_heads=2, page_size=4)
    with pytest.raises(ValueError, match="launch_order: 'fifo' not allowed; allowed: plan"):
        prepare_decode(plan, cache, config=CONFIG, launch_order="fifo")
    with pytest.raises(ValueError, match="launch_order"):
        prepare_decode(plan, cache, config=CONFIG, merge="tail", launch_order="longest-first")
    with pytest.raises(ValueError, match="launch_order"):
        prepare_decode(plan, cache, config=dataclasses.replace(CONFIG, flat_per_sm=1),
                       launch_order="longest-first")
    persistent = build_plan(kv, 8, num_kv_heads=2, page_size=4,
                            schedule="persistent-heavy-first")
    with pytest.raises(ValueError, match="launch_order"):
        prepare_decode(persistent, cache, config=CONFIG, launch_order="longest-first")
    assert LAUNCH_ORDERS == ("plan", "longest-first")


def test_the_product_launches_static_plans_longest_first_and_others_in_their_own_order():
    """prepare_decode's default (launch_order None): product_launch_order where it can run, the
    plan's order where programs take tasks themselves (persistent grids, the tail merge, the
    flattened stage 1); each launch says which order it runs."""
    kv = [9, 33, 2]
    cache, _ = make_inputs(kv, SHAPE, torch.float32)
    static = build_plan(kv, 8, num_kv_heads=2, page_size=4)
    persistent = build_plan(kv, 8, num_kv_heads=2, page_size=4,
                            schedule="persistent-heavy-first")
    assert product_launch_order(static) == "longest-first"
    assert product_launch_order(persistent) == "plan"
    launch = prepare_decode(static, cache, config=CONFIG)
    assert (launch.launch_order, launch.mode) == ("longest-first", 3)
    assert prepare_decode(persistent, cache, config=CONFIG).launch_order == "plan"
    assert prepare_decode(static, cache, config=CONFIG, merge="tail").launch_order == "plan"
    flat = dataclasses.replace(CONFIG, flat_per_sm=1)
    assert prepare_decode(static, cache, config=flat).launch_order == "plan"
    assert prepare_decode(static, cache).launch_order == "longest-first"  # the table's config


def test_the_table_configuration_follows_the_order_asked(monkeypatch):
    """A None config is chosen (launch_config) for the order the launch runs in: the plan's
    when asked, the product's by default, the plan's under the tail merge."""
    from kvtune.kernels import decode as decode_module

    seen = []
    real = decode_module.launch_config

    def spy(plan, shape, kv_dtype, sm_count=None, launch_order=None):
        seen.append(launch_order)
        return real(plan, shape, kv_dtype, sm_count, launch_order)

    monkeypatch.setattr(decode_module, "launch_config", spy)
    kv = [9, 33, 2]
    cache, _ = make_inputs(kv, SHAPE, torch.float32)
    static = build_plan(kv, 8, num_kv_heads=2, page_size=4)
    assert prepare_decode(static, cache, launch_order="plan").launch_order == "plan"
    assert prepare_decode(static, cache).launch_order == "longest-first"
    prepare_decode(static, cache, merge="tail")
    assert seen == ["plan", "longest-first", "plan"]

"""kernels/decode_flat.py: the flattened persistent stage 1 (config -flN) in Triton's interpreter.

Against the float64 reference (as test_decode.py, NaN-poisoned outputs), bit for bit against the
per-task page-ahead loop of kernels/decode.py with the same tiles, and the host assignment.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from kvtune.kernels.decode import KernelConfig, prepare_decode, run_decode
from kvtune.kernels.decode_flat import flat_assignment
from kvtune.kernels.plan import AttentionShape, build_plan
from tests.kernels.kernel_cases import (check_against_reference, make_inputs,
                                        small_inside_large)

SMALL = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4)
PAGE_AHEAD = KernelConfig(16, 4, 3, page_ahead=True)
FLAT = dataclasses.replace(PAGE_AHEAD, flat_per_sm=2)


def _run(q, cache, plan, config, **kw):
    launch = prepare_decode(plan, cache, config=config, **kw)
    out = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=out)
    return out, launch


@pytest.mark.parametrize("programs", [1, 3, 100])
def test_flat_matches_reference_and_the_per_task_loop_bit_for_bit(programs):
    # Splits at 12 tokens over pages of 4 with 16-token tiles: tasks of one tile, tasks that end
    # inside a tile, requests shorter than a page, and programs that run 1..all tasks.
    kv = [1, 30, 9, 47, 5]
    cache, q = make_inputs(kv, SMALL, torch.bfloat16)
    plan = build_plan(kv, 12, num_kv_heads=2, page_size=4)
    assert plan.num_split_requests >= 2
    flat_out, launch = _run(q, cache, plan, FLAT, flat_programs=programs)
    assert launch.flat is not None and launch.flat.programs == min(programs, plan.num_tasks)
    assert launch.grid == (launch.flat.programs,)
    check_against_reference(q, cache, plan, PAGE_AHEAD)
    plain_out, _ = _run(q, cache, plan, PAGE_AHEAD)
    assert not torch.isnan(flat_out).any()
    assert torch.equal(flat_out, plain_out)


@pytest.mark.parametrize("kv_dtype,v_pairs", [("fp8_e4m3", False), ("fp8_e4m3", True),
                                              ("fp16", False)])
def test_flat_fp8_and_fp16_pages(kv_dtype, v_pairs):
    dtype = torch.float16 if kv_dtype == "fp16" else torch.bfloat16
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4,
                           dtype="fp16" if kv_dtype == "fp16" else "bf16", kv_dtype=kv_dtype)
    kv = [3, 40, 17]
    cache, q = make_inputs(kv, shape, dtype)
    plan = build_plan(kv, 16, num_kv_heads=2, page_size=4)
    config = KernelConfig(16, 4, 3, page_ahead=True, v_pairs=v_pairs)
    flat = dataclasses.replace(config, flat_per_sm=1)
    check_against_reference(q, cache, plan, flat)
    assert torch.equal(_run(q, cache, plan, flat, flat_programs=2)[0],
                       _run(q, cache, plan, config)[0])


def test_flat_is_batch_invariant():
    """A request's bits do not depend on the other requests, nor on which program ran it."""
    kv_small = [21, 3, 12]
    kv_large = kv_small + [30, 1, 17, 8]
    cache_s, q_s, cache_l, q_l = small_inside_large(kv_small, kv_large, SMALL, torch.bfloat16)
    out_s, _ = _run(q_s, cache_s, build_plan(kv_small, 8, num_kv_heads=2, page_size=4), FLAT,
                    flat_programs=1)
    out_l, _ = _run(q_l, cache_l, build_plan(kv_large, 8, num_kv_heads=2, page_size=4), FLAT,
                    flat_programs=5)
    assert torch.equal(out_s, out_l[: len(kv_small)])


def test_flat_launch_can_run_twice():
    kv = [9, 33]
    cache, q = make_inputs(kv, SMALL, torch.float32)
    plan = build_plan(kv, 8, num_kv_heads=2, page_size=4)
    first, launch = check_against_reference(q, cache, plan, dataclasses.replace(
        KernelConfig(16, 4, 2, page_ahead=True), flat_per_sm=1))
    second = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=second)
    assert torch.equal(first, second)


def test_flat_assignment_is_longest_first_and_balanced():
    tiles = np.array([1, 8, 3, 3, 2, 8, 1])
    order, offsets = flat_assignment(tiles, 3)
    assert sorted(order.tolist()) == list(range(7))
    loads = [int(tiles[order[offsets[p]:offsets[p + 1]]].sum()) for p in range(3)]
    # LPT: 8 -> p0, 8 -> p1, 3 -> p2, 3 -> p2, 2 -> p2 (6 -> 8), 1 -> p0, 1 -> p1.
    assert loads == [9, 9, 8]
    first_tasks = [int(order[offsets[p]]) for p in range(3)]
    assert first_tasks == [1, 5, 2]  # heaviest first, ties to the lower task id
    # Equal tasks: round-robin.
    order, offsets = flat_assignment(np.full(7, 2), 3)
    assert offsets.tolist() == [0, 3, 5, 7]
    assert order.tolist() == [0, 3, 6, 1, 4, 2, 5]


def test_flat_bad_input_names_the_field():
    with pytest.raises(ValueError, match="num_programs"):
        flat_assignment(np.array([1, 2]), 3)
    with pytest.raises(ValueError, match="task_tiles"):
        flat_assignment(np.array([1, 0]), 1)
    with pytest.raises(ValueError, match="flat_per_sm"):
        KernelConfig(16, 4, 3, page_ahead=True, flat_per_sm=9)
    with pytest.raises(ValueError, match="flat_per_sm"):
        KernelConfig(16, 4, 3, flat_per_sm=2)  # needs page_ahead
    assert KernelConfig.from_label("bn128-w8-s3-pa-fl2") == dataclasses.replace(
        KernelConfig(128, 8, 3, page_ahead=True), flat_per_sm=2)
    kv = [9, 33]
    cache, q = make_inputs(kv, SMALL, torch.bfloat16)
    plan = build_plan(kv, 8, num_kv_heads=2, page_size=4)
    with pytest.raises(ValueError, match="merge"):
        prepare_decode(plan, cache, config=FLAT, merge="tail")
    with pytest.raises(ValueError, match="flat_programs"):
        prepare_decode(plan, cache, config=FLAT, flat_programs=0)

"""Regime thresholds found by running the planners, checked against the closed forms of
shared/BACKGROUND.md for several devices and shapes (never the other way round)."""

from __future__ import annotations

import numpy as np
import pytest

from kvtune.dashboard.thresholds import (
    EXACT_SWEEP_UP_TO,
    Threshold,
    bucket_thresholds,
    plan_regime,
    policy_thresholds,
    probe_kv_lens,
    regime_thresholds,
    sweep_batch_sizes,
)
from kvtune.harness.device import device_model
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape, SplitParams

LLAMA8B = AttentionShape(num_qo_heads=32, num_kv_heads=8)
LLAMA70B_TP8 = AttentionShape(num_qo_heads=8, num_kv_heads=1)
QWEN7B = AttentionShape(num_qo_heads=28, num_kv_heads=4)
CASES = [(LLAMA8B, "h200"), (LLAMA8B, "a100"), (LLAMA70B_TP8, "h100"), (QWEN7B, "h20")]


def first_rule(name: str, shape, device, max_batch: int = 2048) -> Threshold:
    rules = policy_thresholds(name, {}, shape, device, max_batch)
    assert rules, f"{name}: no threshold found"
    return rules[0]


@pytest.mark.parametrize("shape,model", CASES)
def test_flashinfer_tensor_core_stops_splitting_above_2S_over_Hkv(shape, model):
    device = device_model(model)
    rule = first_rule("flashinfer-tensor-core", shape, device)
    # max_batch_if_split = 2S // H_kv work items: B requests plus one extra chunk must fit.
    assert rule.batch_size == (2 * device.sm_count) // shape.num_kv_heads
    assert rule.label == f"flashinfer-tensor-core: no split from B={rule.batch_size}"
    assert rule.kind == "regime"


@pytest.mark.parametrize("shape,model", CASES)
def test_flashinfer_cuda_core_stops_when_the_grid_fills_the_gpu(shape, model):
    from kvtune.kernels.baselines_flashinfer import CUDA_CORE_GROUP_SIZES

    device = device_model(model)
    if shape.group_size not in CUDA_CORE_GROUP_SIZES:  # Qwen's G = 7: FlashInfer has no kernel
        with pytest.raises(ValueError, match="group_size: 7"):
            policy_thresholds("flashinfer-cuda-core", {}, shape, device, 2048)
        return
    rule = first_rule("flashinfer-cuda-core", shape, device)
    # No split once B * H_kv >= occupancy * S (B * H_kv + H_kv > occupancy * S cannot split).
    assert rule.batch_size == device.max_ctas_per_sm * device.sm_count // shape.num_kv_heads


@pytest.mark.parametrize("shape,model", CASES)
def test_vllm_leaves_the_3d_kernel_above_128_over_Hkv(shape, model):
    rule = first_rule("vllm-triton", shape, device_model(model))
    assert rule.batch_size == 128 // shape.num_kv_heads + 1
    assert "kernel 2d" in rule.label and "no split" in rule.label


def test_fa3_dynamic_split_ends_above_992():
    rules = policy_thresholds("fa3", {}, LLAMA8B, device_model("h200"), 2048)
    assert [r.batch_size for r in rules] == [993]
    assert "dynamic_split off" in rules[0].label
    # Its own parameter moves the rule: the rule comes from the planner, not a constant.
    moved = policy_thresholds(
        "fa3", {"max_dynamic_batch": 500}, LLAMA8B, device_model("h200"), 2048
    )
    assert [r.batch_size for r in moved] == [501]


def test_trtllm_splits_only_while_the_base_grid_is_under_one_wave():
    device = device_model("h200")
    rule = first_rule("trtllm", LLAMA8B, device)
    assert (
        rule.batch_size == device.sm_count // LLAMA8B.num_kv_heads // 2 + 1
    )  # S // (B * H_kv) >= 2


def test_batch_invariant_policies_have_no_threshold():
    device = device_model("h200")
    assert policy_thresholds("no-split", {}, LLAMA8B, device, 2048) == []
    assert policy_thresholds("fixed-split", {}, LLAMA8B, device, 2048) == []


def test_rules_beyond_max_batch_are_left_out():
    assert policy_thresholds("fa3", {}, LLAMA8B, device_model("h200"), 512) == []
    rules = policy_thresholds("flashinfer-tensor-core", {}, LLAMA8B, device_model("h200"), 33)
    assert [r.batch_size for r in rules] == [33]


def test_sweep_bisects_to_the_exact_batch_size_past_the_exact_range():
    # vLLM with H_kv = 1 changes at B = 129, inside a geometric gap of the sweep.
    sizes = sweep_batch_sizes(2048)
    assert 129 not in sizes and sizes[:EXACT_SWEEP_UP_TO] == list(range(1, EXACT_SWEEP_UP_TO + 1))
    assert sizes[-1] == 2048 and sizes == sorted(set(sizes))
    rule = first_rule("vllm-triton", LLAMA70B_TP8, device_model("h100"))
    assert rule.batch_size == 129
    device = device_model("h100")
    vllm = policies.get("vllm-triton")
    before = plan_regime(vllm, probe_kv_lens(128, 131072, 16), LLAMA70B_TP8, device)
    after = plan_regime(vllm, probe_kv_lens(129, 131072, 16), LLAMA70B_TP8, device)
    assert before != after


def test_probe_batch_and_bad_input():
    kv = probe_kv_lens(5, 1000, 16)
    assert kv.tolist() == [1000, 16, 16, 16, 16] and kv.dtype == np.int64
    with pytest.raises(ValueError, match="max_batch"):
        regime_thresholds(policies.get("fa3"), LLAMA8B, device_model("h200"), 0)
    with pytest.raises(ValueError, match="policy"):
        policy_thresholds("no-such-policy", {}, LLAMA8B, device_model("h200"), 64)


def test_bucket_thresholds_mark_every_bucket_start_but_the_first():
    params = SplitParams()
    rules = bucket_thresholds([(33, 128, params), (1, 8, params), (9, 32, params)])
    assert [r.batch_size for r in rules] == [9, 33]
    assert rules[0].label == "tuned bucket 9-32" and rules[0].kind == "bucket"
    assert rules[0].rule_x == 8.5
    assert [
        r.batch_size
        for r in bucket_thresholds(
            [{"min_batch": 1, "max_batch": 8}, {"min_batch": 9, "max_batch": 512}], max_batch=8
        )
    ] == []
    tuned = policy_thresholds(
        "tuned",
        {
            "buckets": [
                {"min_batch": 1, "max_batch": 16, "params": params.to_dict()},
                {"min_batch": 17, "max_batch": 64, "params": params.to_dict()},
            ]
        },
        LLAMA8B,
        device_model("h200"),
        64,
    )
    assert [(r.policy, r.batch_size) for r in tuned] == [("tuned", 17)]

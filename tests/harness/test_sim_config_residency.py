"""harness/sim_model config_residency: a launch's slots and per-CTA cap follow the stage-1
configuration kvtune's Triton kernel runs it with (a capped twin: three programs per SM; the
one-KV-head deep entry: one), and nothing else moves."""

import dataclasses

import numpy as np
import pytest
from kvtune.harness.device import sim_model
from kvtune.harness.sim_model import (SimConstants, configured_ctas_per_sm,
                                      cta_rate_cap_bytes_per_s, num_slots, simulate)
from kvtune.kernels import policies
from kvtune.workloads.shapes import get_shape

MODEL = sim_model("h100", "triton")
DEVICE = MODEL.device
OFF = dataclasses.replace(MODEL.constants, config_residency=False)
ON = dataclasses.replace(MODEL.constants, config_residency=True)


def _plan(shape, kv_lens, chunk):
    return policies.get("fixed-split", chunk_tokens=chunk).plan(np.asarray(kv_lens), shape, DEVICE)


def test_the_shipped_triton_models_follow_the_configuration():
    # H100 since the twenty-fourth session, H200 since the twenty-seventh (held out on its fp8
    # trace rows; the calibration files' config_residency_note).
    assert MODEL.constants.config_residency is True
    h200 = sim_model("h200", "triton")
    assert h200.constants.config_residency is True
    assert "twenty-seventh" in h200.source["config_residency_note"]


def test_a_capped_twin_launch_gets_three_slots_per_sm_and_shares_the_sm_rate():
    # llama3-8b fp8, a request of 33 chunks of 7,952 tokens beside one of a single chunk: 34
    # items x 8 heads = 272 programs, more than the entry's 264 slots, fewer than the twin's 396.
    shape = get_shape("llama3-8b", kv_dtype="fp8_e4m3")
    plan = _plan(shape, [7952 * 33] + [7952] * 1, 7952)
    assert plan.num_tasks == 272
    assert configured_ctas_per_sm(plan, shape, DEVICE) == 3
    assert num_slots(plan, DEVICE, OFF, shape) == 264 == num_slots(plan, DEVICE, ON)
    assert num_slots(plan, DEVICE, ON, shape) == 396
    cap_off = cta_rate_cap_bytes_per_s(plan, shape, DEVICE, OFF)
    assert cta_rate_cap_bytes_per_s(plan, shape, DEVICE, ON) == pytest.approx(cap_off * 2 / 3)
    assert simulate(plan, shape, DEVICE, ON).num_slots == 396


def test_the_one_kv_head_deep_entry_runs_one_per_sm():
    # llama3-70b-tp8 bf16, 128 chunks of 2,048 tokens: the deep entry (one program per SM).
    shape = get_shape("llama3-70b-tp8")
    plan = _plan(shape, [32768] * 8, 2048)
    assert plan.num_tasks == 128
    assert configured_ctas_per_sm(plan, shape, DEVICE) == 1
    # The calibration counts two per SM (kernel_ctas_per_sm); the launch runs one: 132 slots,
    # and the cap law's value at one (higher than at two).
    assert OFF.kernel_ctas_per_sm == 2 and num_slots(plan, DEVICE, OFF, shape) == 264
    assert num_slots(plan, DEVICE, ON, shape) == 132
    cap_on = cta_rate_cap_bytes_per_s(plan, shape, DEVICE, ON)
    assert cap_on == pytest.approx(ON.cta_rate_cap_bytes_per_s)
    assert cap_on > cta_rate_cap_bytes_per_s(plan, shape, DEVICE, OFF)


@pytest.mark.parametrize("name, kv, lens, chunk", [
    ("llama3-8b", "bf16", [4096] * 64, 2048),   # the entry at its calibrated two per SM
    ("llama3-8b", "bf16", [7952 * 33, 7952], 7952),  # its shallow twin: another pipeline
    ("hd64", "bf16", [4096] * 64, 2048),        # a configuration the table does not count
])
def test_launches_the_model_does_not_describe_do_not_move(name, kv, lens, chunk):
    shape = get_shape(name, kv_dtype=kv)
    plan = _plan(shape, lens, chunk)
    assert configured_ctas_per_sm(plan, shape, DEVICE) is None
    assert simulate(plan, shape, DEVICE, ON).time_us == simulate(plan, shape, DEVICE, OFF).time_us


def test_plans_built_for_one_cta_per_sm_keep_the_single_cta_variant():
    # TensorRT-LLM's plan counts one CTA per SM; the calibration's single-CTA variant stands.
    shape = get_shape("llama3-8b", kv_dtype="fp8_e4m3")
    plan = policies.get("trtllm").plan(np.asarray([7952 * 33, 7952] * 4), shape, DEVICE)
    assert plan.ctas_per_sm == 1 and not plan.is_persistent
    assert num_slots(plan, DEVICE, ON, shape) == 132
    assert simulate(plan, shape, DEVICE, ON).time_us == simulate(plan, shape, DEVICE, OFF).time_us


def test_persistent_grids_keep_the_calibrations_count():
    shape = get_shape("llama3-8b", kv_dtype="fp8_e4m3")
    plan = policies.get("fa3").plan(np.asarray([7952 * 33, 7952]), shape, DEVICE)
    assert plan.is_persistent
    assert configured_ctas_per_sm(plan, shape, DEVICE) is None
    assert simulate(plan, shape, DEVICE, ON).time_us == simulate(plan, shape, DEVICE, OFF).time_us


def test_config_residency_must_be_a_flag():
    with pytest.raises(ValueError, match="config_residency"):
        SimConstants(config_residency=1)


def test_the_law_gives_a_busier_launch_the_cap_at_its_own_count():
    # config_residency_law: the capped twin's three programs per SM each get the cap law's value
    # at three (cap x 3 ** -x), not the counted two's cap shared three ways; fewer than counted
    # (the one-per-SM entry) reads the same either way. The H200 file turns it on.
    law = dataclasses.replace(ON, config_residency_law=True)
    shape = get_shape("llama3-8b", kv_dtype="fp8_e4m3")
    plan = _plan(shape, [7952 * 33] + [7952] * 1, 7952)
    x = ON.residency_exponent
    assert x > 0
    law_cap = cta_rate_cap_bytes_per_s(plan, shape, DEVICE, law)
    assert law_cap == pytest.approx(ON.cta_rate_cap_bytes_per_s * 3 ** -x
                                    * (shape.kv_bytes_per_token_per_head / 512)
                                    ** ON.inflight_exponent)
    assert law_cap > cta_rate_cap_bytes_per_s(plan, shape, DEVICE, ON)
    one = _plan(get_shape("llama3-70b-tp8"), [32768] * 8, 2048)
    assert (cta_rate_cap_bytes_per_s(one, get_shape("llama3-70b-tp8"), DEVICE, law)
            == cta_rate_cap_bytes_per_s(one, get_shape("llama3-70b-tp8"), DEVICE, ON))
    h200 = sim_model("h200", "triton")
    assert h200.constants.config_residency_law is True
    assert sim_model("h100", "triton").constants.config_residency_law is False
    with pytest.raises(ValueError, match="config_residency_law"):
        SimConstants(config_residency_law="yes")


def test_the_fp8_head_dim_64_entry_runs_four_per_sm():
    # Its 120-register cap fits four programs per SM (thirty-first session); the table says so,
    # so the model gives its launches 528 slots on 132 SMs.
    shape = get_shape("hd64", kv_dtype="fp8_e4m3")
    plan = _plan(shape, [4096] * 64, 2048)
    assert configured_ctas_per_sm(plan, shape, DEVICE) == 4
    assert num_slots(plan, DEVICE, ON, shape) == 4 * DEVICE.sm_count

"""kvtune.studies.rules: which rule a study plans its configurations with, per backend."""

from __future__ import annotations

import pytest

from kvtune.harness.backends import flashinfer_plan as fip
from kvtune.harness.backends.simulator import SimulatorBackend
from kvtune.harness.device import device_model
from kvtune.kernels.baselines import FixedSplitPolicy
from kvtune.kernels.parametric import ParametricPolicy
from kvtune.kernels.plan import SplitParams
from kvtune.studies.rules import rule_mismatch, split_rule, trial_policy
from tests.studies.conftest import RestrictedBackend, sim_cases
from tests.studies.fake_flashinfer import OneChunkBackend

H200 = device_model("h200")
PARAMS = SplitParams(1024, 16, 128, 2, "static")


class RuleOnlyBackend(SimulatorBackend):
    """Declares the fixed-chunk rule but no split_policy of its own."""

    name = "rule-only"
    split_rule = "fixed-chunk"


class DisagreeingBackend(SimulatorBackend):
    """Measures one chunk per batch but claims the parametric rule: its table would lie."""

    name = "disagreeing"

    def split_policy(self, params):
        return fip.chunk_policy(params)


class UnknownRuleBackend(SimulatorBackend):
    name = "unknown-rule"
    split_rule = "equal-pieces"


def test_default_rule_is_parametric_and_plans_with_parametric_policy():
    for backend in (SimulatorBackend(H200), RestrictedBackend(H200)):
        assert split_rule(backend) == "parametric"
        assert trial_policy(backend, PARAMS) == ParametricPolicy(PARAMS)


def test_a_backends_split_policy_is_used_and_its_rule_reported():
    backend = OneChunkBackend(H200)
    assert split_rule(backend) == "fixed-chunk"
    assert trial_policy(backend, PARAMS) == fip.chunk_policy(PARAMS)
    # Without split_policy, the declared rule decides.
    assert trial_policy(RuleOnlyBackend(H200), PARAMS) == FixedSplitPolicy(1024, "static", 2)


def test_an_unknown_rule_is_refused_naming_the_attribute():
    expected = "backend.split_rule: 'equal-pieces' unknown; allowed: parametric, fixed-chunk"
    with pytest.raises(ValueError, match=expected):
        split_rule(UnknownRuleBackend(H200))


def test_rule_mismatch_finds_a_backend_whose_table_would_not_plan_what_it_measured():
    cases = sim_cases("skew80", "4,16")
    assert rule_mismatch(OneChunkBackend(H200), PARAMS, cases, H200) is None
    assert rule_mismatch(SimulatorBackend(H200), PARAMS, cases, H200) is None
    why = rule_mismatch(DisagreeingBackend(H200), PARAMS, cases, H200)
    assert why is not None and "rule 'parametric'" in why and cases[0].case_id in why

"""The search space: ranges, the device's occupancy cap, backend restrictions, feasibility."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

from kvtune.harness.device import device_model
from kvtune.kernels.plan import SCHEDULES, AttentionShape, SplitParams
from kvtune.studies.space import (
    SearchSpace,
    infeasible_reason,
    params_from_trial,
    project,
    space_for,
    suggest_params,
    trial_params,
)
from kvtune.studies.start_points import BASELINE_APPROXIMATIONS, start_points
from tests.studies.conftest import RestrictedBackend

H200 = device_model("h200")
SHAPE = AttentionShape()


def test_full_space_has_the_documented_ranges():
    space = space_for(H200, SHAPE)
    assert space.min_tokens_values() == tuple(2**k for k in range(7, 15))
    assert space.max_waves == (1, 16) and space.max_splits == (1, 128)
    assert space.ctas_per_sm == (1, 2, 3, 4, 8)
    assert space.schedules == SCHEDULES


def test_ctas_are_capped_by_the_kernels_occupancy_on_the_device():
    device = replace(H200, max_ctas_per_sm=3)
    assert space_for(device, SHAPE).ctas_per_sm == (1, 2, 3)
    params = SplitParams(ctas_per_sm=8)
    assert "occupancy" in infeasible_reason(params, space_for(device, SHAPE), device)


def test_min_tokens_are_multiples_of_a_large_page_size():
    shape = AttentionShape(page_size=128)
    space = space_for(H200, shape)
    assert all(v % 128 == 0 for v in space.min_tokens_values())
    wide = SearchSpace(page_size=128)
    assert "multiple of page_size" in infeasible_reason(
        SplitParams(min_tokens_per_cta=192), wide, H200)


def test_backend_declares_schedules_and_fixed_knobs():
    space = space_for(H200, SHAPE, RestrictedBackend(H200))
    assert space.schedules == ("static", "persistent-heavy-first")
    assert space.ctas_per_sm == (2,)
    assert "schedule" in infeasible_reason(SplitParams(ctas_per_sm=2, schedule="static-heavy-first"), space, H200)
    # Start points are projected into the narrowed space.
    for _, params in start_points(space):
        assert infeasible_reason(params, space, H200) is None


def test_overrides_narrow_and_bad_ones_name_the_knob():
    space = space_for(H200, SHAPE, overrides={"min_tokens_per_cta": "512..2048", "max_waves": "4",
                                              "schedule": "static", "ctas_per_sm": [1, 2]})
    assert space.min_tokens_values() == (512, 1024, 2048)
    assert space.max_waves == (4, 4) and space.schedules == ("static",) and space.ctas_per_sm == (1, 2)
    for overrides, word in [({"max_waves": "0..20"}, "max_waves"), ({"ctas_per_sm": "5"}, "ctas_per_sm"),
                            ({"schedule": "zigzag"}, "schedule"), ({"min_tokens_per_cta": "300"}, "powers of two"),
                            ({"warps": "4"}, "knob"), ({"max_splits": "9..3"}, "empty")]:
        with pytest.raises(ValueError, match=word):
            space_for(H200, SHAPE, overrides=overrides)


def test_suggested_params_stay_in_the_space_and_round_trip():
    space = space_for(H200, SHAPE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(200):
        trial = study.ask()
        params = suggest_params(trial, space)
        assert infeasible_reason(params, space, H200) is None
        assert params_from_trial(trial.params) == params
        assert trial_params(params) == trial.params
        study.tell(trial, 1.0)


def test_projection_finds_the_nearest_allowed_config():
    space = space_for(H200, SHAPE, overrides={"max_waves": "1..4", "ctas_per_sm": "1,4",
                                              "schedule": "static,persistent-round-robin"})
    p = project(SplitParams(min_tokens_per_cta=2500, max_waves=16, max_splits=500 // 4,
                            ctas_per_sm=3, schedule="persistent-heavy-first"), space)
    assert p == SplitParams(2048, 4, 125, 4, "persistent-round-robin")


def test_start_points_approximate_each_baseline_without_duplicates():
    points = start_points(space_for(H200, SHAPE))
    assert [name for name, _ in points] == list(BASELINE_APPROXIMATIONS)
    assert len({p for _, p in points}) == len(points)
    narrow = space_for(H200, SHAPE, overrides={"min_tokens_per_cta": "2048", "max_waves": "16",
                                               "max_splits": "32", "ctas_per_sm": "1",
                                               "schedule": "static"})
    assert len(start_points(narrow)) == 1


def test_grid_is_small_when_the_space_is():
    space = space_for(H200, SHAPE, overrides={"min_tokens_per_cta": "256..512", "max_waves": "1..2",
                                              "max_splits": "16..32", "ctas_per_sm": "1,2",
                                              "schedule": "static,persistent-heavy-first"})
    grid = space.grid()
    assert grid["max_splits"] == [16, 32]
    n = 1
    for values in grid.values():
        n *= len(values)
    assert n == 32

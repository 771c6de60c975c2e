"""The objective: geometric mean of latency / best baseline, pruning, failures that never win."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from kvtune.harness.backends.simulator import SimulatorBackend
from kvtune.harness.device import device_model
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape, SplitParams
from kvtune.studies.objective import (
    START_POINT_ATTR,
    BucketObjective,
    ConfigFailed,
    geomean,
    measure_baselines,
    score,
)
from kvtune.studies.records import RowRecorder
from kvtune.studies.space import space_for, trial_params
from kvtune.studies.storage import FAIL_ATTR
from tests.studies.conftest import WrongOutputBackend, sim_cases, sim_runner

H200 = device_model("h200")


class TableRunner:
    """A runner whose latencies come from a table: (case_id, policy key) -> us."""

    def __init__(self, table):
        self.table = table
        self.device = H200
        self.backend = SimulatorBackend(H200)
        self.calls = []

    def measure_one(self, case, policy, series=None):
        key = policy.params()["min_tokens_per_cta"] if policy.name == "parametric" else policy.name
        self.calls.append((case.case_id, key))
        plan = policy.plan(case.batch.kv_lens, case.batch.shape, self.device)
        return {"status": "ok", "latency_us": self.table[case.case_id, key], "case_id": case.case_id}, plan


def two_cases():
    return sim_cases(batch_sizes="4,8")


def test_geomean_and_score_by_hand():
    assert geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert geomean([1, 2, 4]) == pytest.approx(2.0)
    assert math.isnan(geomean([]))
    baselines = {"a": {"x": 100.0, "y": 80.0}, "b": {"x": 50.0, "y": 200.0}}
    mean, worst = score({"a": 40.0, "b": 100.0}, baselines, ["a", "b"])
    assert mean == pytest.approx(math.sqrt(40 / 80 * 100 / 50)) and worst == pytest.approx(2.0)
    with pytest.raises(ValueError):
        geomean([1.0, 0.0])


def test_baselines_measured_once_and_recorded():
    a, b = two_cases()
    table = {(a.case_id, "fa3"): 100.0, (a.case_id, "trtllm-oversub"): 80.0,
             (b.case_id, "fa3"): 50.0, (b.case_id, "trtllm-oversub"): 200.0}
    runner = TableRunner(table)
    recorder = RowRecorder(None)
    base = [("fa3", policies.get("fa3")), ("trtllm-oversub", policies.get("trtllm-oversub"))]
    got = measure_baselines(runner, [a, b], base, recorder, study_name="s/1-8", bucket="1-8")
    assert got == {a.case_id: {"fa3": 100.0, "trtllm-oversub": 80.0},
                   b.case_id: {"fa3": 50.0, "trtllm-oversub": 200.0}}
    assert [r["phase"] for r in recorder.rows] == ["baseline"] * 4
    runner.calls.clear()
    again = measure_baselines(runner, [a, b], base, recorder, study_name="s/1-8", bucket="1-8", known=got)
    assert again == got and runner.calls == []


def test_objective_is_the_geomean_ratio_with_running_intermediate_values():
    a, b = two_cases()
    baselines = {a.case_id: {"x": 100.0, "y": 80.0}, b.case_id: {"x": 50.0, "y": 200.0}}
    runner = TableRunner({(a.case_id, 1024): 40.0, (b.case_id, 1024): 100.0})
    space = space_for(H200, AttentionShape())
    recorder = RowRecorder(None)
    objective = BucketObjective(runner, [a, b], baselines, space, recorder, "s/1-8", "1-8")
    study = optuna.create_study()
    study.enqueue_trial(trial_params(SplitParams(min_tokens_per_cta=1024)))
    study.optimize(objective, n_trials=1)
    t = study.trials[0]
    assert t.value == pytest.approx(1.0)  # ratios 40/80 = 0.5 and 100/50 = 2
    assert t.intermediate_values == {0: pytest.approx(0.5), 1: pytest.approx(1.0)}
    assert t.user_attrs["case_us"] == {a.case_id: 40.0, b.case_id: 100.0}
    assert t.user_attrs["worst"] == pytest.approx(2.0)
    assert [(r["phase"], r["trial"]) for r in recorder.rows] == [("trial", 0), ("trial", 0)]
    multi = BucketObjective(runner, [a, b], baselines, space, recorder, "s/1-8", "1-8", multi_objective=True)
    study2 = optuna.create_study(directions=["minimize", "minimize"])
    study2.enqueue_trial(trial_params(SplitParams(min_tokens_per_cta=1024)))
    study2.optimize(multi, n_trials=1)
    assert study2.trials[0].values == [pytest.approx(1.0), pytest.approx(2.0)]


class AlwaysPrune(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return True


def test_start_points_are_never_pruned_others_are():
    cases = sim_cases(batch_sizes="4,8")
    runner = sim_runner()
    baselines = {c.case_id: {"fa3": 1000.0} for c in cases}
    space = space_for(H200, AttentionShape())
    objective = BucketObjective(runner, cases, baselines, space, RowRecorder(None), "s/1-8", "1-8")
    study = optuna.create_study(pruner=AlwaysPrune(), sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(trial_params(SplitParams()), user_attrs={START_POINT_ATTR: "fa3"})
    study.optimize(objective, n_trials=4)
    states = [t.state for t in study.trials]
    assert states[0] == optuna.trial.TrialState.COMPLETE
    assert states[1:] == [optuna.trial.TrialState.PRUNED] * 3
    assert all(len(t.intermediate_values) == 1 for t in study.trials[1:])


def test_wrong_output_fails_the_trial_is_never_timed_and_never_wins():
    device = H200
    backend = WrongOutputBackend(device)
    runner = sim_runner(backend=backend)
    cases = sim_cases(batch_sizes="4,8")
    baselines = {c.case_id: {"fa3": 1000.0} for c in cases}
    space = space_for(device, AttentionShape())
    recorder = RowRecorder(None)
    failures = []
    objective = BucketObjective(runner, cases, baselines, space, recorder, "s/1-8", "1-8",
                                on_fail=lambda n, why: failures.append((n, why)))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    study.enqueue_trial(trial_params(SplitParams(schedule="static-heavy-first")))
    study.optimize(objective, n_trials=16, catch=(ConfigFailed,))
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed and all(t.params["schedule"] == "static-heavy-first" for t in failed)
    assert all("output wrong" in t.user_attrs[FAIL_ATTR] for t in failed)
    assert {n for n, _ in failures} == {t.number for t in failed}
    assert study.best_trial.params["schedule"] != "static-heavy-first"
    assert backend.timed_bad == 0
    bad_rows = [r for r in recorder.rows if r["schedule"] == "static-heavy-first"]
    assert bad_rows and all(r["status"] == "failed" and np.isnan(r["latency_us"]) for r in bad_rows)


class NoPersistentBackend(SimulatorBackend):
    name = "no-persistent"

    def __init__(self, device):
        super().__init__(device)
        self.measured = 0

    def unsupported_reason(self, plan):
        return "no persistent kernel" if plan.is_persistent else None

    def measure(self, batch, plan):
        self.measured += 1
        return super().measure(batch, plan)


@pytest.mark.parametrize("params, why", [
    (SplitParams(ctas_per_sm=8), "infeasible"),                # outside the study's space
    (SplitParams(max_waves=40), "max_waves 40 outside 1..16"),   # an out-of-range resumed point
    (SplitParams(schedule="persistent-heavy-first", ctas_per_sm=1), "cannot run it"),  # backend
])
def test_infeasible_config_fails_before_anything_is_measured(params, why):
    backend = NoPersistentBackend(H200)
    runner = sim_runner(backend=backend)
    cases = sim_cases(batch_sizes="4,8")
    space = space_for(H200, AttentionShape(), overrides={"ctas_per_sm": "1,2"})
    recorder = RowRecorder(None)
    objective = BucketObjective(runner, cases, {c.case_id: {"fa3": 100.0} for c in cases}, space,
                                recorder, "s/1-8", "1-8")
    study = optuna.create_study()
    study.enqueue_trial(trial_params(params))
    study.optimize(objective, n_trials=1, catch=(ConfigFailed,))
    t = study.trials[0]
    assert t.state == optuna.trial.TrialState.FAIL
    assert t.user_attrs[FAIL_ATTR].startswith("infeasible") and why in t.user_attrs[FAIL_ATTR]
    assert recorder.rows == [] and backend.measured == 0


def test_a_trial_that_raises_fails_with_one_line_and_the_study_goes_on():
    class Exploding:
        device = H200
        backend = SimulatorBackend(H200)

        def measure_one(self, case, policy, series=None):
            raise RuntimeError("driver fell over\nsecond line")

    cases = sim_cases(batch_sizes="4")
    objective = BucketObjective(Exploding(), cases, {cases[0].case_id: {"fa3": 100.0}},
                                space_for(H200, AttentionShape()), RowRecorder(None), "s/1-8", "1-8")
    study = optuna.create_study()
    study.optimize(objective, n_trials=2, catch=(ConfigFailed,))
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2
    why = study.trials[0].user_attrs[FAIL_ATTR]
    assert "RuntimeError" in why and "\n" not in why

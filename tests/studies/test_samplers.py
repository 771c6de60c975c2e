"""Samplers by name: each runs, the seeded ones repeat themselves, missing packages are one line."""

from __future__ import annotations

import importlib.util

import optuna
import pytest

from kvtune.harness.device import device_model
from kvtune.kernels.plan import AttentionShape
from kvtune.studies.objective import BucketObjective, ConfigFailed
from kvtune.studies.records import RowRecorder
from kvtune.studies.samplers import SAMPLERS, check_sampler, make_pruner, make_sampler, worker_seed
from kvtune.studies.space import space_for
from tests.studies.conftest import sim_cases, sim_runner

H200 = device_model("h200")
NEEDS = {"cmaes": "cmaes", "gp": "scipy"}


def run_study(name, seed, n_trials, multi=False):
    cases = sim_cases(batch_sizes="4")
    space = space_for(H200, AttentionShape(), overrides={"min_tokens_per_cta": "128..1024"})
    objective = BucketObjective(sim_runner(), cases, {cases[0].case_id: {"fa3": 50.0}}, space,
                                RowRecorder(None), "s/1-8", "1-8", multi_objective=multi)
    sampler = make_sampler(name, seed=seed, space=space, n_trials=n_trials, n_startup=3)
    directions = ["minimize", "minimize"] if multi else ["minimize"]
    study = optuna.create_study(sampler=sampler, directions=directions)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study.optimize(objective, n_trials=n_trials, catch=(ConfigFailed,))
    return study


@pytest.mark.parametrize("name", SAMPLERS)
def test_every_sampler_runs_or_names_its_missing_package(name):
    package = NEEDS.get(name)
    if package and importlib.util.find_spec(package) is None:
        with pytest.raises(ValueError, match=f"sampler: {name} needs the package {package}"):
            check_sampler(name)
        return
    study = run_study(name, seed=0, n_trials=5, multi=(name == "nsga2"))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 5


@pytest.mark.parametrize("name", ["tpe", "random"])
def test_seeded_samplers_repeat_their_draws(name):
    first = [t.params for t in run_study(name, seed=7, n_trials=8).trials]
    again = [t.params for t in run_study(name, seed=7, n_trials=8).trials]
    other = [t.params for t in run_study(name, seed=8, n_trials=8).trials]
    assert first == again
    assert first != other


def test_tpe_is_multivariate_grouped_and_lies_only_in_parallel():
    space = space_for(H200, AttentionShape())
    solo = make_sampler("tpe", seed=0, space=space)
    shared = make_sampler("tpe", seed=0, space=space, parallel=True)
    assert solo._multivariate and solo._group and not solo._constant_liar
    assert shared._constant_liar


def test_unknown_sampler_and_pruner_are_one_line():
    with pytest.raises(ValueError, match="sampler: 'anneal' unknown; allowed: tpe, random"):
        check_sampler("anneal")
    with pytest.raises(ValueError, match="pruner: 'hyper' unknown; allowed: median, none"):
        make_pruner("hyper")


def test_worker_seeds_differ_but_a_fresh_run_keeps_its_seed():
    assert worker_seed(5, 0, 0) == 5
    seeds = {worker_seed(5, w, n) for w in range(3) for n in (0, 10)}
    assert len(seeds) == 6

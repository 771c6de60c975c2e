"""A whole `kvtune tune` run in this process: results on disk and in the study, start points,
the result contract (studies/result.py) and the tuned policy built from it."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pandas as pd
import pytest

from kvtune.harness.device import device_model
from kvtune.harness.store import load_manifest
from kvtune.kernels import policies
from kvtune.kernels.parametric import BucketedPolicy
from kvtune.studies.objective import START_POINT_ATTR
from kvtune.studies.result import RESULT_ATTR, RUN_ATTR, BucketResult, load_tuning_result
from kvtune.studies.space import params_from_trial, space_for
from kvtune.studies.start_points import start_points
from kvtune.studies.storage import open_storage
from kvtune.studies.tune import run_tune
from tests.studies.conftest import tiny_config


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tune")
    config = tiny_config(tmp, trials=20, sampler="tpe", oracle=True)
    run_dir = run_tune(config, command="kvtune tune (test)")
    return config, run_dir


def test_run_folder_is_complete_with_every_phase(tiny_run):
    _, run_dir = tiny_run
    manifest = load_manifest(run_dir)
    assert manifest["kind"] == "tune" and manifest["status"] == "complete"
    assert manifest["studies"] == ["t/1-8", "t/9-32"] and manifest["simulated"] is True
    assert manifest["storage"].startswith("sqlite:///") and manifest["sampler"] == "tpe"
    rows = pd.read_parquet(run_dir / "measurements.parquet")
    assert set(rows["phase"]) == {"baseline", "trial", "finalist", "oracle", "validation"}
    assert set(rows["bucket"]) == {"1-8", "9-32"}
    trial_rows = rows[rows["phase"] == "trial"]
    assert (trial_rows["trial"] >= 0).all() and (rows[rows["phase"] != "trial"]["trial"] == -1).all()
    assert len(rows[rows["phase"] == "baseline"]) == 2 * 4  # 2 cases x 4 baselines, once
    assert not list(run_dir.glob("measurements.worker-*"))


def test_tuning_json_round_trips_and_matches_the_study_attributes(tiny_run):
    config, run_dir = tiny_run
    result = load_tuning_result(run_dir)
    assert result.study == "t" and result.simulated and result.kernel == "simulated:h200"
    assert [b.name for b in result.buckets] == ["1-8", "9-32"]
    assert json.loads(json.dumps(result.to_dict())) == result.to_dict()
    assert type(result).from_dict(result.to_dict()) == result
    storage = open_storage(f"sqlite:///{config.out}/optuna.db")
    for b in result.buckets:
        study = optuna.load_study(study_name=b.study_name, storage=storage)
        assert BucketResult.from_dict(study.user_attrs[RESULT_ATTR]) == b
        assert study.user_attrs[RUN_ATTR] == result.run_fields()
        assert b.n_trials == 20 and len(b.cases) == 1 and len(b.finalists) == 3
        assert sum(f.chosen for f in b.finalists) == 1
        assert b.regret_geomean is not None and b.regret_geomean >= 1 - 1e-9
    assert result.provenance["storage"] == f"sqlite:///{config.out}/optuna.db"
    assert result.provenance["run_id"] == run_dir.name
    from kvtune.kernels.fingerprint import decode_kernel_sha256

    # The kernel the splits were measured with, for `kvtune bench` to compare (simulated here).
    assert result.provenance["decode_kernel_sha256"] == decode_kernel_sha256()


def plan_shape():
    from kvtune.kernels.plan import AttentionShape

    return AttentionShape()


def test_tuned_policy_built_from_the_result_plans_each_bucket_with_its_params(tiny_run):
    _, run_dir = tiny_run
    result = load_tuning_result(run_dir)
    tuned = policies.get("tuned", buckets=result.bucket_table())
    assert isinstance(tuned, BucketedPolicy)
    device = device_model("h200")
    for b in result.buckets:
        kv = np.full(b.min_batch, 4096)
        plan = tuned.plan(kv, plan_shape(), device)
        direct = policies.get("parametric", **b.params.to_dict()).plan(kv, plan_shape(), device)
        assert np.array_equal(plan.splits, direct.splits) and plan.schedule == direct.schedule
        assert plan.notes["bucket_min_batch"] == b.min_batch


def test_start_points_were_enqueued_and_the_study_never_ends_worse(tiny_run):
    config, run_dir = tiny_run
    result = load_tuning_result(run_dir)
    storage = open_storage(f"sqlite:///{config.out}/optuna.db")
    space = space_for(device_model("h200"), plan_shape())
    expected = {p for _, p in start_points(space)}
    for b in result.buckets:
        study = optuna.load_study(study_name=b.study_name, storage=storage)
        starts = [t for t in study.trials if START_POINT_ATTR in t.user_attrs]
        assert {params_from_trial(t.params) for t in starts} == expected
        assert [t.number for t in starts] == list(range(len(starts)))  # before any sampled one
        assert all(t.state == optuna.trial.TrialState.COMPLETE for t in starts)
        assert b.score <= min(t.value for t in starts) + 1e-12
        summary = json.loads((run_dir / "summary.json").read_text())
        entry = next(x for x in summary["buckets"] if x["name"] == b.name)
        assert set(entry["speedup"]) == {"flashinfer-tensor-core", "fa3", "trtllm-oversub", "fixed-split"}
        assert entry["finalists"][0]["median_us"] > 0 and entry["regret"] == b.regret_geomean


def test_report_names_buckets_speedups_finalists_and_regret(tiny_run, capsys):
    # The module fixture printed before capture; run the formatting again from the files.
    from kvtune.studies.report import build_summary, format_report

    _, run_dir = tiny_run
    result = load_tuning_result(run_dir)
    text = format_report(result, build_summary(result))
    for word in ("bucket 1-8", "bucket 9-32", "speedup of tuned over", "fa3", "finalists",
                 "spread", "regret (tuned / oracle)", "simulated"):
        assert word in text


def test_multi_objective_reports_a_pareto_front(tmp_path):
    config = tiny_config(tmp_path, objective="mean,worst", sampler=None, trials=8,
                         batch_sizes="4", distribution="2x40")
    run_dir = run_tune(config)
    result = load_tuning_result(run_dir)
    (bucket,) = result.buckets
    assert bucket.pareto_front and all({"trial", "params", "geomean", "worst"} <= set(e) for e in bucket.pareto_front)
    assert load_manifest(run_dir)["sampler"] == "nsga2"
    geo = [e["geomean"] for e in bucket.pareto_front]
    assert geo == sorted(geo)


@pytest.mark.slow
def test_prod_mix_tuned_never_loses_to_the_engine_and_stays_near_every_baseline(tmp_path):
    """The acceptance command (prod-mix, 40 trials, seed 0, simulated h200). Every bucket ships
    either the engine's own planner (defer: bucket 1-8, where the adaptive rule plans what
    FlashInfer plans) or a rule that beats it in geomean and is never more than 2% slower than it
    on a training case (the finalists' first test, issue 12); against the other baselines it may
    give up a little where every faster finalist was slower than the engine's planner on some
    case (a fixed 2048-token chunk on 33-128: about 5% in geomean), never more than 10%."""
    from kvtune.studies.config import TuneConfig
    from kvtune.studies.report import build_summary

    config = TuneConfig(study="demo", suite="prod-mix", backend="simulator", device_model="h200",
                        trials=40, seed=0, out=str(tmp_path), no_progress=True)
    result = load_tuning_result(run_tune(config))
    summary = build_summary(result)
    assert [b["name"] for b in summary["buckets"]] == ["1-8", "9-32", "33-128", "129-512"]
    for b in summary["buckets"]:
        if b["family"] == "defer":
            # What ships is the engine's own planner: its validation is the default's.
            assert b["validation"]["vs_default"] == {"geomean": 1.0, "worst": 1.0}, b["name"]
            continue
        engine = b["speedup"]["flashinfer-tensor-core"]
        assert engine["geomean"] >= 1.0 - 1e-12 and engine["worst"] >= 1 / 1.02, (b["name"], engine)
        for baseline, speedup in b["speedup"].items():
            assert speedup["geomean"] >= 0.9, (b["name"], baseline, speedup)

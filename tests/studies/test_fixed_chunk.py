"""`kvtune tune` and `kvtune export` on a backend that runs one chunk per batch (flashinfer-like).

The backend (tests/studies/fake_flashinfer.py) is the simulator restricted to what FlashInfer's
batch decode can express, with the real flashinfer backend's study hooks. The study must plan
every configuration with the backend's rule (no trial unsupported), record the fixed-chunk rule,
and export a heuristic whose flashinfer target and planners reproduce exactly what was measured.
"""

from __future__ import annotations

import json
import math

import numpy as np
import optuna
import pandas as pd
import pytest

from kvtune.kernels import tuned_planner
from kvtune.studies import export
from kvtune.harness.backends import BACKEND_MODULES
from kvtune.harness.backends import flashinfer_plan as fip
from kvtune.cli import main
from kvtune.harness.device import device_model
from kvtune.harness.runner import CaseRun
from kvtune.harness.store import list_runs
from kvtune.kernels import policies
from kvtune.kernels.baselines import FixedSplitPolicy
from kvtune.kernels.baselines_flashinfer import FlashInferTensorCorePolicy
from kvtune.kernels.parametric import MakespanChunkPolicy
from kvtune.kernels.parametric import ParametricPolicy
from kvtune.kernels.plan import AttentionShape, SplitParams
from kvtune.studies.config import TuneConfig
from kvtune.studies.report import build_summary, format_report
from kvtune.studies.result import load_tuning_result
from kvtune.studies.rules import rule_mismatch, split_rule, trial_policy
from kvtune.studies.space import params_from_trial
from kvtune.studies.storage import FAIL_ATTR, open_storage
from kvtune.studies.study import validate
from tests.studies.conftest import sim_runner
from tests.studies.fake_flashinfer import OneChunkBackend

H200 = device_model("h200")
SETTINGS = {"study": "fi", "distribution": "skew80", "batch_sizes": "4,16",
            "param": ("total_tokens=65536",), "backend": "one-chunk", "device_model": "h200",
            "trials": 6, "sampler": "random", "finalists": 3, "finalist_rounds": 1,
            "no_progress": True}


def argv(out) -> list[str]:
    s = SETTINGS
    return ["tune", "--study", s["study"], "--distribution", s["distribution"],
            "--batch-sizes", s["batch_sizes"], "--param", s["param"][0], "--backend", s["backend"],
            "--device-model", s["device_model"], "--trials", str(s["trials"]),
            "--sampler", s["sampler"], "--finalists", str(s["finalists"]),
            "--finalist-rounds", str(s["finalist_rounds"]), "--no-progress", "--out", str(out)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(run folder, exported heuristic path, the run's cases) of a 6-trial two-bucket study."""
    tmp = tmp_path_factory.mktemp("one-chunk")
    out = tmp / "results"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(BACKEND_MODULES, "one-chunk", "tests.studies.fake_flashinfer")
        assert main(argv(out)) == 0
        (only,) = list_runs(out)
        run_dir = out / only["run_id"]
        path = tmp / "tuned.json"
        assert main(["export", "--run", str(run_dir), "-o", str(path)]) == 0
        _, suite, _, _ = validate(TuneConfig(**SETTINGS, out=str(out)))
    cases = [CaseRun(c.case_id, c.batch()) for c in suite.cases]
    return run_dir, path, cases, out


def test_no_trial_or_finalist_is_unsupported(run):
    run_dir, _, _, out = run
    rows = pd.read_parquet(run_dir / "measurements.parquet")
    measured = rows[rows["phase"].isin(["trial", "finalist"])]
    assert len(measured) > 0 and (measured["status"] == "ok").all()
    # FlashInfer's fixed_split_size, no other: a fixed chunk, or one chosen per batch (makespan)
    assert set(measured["policy"]) <= {"fixed-split", "makespan-chunk"}
    storage = open_storage(f"sqlite:///{out}/optuna.db")
    for name in ("fi/1-8", "fi/9-32"):
        trials = optuna.load_study(study_name=name, storage=storage).trials
        assert len(trials) >= SETTINGS["trials"]
        assert all(t.state != optuna.trial.TrialState.FAIL for t in trials), name
        assert not [t.user_attrs[FAIL_ATTR] for t in trials if FAIL_ATTR in t.user_attrs]


def test_without_the_backends_rule_the_same_configs_would_be_unsupported(run):
    """What the study avoids: the parametric rule's equal pieces are no fixed chunk."""
    _, _, cases, out = run
    storage = open_storage(f"sqlite:///{out}/optuna.db")
    study = optuna.load_study(study_name="fi/1-8", storage=storage)
    backend = OneChunkBackend(H200)
    tried = {params_from_trial(t.params) for t in study.trials}
    def parametric_refused(p):
        return any(backend.unsupported_reason(
            ParametricPolicy(p).plan(c.batch.kv_lens, c.batch.shape, H200)) for c in cases)

    refused = [p for p in tried if parametric_refused(p)]
    assert refused and "chunk" in backend.refused[0]
    for p in tried:  # ... while the backend's own rule always passes
        for c in cases:
            plan = trial_policy(backend, p).plan(c.batch.kv_lens, c.batch.shape, H200)
            assert fip.unsupported_reason(plan) is None


def test_the_result_records_the_fixed_chunk_rule(run):
    run_dir, _, cases, _ = run
    result = load_tuning_result(run_dir)
    assert result.rule == "fixed-chunk" and result.backend == "one-chunk"
    assert json.loads((run_dir / "tuning.json").read_text())["rule"] == "fixed-chunk"
    assert json.loads((run_dir / "summary.json").read_text())["rule"] == "fixed-chunk"
    assert "split rule: fixed-chunk" in format_report(result, build_summary(result))
    backend = OneChunkBackend(H200)
    assert split_rule(backend) == "fixed-chunk"
    for b in result.buckets:
        p = b.params
        if b.family in ("", "fixed-chunk"):
            # The study's pinned knobs: only the chunk was searched.
            assert (p.max_waves, p.max_splits, p.ctas_per_sm, p.schedule) == (16, 128, 2, "static")
            assert rule_mismatch(backend, b.params, cases, H200) is None
        else:  # a per-batch finalist or the engine default won the bucket (issue 12's families)
            assert b.family in ("makespan", "defer"), b.family
    assert result.tuned_policy() == policies.get("tuned", **result.tuned_params())
    assert result.tuned_policy().rule == "fixed-chunk"


def test_export_gives_a_fixed_split_size_for_every_bucket(run):
    run_dir, path, _, _ = run
    doc = json.loads(path.read_text())
    result = load_tuning_result(run_dir)
    assert doc["schema_version"] == "1.4" and doc["rule"] == "fixed-chunk"
    page = doc["shape"]["page_size"]
    targets = doc["targets"]["flashinfer"]["buckets"]
    assert len(targets) == len(doc["buckets"]) == len(result.buckets)
    for bucket, fi in zip(doc["buckets"], targets):
        assert fi["expressible"] and fi["disable_split_kv"] is False
        if bucket.get("family") == "defer":  # validation kept FlashInfer's own planner here
            assert fi["fixed_split_size_pages"] is None
            continue
        if bucket.get("family") == "makespan":  # the chunk is chosen per batch at plan time
            assert fi["fixed_split_size_pages"] is None and "makespan" in fi["note"]
            continue
        chunk_tokens = bucket["params"]["min_tokens_per_cta"]
        assert fi["fixed_split_size_pages"] == math.ceil(chunk_tokens / page)
        assert fi["workspace"]["float_workspace_bytes"] >= 0 and "fixed-chunk" in fi["note"]


def _params_for(doc: dict, batch: int) -> SplitParams:
    return SplitParams(**doc["buckets"][tuned_planner.select_bucket(doc, batch)]["params"])


def test_loaded_heuristic_and_plan_splits_give_exactly_the_fixed_split_plans(run):
    _, path, _, _ = run
    doc = tuned_planner.load_document(path)
    shape = AttentionShape(**doc["shape"])
    policy = export.load_heuristic(path, shape=shape)
    assert policy.policy.rule == "fixed-chunk"
    pages = {(b["min_batch"], b["max_batch"]): b["fixed_split_size_pages"]
             for b in json.loads(path.read_text())["targets"]["flashinfer"]["buckets"]}
    rng = np.random.default_rng(4)
    for _ in range(200):
        kv = rng.integers(1, 300_000, int(rng.integers(1, 48)))
        params = _params_for(doc, len(kv))
        got = policy.plan(kv, shape, H200)
        if doc["buckets"][tuned_planner.select_bucket(doc, len(kv))].get("family") == "defer":
            # Validation kept FlashInfer's own planner for this bucket: it plans exactly so.
            own = FlashInferTensorCorePolicy().plan(kv, shape, H200)
            assert np.array_equal(got.splits, own.splits) and got.grid_size == own.grid_size
            assert tuned_planner.plan_pieces(doc, kv, H200.sm_count).deferred
            assert tuned_planner.fixed_split_size(doc, kv, H200.sm_count) is None
            continue
        bucket = doc["buckets"][tuned_planner.select_bucket(doc, len(kv))]
        if bucket.get("family") == "makespan":  # its chunk is chosen for this batch
            want = MakespanChunkPolicy(params, bucket["max_chunk_tokens"],
                                       bucket["piece_cost_tokens"]).plan(kv, shape, H200)
            assert np.array_equal(got.splits, want.splits)
            assert np.array_equal(tuned_planner.plan_splits(doc, kv, H200.sm_count), got.splits)
            continue
        want = FixedSplitPolicy(chunk_tokens=params.min_tokens_per_cta).plan(kv, shape, H200)
        measured = fip.chunk_policy(params).plan(kv, shape, H200)  # what the trials ran
        for attr in ("splits", "work_request", "work_split", "work_kv_start", "work_kv_end"):
            assert np.array_equal(getattr(got, attr), getattr(want, attr)), attr
            assert np.array_equal(getattr(got, attr), getattr(measured, attr)), attr
        assert got.schedule == "static" and got.ctas_per_sm == measured.ctas_per_sm
        assert np.array_equal(tuned_planner.plan_splits(doc, kv, H200.sm_count), got.splits)
        assert np.array_equal(export.plan_splits(policy, kv, H200.sm_count), got.splits)
        pieces = tuned_planner.plan_pieces(doc, kv, H200.sm_count)
        chunk = -(-params.min_tokens_per_cta // shape.page_size) * shape.page_size
        assert pieces.rule == "fixed-chunk" and pieces.chunk_tokens == chunk
        assert (pieces.piece_tokens[got.splits > 1] == chunk).all()
        # FlashInfer given the file's fixed_split_size cuts the same pieces.
        fi_pages = next(p for (lo, hi), p in pages.items() if lo <= min(len(kv), 32) <= hi)
        flashinfer = FlashInferTensorCorePolicy(fixed_split_size=fi_pages).plan(kv, shape, H200)
        assert np.array_equal(flashinfer.splits, got.splits)


def test_the_exported_table_times_exactly_like_the_winning_trials(run):
    run_dir, path, cases, _ = run
    result = load_tuning_result(run_dir)
    policy = export.load_heuristic(path)
    # The study opened the backend with the h200 simulator model (its shipped calibration).
    from kvtune.harness.device import sim_model

    runner = sim_runner(backend=OneChunkBackend(H200, sim_model("h200").constants))
    # A deferred bucket ships FlashInfer's own planner; its evidence is the tuned rule's.
    evidence = {c.case_id: c.tuned_us for b in result.buckets for c in b.cases if not b.deferred}
    for case in cases:
        if case.case_id not in evidence:
            continue
        row, _ = runner.measure_one(case, policy)
        assert row["status"] == "ok"
        assert row["latency_us"] == pytest.approx(evidence[case.case_id], rel=1e-12)


def test_the_dashboard_names_the_fixed_chunk_winners_tuned(run):
    from kvtune.dashboard.frames import mark_tuned

    run_dir, _, _, _ = run
    result = load_tuning_result(run_dir)
    raw = pd.read_parquet(run_dir / "measurements.parquet")
    marked = mark_tuned(raw, result)
    tuned = marked[marked["policy"] == "tuned"]
    assert len(marked) == len(raw) and (tuned["phase"] != "baseline").all()
    if all(b.family == "defer" for b in result.buckets):
        # FlashInfer's own planner won every bucket on validation (it picks a chunk per batch):
        # nothing the study measured ships, so no row may be called `tuned`.
        assert tuned.empty
        return
    for b in result.buckets:
        if b.family == "defer":  # the engine's own planner ships: no trial row is its winner
            continue
        assert tuned["batch_size"].between(b.min_batch, b.max_batch).any(), b.name
        rows = tuned.index[tuned["batch_size"].between(b.min_batch, b.max_batch)]
        if b.family in ("", "fixed-chunk"):  # one chunk per bucket; makespan ones vary per batch
            chunks = {json.loads(p)["chunk_tokens"] for p in raw.loc[rows, "policy_params"]}
            assert chunks == {b.params.min_tokens_per_cta}
    rebuilt = policies.get("tuned", **json.loads(tuned["policy_params"].iloc[0]))
    assert rebuilt == result.tuned_policy()
    baseline = marked[marked["phase"] == "baseline"]
    assert "tuned" not in set(baseline["policy"])

"""Fixture results folders for the dashboard tests, made by the project's own commands.

`results_dir` (session): two simulator bench runs on the h200 model (skew80 with four policies;
uniform with two fixed-split sizes, so one policy name appears with two parameter sets), a skew80
bench run on the h100 model (two devices to compare), a real `kvtune tune --oracle` run (trial and
oracle configurations among its rows), a `kvtune tune --objective mean,worst` run (a
multi-objective study), their SQLite storage, and two studies written straight with Optuna into
that storage: one with the documented user attributes (`kvtune_result`, `kvtune_run`) and no run
folder, one without them (a study still being tuned).
`messy_results`: a corrupt parquet, a run still in progress, a failed run, an unreadable manifest,
a corrupt tuning.json and a corrupt optuna.db.
`hostile_results`: a run whose manifest, policy names and study name hold Markdown images and
links (what a results folder made by someone else may hold).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

DEVICE_MODEL = "h200"
SIM = ["--backend", "simulator", "--device-model", DEVICE_MODEL, "--no-progress"]


def kvtune(argv: list[str]) -> None:
    from kvtune.cli import main

    code = main(argv)
    assert code == 0, f"kvtune {' '.join(argv)} exited {code}"


def run_dirs(root: Path, kind: str) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and f"-{kind}-" in p.name)


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dash-results")
    kvtune(
        [
            "bench",
            "--distribution",
            "skew80",
            "--batch-sizes",
            "4,16,32,33,48,64",
            "--policies",
            "flashinfer-tensor-core,fa3,trtllm-oversub,no-split",
            "--out",
            str(root),
            *SIM,
        ]
    )
    kvtune(
        [
            "bench",
            "--distribution",
            "uniform",
            "--batch-sizes",
            "4,32,48",
            "--policies",
            "flashinfer-tensor-core,fixed-split:chunk_tokens=4096,fixed-split:chunk_tokens=1024",
            "--out",
            str(root),
            *SIM,
        ]
    )
    kvtune(
        [
            "bench",
            "--distribution",
            "skew80",
            "--batch-sizes",
            "4,16,32,33,48,64",
            "--policies",
            "flashinfer-tensor-core,fa3",
            "--out",
            str(root),
            "--backend",
            "simulator",
            "--device-model",
            "h100",
            "--no-progress",
        ]
    )
    storage = f"sqlite:///{root / 'optuna.db'}"
    kvtune(
        [
            "tune",
            "--oracle",
            "--study",
            "dash",
            "--distribution",
            "skew80",
            "--batch-sizes",
            "4,8,32,48",
            "--buckets",
            "1-8,9-64",
            "--trials",
            "4",
            "--finalists",
            "2",
            "--finalist-rounds",
            "1",
            "--storage",
            storage,
            "--out",
            str(root),
            "--seed",
            "0",
            *SIM,
        ]
    )
    kvtune(
        [
            "tune",
            "--study",
            "multi",
            "--objective",
            "mean,worst",
            "--distribution",
            "skew80",
            "--batch-sizes",
            "4,32",
            "--buckets",
            "1-64",
            "--trials",
            "5",
            "--finalists",
            "2",
            "--finalist-rounds",
            "1",
            "--storage",
            storage,
            "--out",
            str(root),
            "--seed",
            "0",
            *SIM,
        ]
    )
    write_handmade_studies(storage)
    return root


def _bench_of(results_dir: Path, distribution: str, device: str = DEVICE_MODEL) -> Path:
    for run in run_dirs(results_dir, "bench"):
        manifest = json.loads((run / "manifest.json").read_text())
        if (
            manifest["cases"][0]["distribution"] == distribution
            and manifest["device"]["name"] == device
        ):
            return run
    raise AssertionError(f"no {distribution} bench run on {device} in {results_dir}")


def _tune_of(results_dir: Path, study: str) -> Path:
    for run in run_dirs(results_dir, "tune"):
        if json.loads((run / "manifest.json").read_text())["study"] == study:
            return run
    raise AssertionError(f"no tune run of study {study} in {results_dir}")


@pytest.fixture(scope="session")
def bench_run(results_dir) -> Path:
    """The skew80 bench run (four policies at B = 4..64)."""
    return _bench_of(results_dir, "skew80")


@pytest.fixture(scope="session")
def uniform_run(results_dir) -> Path:
    """The uniform bench run (flashinfer-tensor-core and two fixed-split sizes)."""
    return _bench_of(results_dir, "uniform")


@pytest.fixture(scope="session")
def h100_run(results_dir) -> Path:
    """The skew80 bench run on the h100 model (flashinfer-tensor-core and fa3, B = 4..64)."""
    return _bench_of(results_dir, "skew80", "h100")


@pytest.fixture(scope="session")
def tune_run(results_dir) -> Path:
    """The `kvtune tune --oracle` run of study `dash` (buckets 1-8 and 9-64)."""
    return _tune_of(results_dir, "dash")


@pytest.fixture(scope="session")
def multi_run(results_dir) -> Path:
    """The `kvtune tune --objective mean,worst` run of study `multi` (one bucket, 1-64)."""
    return _tune_of(results_dir, "multi")


def write_handmade_studies(storage: str) -> None:
    """`handmade/1-16`: 8 trials of the parametric rule scored against two baselines on the
    simulator, with kvtune_result / kvtune_run attrs built by studies/result.py;
    `partial/1-8`: trials only, no attrs."""
    import optuna

    from kvtune.harness.device import device_model
    from kvtune.harness.sim_model import simulate
    from kvtune.kernels import policies
    from kvtune.kernels.plan import AttentionShape, SplitParams
    from kvtune.studies.result import (
        RESULT_ATTR,
        RUN_ATTR,
        BucketResult,
        CaseEvidence,
        Finalist,
        TuningResult,
    )

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shape, device = AttentionShape(), device_model(DEVICE_MODEL)
    cases = {f"skew80:B{b}": _skew80(b) for b in (4, 16)}
    baselines = ("flashinfer-tensor-core", "fa3")

    def latency(policy, kv):
        return simulate(policy.plan(kv, shape, device), shape, device).time_us

    base_us = {
        cid: {n: latency(policies.get(n), kv) for n in baselines} for cid, kv in cases.items()
    }

    def score(params: SplitParams) -> tuple[float, dict]:
        tuned = {
            cid: latency(policies.get("parametric", **params.to_dict()), kv)
            for cid, kv in cases.items()
        }
        ratios = [tuned[c] / min(base_us[c].values()) for c in cases]
        return float(np.exp(np.mean(np.log(ratios)))), tuned

    def objective(trial):
        params = SplitParams(
            min_tokens_per_cta=trial.suggest_categorical("min_tokens_per_cta", [256, 1024, 4096]),
            max_waves=trial.suggest_int("max_waves", 1, 8),
            max_splits=trial.suggest_int("max_splits", 1, 64, log=True),
            ctas_per_sm=trial.suggest_categorical("ctas_per_sm", [1, 2]),
            schedule=trial.suggest_categorical("schedule", ["static", "persistent-heavy-first"]),
        )
        return score(params)[0]

    study = optuna.create_study(
        study_name="handmade/1-16", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0)
    )
    study.optimize(objective, n_trials=8)
    ranked = sorted((t for t in study.trials if t.value is not None), key=lambda t: t.value)[:3]
    finalists = []
    for i, t in enumerate(ranked):
        params = SplitParams(**t.params)
        value = score(params)[0]
        finalists.append(Finalist(params, value, value, value, ctas=i + 1, chosen=i == 0))
    best = SplitParams(**ranked[0].params)
    best_score, tuned = score(best)
    bucket = BucketResult(
        name="1-16",
        min_batch=1,
        max_batch=16,
        study_name="handmade/1-16",
        params=best,
        score=best_score,
        worst=max(tuned[c] / min(base_us[c].values()) for c in cases),
        n_trials=8,
        cases=tuple(CaseEvidence(c, int(c.split("B")[1]), tuned[c], base_us[c]) for c in cases),
        finalists=tuple(finalists),
    )
    result = TuningResult(
        study="handmade",
        buckets=(bucket,),
        device=device.to_dict(),
        shape=shape.to_dict(),
        kernel=f"simulated:{DEVICE_MODEL}",
        backend="simulator",
        simulated=True,
        provenance={"suite": "handmade", "seeds": [0]},
    )
    study.set_user_attr(RESULT_ATTR, bucket.to_dict())
    study.set_user_attr(RUN_ATTR, result.run_fields())

    partial = optuna.create_study(
        study_name="partial/1-8", storage=storage, sampler=optuna.samplers.RandomSampler(seed=1)
    )
    partial.optimize(lambda t: t.suggest_float("max_waves", 1, 8) ** 0.5, n_trials=3)


def _skew80(batch_size: int) -> np.ndarray:
    total = 262_144
    long = total * 8 // 10
    kv = np.full(batch_size, (total - long) // (batch_size - 1), dtype=np.int64)
    kv[0] = long
    return kv


@pytest.fixture()
def messy_results(tmp_path, bench_run, tune_run) -> Path:
    """One run of each broken kind, made from a copy of the skew80 bench run."""
    import pandas as pd

    root = tmp_path / "messy"
    root.mkdir()
    corrupt = root / "20260101-000000-bench-c0c0"
    shutil.copytree(bench_run, corrupt)
    (corrupt / "measurements.parquet").write_bytes(b"PAR1 this is not a parquet file")
    man = json.loads((corrupt / "manifest.json").read_text())
    man.update(run_id=corrupt.name)
    (corrupt / "manifest.json").write_text(json.dumps(man))

    running = root / "20260101-000001-bench-r0r0"
    shutil.copytree(bench_run, running)
    man = json.loads((running / "manifest.json").read_text())
    man.update(status="running", run_id=running.name, ended_at=None, rows=None)
    (running / "manifest.json").write_text(json.dumps(man))
    frame = pd.read_parquet(running / "measurements.parquet")
    frame.head(5).to_parquet(running / "measurements.parquet", index=False)

    failed = root / "20260101-000002-bench-f0f0"
    shutil.copytree(bench_run, failed)
    man = json.loads((failed / "manifest.json").read_text())
    man.update(status="failed", run_id=failed.name, error="KeyboardInterrupt: ")
    (failed / "manifest.json").write_text(json.dumps(man))
    (failed / "measurements.parquet").unlink()

    unreadable = root / "20260101-000003-bench-m0m0"
    unreadable.mkdir()
    (unreadable / "manifest.json").write_text("{not json")

    bad_tuning = root / "20260101-000004-tune-t0t0"
    shutil.copytree(tune_run, bad_tuning)
    man = json.loads((bad_tuning / "manifest.json").read_text())
    man.update(run_id=bad_tuning.name)
    (bad_tuning / "manifest.json").write_text(json.dumps(man))
    (bad_tuning / "tuning.json").write_text('{"study": "dash", "buckets": [')
    (root / "optuna.db").write_bytes(b"this is not an SQLite database" * 100)
    return root


HOSTILE_IMAGE = "![x](http://evil.example/x.png)"
HOSTILE_LINK = "[click](http://evil.example/go)"


@pytest.fixture()
def hostile_results(tmp_path, bench_run, tune_run) -> Path:
    """Runs whose stored strings hold Markdown images and links: a failed bench run (device,
    backend, error, started_at, command, suite, one policy renamed) and a tuning run whose study
    and policy names are links."""
    import pandas as pd

    root = tmp_path / "hostile"
    root.mkdir()
    bench = root / "20260101-000000-bench-h0h0"
    shutil.copytree(bench_run, bench)
    man = json.loads((bench / "manifest.json").read_text())
    man["device"]["name"] = HOSTILE_IMAGE
    man.update(
        run_id=bench.name,
        status="failed",
        backend=HOSTILE_IMAGE,
        error=f"boom {HOSTILE_IMAGE}",
        started_at=HOSTILE_LINK,
        command=f"kvtune bench --storage postgresql://user:secret@db/x {HOSTILE_IMAGE}",
        suite=HOSTILE_LINK,
    )
    (bench / "manifest.json").write_text(json.dumps(man))
    frame = pd.read_parquet(bench / "measurements.parquet")
    frame.loc[frame["policy"] == "no-split", "policy"] = HOSTILE_LINK
    frame["distribution"] = frame["distribution"].astype(str)
    frame.to_parquet(bench / "measurements.parquet", index=False)

    tune = root / "20260101-000001-tune-h1h1"
    shutil.copytree(tune_run, tune)
    man = json.loads((tune / "manifest.json").read_text())
    man.update(run_id=tune.name, study=HOSTILE_LINK)
    (tune / "manifest.json").write_text(json.dumps(man))
    result = json.loads((tune / "tuning.json").read_text())
    result["study"] = HOSTILE_IMAGE
    result["kernel"] = HOSTILE_LINK
    result["device"]["name"] = HOSTILE_IMAGE
    (tune / "tuning.json").write_text(json.dumps(result))
    return root

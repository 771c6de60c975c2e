"""Real processes: a study killed with SIGKILL mid-trial and resumed; two workers on one study."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import optuna
import pandas as pd
import pytest

from kvtune.harness.store import list_runs
from kvtune.studies.storage import LOST_ATTR, PID_ATTR, counted_trials, open_storage
from tests.studies.conftest import env_with_repo, kvtune_argv

# prod-mix's two largest batch sizes x 3 seeds: trials of about half a second on the simulator.
SLOW = ["tune", "--distribution", "prod-mix", "--batch-sizes", "192,256", "--seeds", "0,1,2",
        "--backend", "simulator",
        "--device-model", "h200", "--sampler", "random", "--pruner", "none", "--finalists", "2",
        "--finalist-rounds", "1", "--no-progress", "--heartbeat-s", "1"]
FAST = ["tune", "--distribution", "skew60", "--batch-sizes", "8,16", "--param", "total_tokens=32768",
        "--buckets", "1-32", "--backend", "simulator", "--device-model", "h200",
        "--finalists", "2", "--finalist-rounds", "1", "--no-progress"]


def load(url, name):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.load_study(study_name=name, storage=open_storage(url))


def test_sigkill_mid_trial_loses_at_most_that_trial_and_numbering_continues(tmp_path):
    out = tmp_path / "r"
    url = f"sqlite:///{out}/optuna.db"
    argv = kvtune_argv(*SLOW, "--study", "k", "--trials", "10", "--out", str(out))
    proc = subprocess.Popen(argv, env=env_with_repo(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    study = None
    try:
        while time.time() < deadline:
            time.sleep(0.05)
            assert proc.poll() is None, proc.stderr.read()
            if not (out / "optuna.db").exists():
                continue
            try:
                study = load(url, "k/129-512")
            except KeyError:
                continue
            trials = study.trials
            complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
            # Kill just after a trial has started measuring (it records its process first).
            if len(complete) >= 3 and any(t.state == optuna.trial.TrialState.RUNNING
                                          and "kvtune_pid" in t.user_attrs for t in trials):
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    before = {t.number: t for t in load(url, "k/129-512").trials}
    complete = {n: t for n, t in before.items() if t.state == optuna.trial.TrialState.COMPLETE}
    running = [n for n, t in before.items() if t.state == optuna.trial.TrialState.RUNNING]
    assert len(complete) >= 3 and len(running) <= 1
    killed_run = list_runs(out)[0]
    # Never marked complete: listing the runs sees its process gone and marks it killed, with
    # the rows of every finished trial merged into its measurements.parquet.
    assert killed_run["status"] == "killed" and str(proc.pid) in killed_run["error"]
    killed_dir = out / killed_run["run_id"]
    rows = pd.read_parquet(killed_dir / "measurements.parquet")
    measured = set(rows[(rows["phase"] == "trial") & (rows["study"] == "k/129-512")]["trial"])
    assert set(complete) <= measured
    assert not list(killed_dir.glob("measurements.part-*")) and not list(killed_dir.glob(".*.tmp"))

    done = subprocess.run(check=False, args=kvtune_argv(*SLOW, "--study", "k", "--trials", "10", "--out", str(out),
                                      "--resume"), env=env_with_repo(), capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    after = load(url, "k/129-512")
    trials = {t.number: t for t in after.trials}
    for n, t in complete.items():  # every finished trial kept as it was
        assert trials[n].state == optuna.trial.TrialState.COMPLETE
        assert trials[n].value == t.value and trials[n].params == t.params
    for n in running:  # the killed trial: failed, marked lost, not counted
        if PID_ATTR in before[n].user_attrs:
            assert trials[n].state == optuna.trial.TrialState.FAIL
            assert LOST_ATTR in trials[n].user_attrs
        else:  # killed between its creation and recording its process (seen in CI): left
            # alone by design (studies/storage.py fail_dead_trials), and never counted
            assert trials[n].state == optuna.trial.TrialState.RUNNING
    assert sorted(trials) == list(range(len(trials)))
    added = set(trials) - set(before)
    if added:  # the kill can come after the bucket already had its 10 counted trials
        assert min(added) == max(before) + 1  # numbering continues
    assert counted_trials(after) == 10
    assert len(trials) == 10 + len(running)
    assert list_runs(out)[0]["status"] == "complete"


@pytest.mark.parametrize("storage", ["journal", "sqlite"])
def test_two_workers_share_one_study(tmp_path, storage):
    out = tmp_path / "r"
    out.mkdir()
    where = (["--journal", str(out / "journal.log")] if storage == "journal"
             else ["--storage", f"sqlite:///{out}/optuna.db"])
    done = subprocess.run(check=False, args=kvtune_argv(*FAST, "--study", "w", "--trials", "30", "--workers", "2",
                                      "--out", str(out), *where),
                          env=env_with_repo(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    url = None if storage == "journal" else f"sqlite:///{out}/optuna.db"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name="w/1-32", storage=open_storage(
        url, str(out / "journal.log") if storage == "journal" else None))
    trials = study.trials
    assert len(trials) == 30 and sorted(t.number for t in trials) == list(range(30))
    assert all(t.state.is_finished() for t in trials)
    assert len({t.user_attrs["kvtune_pid"] for t in trials}) == 2  # both workers took trials
    (run,) = [r for r in list_runs(out)]
    rows = pd.read_parquet(f"{run['path']}/measurements.parquet")
    assert set(rows[rows["phase"] == "trial"]["worker"]) == {0, 1}
    assert set(rows[rows["phase"] == "trial"]["trial"]) <= set(range(30))
    assert not list((out / run["run_id"]).glob("measurements.part-*"))
    summary = json.loads((out / run["run_id"] / "summary.json").read_text())
    assert summary["buckets"][0]["n_trials"] == 30


def test_a_trial_told_by_another_process_does_not_stop_the_search(monkeypatch):
    """SQLite has no row locks: two workers can pop the same enqueued trial, and the slower one
    then gets Optuna's "Cannot tell a COMPLETE trial". The search goes on with what is left."""
    from types import SimpleNamespace

    from kvtune.studies import study as study_mod

    calls = []

    class RacyStudy:
        study_name = "s/1-8"

        def optimize(self, objective, n_trials, timeout, **kw):
            calls.append(n_trials)
            if len(calls) == 1:
                raise ValueError("Cannot tell a COMPLETE trial.")

    monkeypatch.setattr(study_mod, "fail_dead_trials", lambda s: [])
    monkeypatch.setattr(study_mod, "BucketObjective", lambda *a, **k: None)
    monkeypatch.setattr(study_mod, "remaining_trials", lambda ctx, s: 3)
    ctx = SimpleNamespace(runner=None, space=None,
                          config=SimpleNamespace(multi_objective=False, robust=True, trials=10,
                                                 journal="j.log", storage=None, out="."))
    study_mod.search(ctx, RacyStudy(), [], {}, None, n_trials=5)
    assert calls == [5, 3]
    assert study_mod.lost_waiting_trial_race(ValueError("Cannot tell a FAIL trial."))
    assert not study_mod.lost_waiting_trial_race(ValueError("Cannot tell a RUNNING trial."))
    from optuna.exceptions import UpdateFinishedTrialError

    assert study_mod.lost_waiting_trial_race(UpdateFinishedTrialError("Trial#0 has already finished"))

    class Broken(RacyStudy):
        def optimize(self, *a, **k):
            raise ValueError("something else")

    with pytest.raises(ValueError, match="something else"):
        study_mod.search(ctx, Broken(), [], {}, None, n_trials=5)


POP_SCRIPT = """
import sys, optuna
from kvtune.studies.storage import serialize_waiting_trial_pops
from pathlib import Path
optuna.logging.set_verbosity(optuna.logging.ERROR)
db = Path(sys.argv[1])
study = optuna.load_study(study_name="pops", storage=f"sqlite:///{db}")
serialize_waiting_trial_pops(study, db)
taken = []
for _ in range(int(sys.argv[2])):
    t = study.ask()
    taken.append(t.number)
    study.tell(t, 1.0)
print(" ".join(map(str, taken)))
"""


def test_processes_on_one_sqlite_study_never_take_the_same_enqueued_trial(tmp_path):
    db = tmp_path / "pops.db"
    study = optuna.create_study(study_name="pops", storage=f"sqlite:///{db}")
    for x in range(24):
        study.enqueue_trial({"x": float(x)}, skip_if_exists=False)
    procs = [subprocess.Popen([sys.executable, "-c", POP_SCRIPT, str(db), "12"],
                              env=env_with_repo(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    taken = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        taken += [int(n) for n in out.split()]
    # 36 asks: the 24 enqueued trials once each, then 12 new ones; no trial taken twice.
    assert len(taken) == 36 and len(set(taken)) == 36
    assert set(range(24)) <= set(taken)

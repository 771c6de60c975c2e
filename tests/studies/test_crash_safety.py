"""Kills, races and resumes: rows of finished trials survive, workers die with their parent,
concurrent storage creation and separate --resume processes behave (simulator, seconds)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest

from kvtune.harness.store import list_runs, process_alive
from kvtune.studies.samplers import worker_seed
from tests.studies.conftest import env_with_repo, kvtune_argv
from tests.studies.test_processes import FAST, SLOW


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_of_the_main_process_takes_its_workers_and_resume_merges_their_rows(tmp_path):
    out = tmp_path / "r"
    argv = kvtune_argv(*SLOW, "--study", "w", "--trials", "2000", "--workers", "2", "--out", str(out),
                       "--journal", str(tmp_path / "j.log"))
    proc = subprocess.Popen(argv, env=env_with_repo(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    workers, deadline = [], time.time() + 120
    try:
        while time.time() < deadline:
            time.sleep(0.1)
            assert proc.poll() is None, proc.stderr.read()
            workers = _children(proc.pid)
            # measurements.part-w<worker>-<pid>-<seq>.parquet: both workers wrote a trial's rows
            pids = {int(p.name.split("-")[2]) for p in out.glob("*/measurements.part-*")}
            if len(workers) == 2 and set(workers) <= pids:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert len(workers) == 2
    gone_by = time.time() + 10
    while time.time() < gone_by and any(process_alive(w) for w in workers):
        time.sleep(0.1)
    assert not any(process_alive(w) for w in workers), "workers outlived their parent"
    done = subprocess.run(kvtune_argv(*SLOW, "--study", "w", "--trials", "1", "--resume",
                                      "--out", str(out), "--journal", str(tmp_path / "j.log")),
                          env=env_with_repo(), capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    runs = {r["status"]: r for r in list_runs(out)}
    assert set(runs) == {"killed", "complete"}
    killed = Path(runs["killed"]["path"])
    rows = pd.read_parquet(killed / "measurements.parquet")
    assert {0, 1} <= set(rows[rows["phase"] == "trial"]["worker"])
    assert not list(killed.glob("measurements.part-*"))
    # Every finished trial of the killed run has its rows.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    from kvtune.studies.storage import open_storage

    study = optuna.load_study(study_name="w/129-512", storage=open_storage(journal=str(tmp_path / "j.log")))
    run_id = runs["killed"]["run_id"]
    finished = {t.number for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE
                and t.number in set(rows["trial"])}
    assert finished and finished <= set(rows[(rows["phase"] == "trial") & (rows["run_id"] == run_id)]["trial"])


def test_three_processes_creating_one_sqlite_storage_all_succeed(tmp_path):
    url = f"sqlite:///{tmp_path}/new.db"
    code = ("import sys, time; from kvtune.studies.storage import open_storage; "
            "t = float(sys.argv[1]); time.sleep(max(0, t - time.time())); open_storage(sys.argv[2]); print('ok')")
    start = str(time.time() + 3)
    procs = [subprocess.Popen([sys.executable, "-c", code, start, url], env=env_with_repo(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [r[1][-300:] for r in results]


def test_a_creation_race_message_is_retried():
    from kvtune.studies.storage import _creation_race

    assert _creation_race(Exception("(sqlite3.IntegrityError) UNIQUE constraint failed: "
                                    "alembic_version.version_num"))
    assert _creation_race(Exception('relation "studies" already exists'))
    assert not _creation_race(Exception("password authentication failed"))


def test_separate_resume_processes_draw_their_own_seeds():
    assert worker_seed(0, 0, 0) == 0  # a fresh single run stays reproducible
    seeds = {worker_seed(0, 0, 7, process=pid) for pid in (101, 102, 103)}
    assert len(seeds) == 3
    assert worker_seed(0, 0, 7, process=101) == worker_seed(0, 0, 7, process=101)


def _two_resumed_processes(tmp_path) -> dict:
    """Trials (params) per process of two `--resume` processes started together on one journal
    after a first run of 6 trials."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    journal = str(tmp_path / "j.log")
    base = [*FAST, "--study", "p", "--sampler", "random", "--journal", journal,
            "--out", str(tmp_path / "r"), "--resume"]
    first = subprocess.run(kvtune_argv(*base, "--trials", "6"), env=env_with_repo(),
                           capture_output=True, text=True, timeout=240, check=False)
    assert first.returncode == 0, first.stderr
    procs = [subprocess.Popen(kvtune_argv(*base, "--trials", "24"), env=env_with_repo(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()
    from kvtune.studies.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name="p/1-32", storage=open_storage(journal=journal))
    later = [t for t in study.trials if t.number >= 6 and t.state.is_finished()
             and "kvtune_start_point" not in t.user_attrs]
    by_pid = {}
    for t in later:
        by_pid.setdefault(t.user_attrs.get("kvtune_pid"), []).append(tuple(sorted(t.params.items())))
    return by_pid


def test_resume_processes_on_one_journal_evaluate_different_configurations(tmp_path):
    # On a loaded machine one process can take every trial before the other starts searching;
    # then nothing is shared to compare, so the pair is started again (fresh journal).
    for attempt in range(3):
        by_pid = _two_resumed_processes(tmp_path / str(attempt))
        if len(by_pid) == 2:
            break
    else:
        pytest.skip("one process took every trial in 3 attempts: no concurrency to observe")
    a, b = by_pid.values()
    repeats = sum(1 for x, y in zip(a, b) if x == y)
    assert repeats <= 2, (repeats, len(a), len(b))


def test_resume_takes_the_studys_stored_settings_and_names_a_difference(tmp_path, capsys):
    from kvtune.cli import main

    out = tmp_path / "r"
    assert main([*FAST, "--study", "demo", "--trials", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    # As in the README: only the study, --resume and the new trial count.
    assert main(["tune", "--study", "demo", "--resume", "--trials", "5", "--out", str(out),
                 "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "5 trials" in captured.out
    assert main(["tune", "--study", "demo", "--resume", "--trials", "5", "--out", str(out),
                 "--device-model", "h100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--device-model 'h100' differs" in err and "'h200'" in err


def test_progress_lines_when_stdout_is_not_a_terminal(tmp_path, capsys):
    from kvtune.cli import main

    argv = [a for a in FAST if a != "--no-progress"]
    assert main([*argv, "--study", "pl", "--trials", "10", "--out", str(tmp_path / "r")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("progress:")]
    assert lines and lines[-1].startswith("progress: bucket 1-32 trials 10/10 best ")
    assert float(lines[-1].rsplit(" ", 1)[1]) > 0
    assert len(lines) <= 11


def test_a_run_stopped_while_finishing_keeps_its_finished_buckets_for_resume(tmp_path, monkeypatch,
                                                                               capsys):
    """A time limit that stops the run in bucket 9-32's finalists, after a search that its own
    time limit (--timeout-s) cut short of --trials: bucket 1-8's result is in the storage
    already; --resume with the same --trials neither searches nor finishes 1-8 again, only
    9-32, and the export holds 1-8's stored result unchanged. With more --trials a resume
    searches and finishes every bucket."""
    from kvtune.cli import main
    from kvtune.studies import tune as tune_mod
    from kvtune.studies.export import tuning_result_from_study
    from kvtune.studies.result import RESULT_ATTR

    argv = [*FAST, "--buckets", "1-8,9-32", "--study", "stop", "--trials", "3",
            "--out", str(tmp_path / "r")]
    argv.remove("1-32")
    argv.remove("--buckets")  # FAST's single bucket: this run has two
    real_finish, real_search = tune_mod._finish_bucket, tune_mod.search
    finished, searched = [], []

    def stop_at_second(ctx, study, bucket, *a, **k):
        if finished:
            raise KeyboardInterrupt  # as a SIGTERM mid-bucket would
        finished.append(bucket.name)
        return real_finish(ctx, study, bucket, *a, **k)

    def short_search(ctx, study, cases, *a, n_trials, **k):
        searched.append(study.study_name.rsplit("/", 1)[1])
        return real_search(ctx, study, cases, *a, n_trials=min(n_trials, 1), **k)

    monkeypatch.setattr(tune_mod, "_finish_bucket", stop_at_second)
    monkeypatch.setattr(tune_mod, "search", short_search)
    assert main(argv) == 130  # the CLI's exit for an interrupt
    assert finished == ["1-8"]
    storage = f"sqlite:///{tmp_path / 'r' / 'optuna.db'}"
    stored = {s.study_name: s.user_attrs for s in optuna.get_all_study_summaries(storage)}
    assert RESULT_ATTR in stored["stop/1-8"] and RESULT_ATTR not in stored["stop/9-32"]
    capsys.readouterr()

    calls = []

    def spy(ctx, study, bucket, *a, **k):
        calls.append(bucket.name)
        return real_finish(ctx, study, bucket, *a, **k)

    monkeypatch.setattr(tune_mod, "_finish_bucket", spy)
    searched.clear()
    assert main([*argv, "--resume"]) == 0
    assert calls == ["9-32"] and searched == ["9-32"]
    assert "bucket 1-8: kept the result an earlier run" in capsys.readouterr().err
    result, _ = tuning_result_from_study("stop", storage)
    first = next(b for b in result.buckets if b.name == "1-8")
    assert first.to_dict() == stored["stop/1-8"][RESULT_ATTR] and first.n_trials == 1
    # More trials: both buckets are searched and finished again.
    calls.clear()
    searched.clear()
    assert main([*argv, "--resume", "--trials", "4"]) == 0
    assert calls == ["1-8", "9-32"] and searched == ["1-8", "9-32"]


def test_resume_keeps_a_result_stored_before_its_trials_target_was(tmp_path, monkeypatch, capsys):
    """Studies decided before `kvtune_result_trials` existed (the eleventh session's fp8 tune on
    the GPU): a bucket is kept when it holds --trials (nothing left to search), not otherwise."""
    from kvtune.cli import main
    from kvtune.studies import tune as tune_mod

    argv = [*FAST, "--study", "old", "--trials", "3", "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    storage = f"sqlite:///{tmp_path / 'r' / 'optuna.db'}"
    optuna.load_study(study_name="old/1-32", storage=storage).set_user_attr(
        tune_mod.RESULT_TRIALS_ATTR, None)  # Optuna cannot delete an attribute: None = absent
    real, calls = tune_mod._finish_bucket, []

    def spy(ctx, study, bucket, *a, **k):
        calls.append(bucket.name)
        return real(ctx, study, bucket, *a, **k)

    monkeypatch.setattr(tune_mod, "_finish_bucket", spy)
    assert main([*argv, "--resume"]) == 0 and calls == []
    assert main([*argv, "--resume", "--trials", "4"]) == 0 and calls == ["1-32"]


def test_resume_fails_the_dead_trials_of_a_kept_bucket(tmp_path, capsys):
    """A process killed after it decided a bucket can leave a trial RUNNING there. A resume
    that keeps the bucket does not search it, but still fails that trial as lost (as search
    does for the buckets it searches)."""
    import socket

    from kvtune.cli import main
    from kvtune.studies.storage import HOST_ATTR, LOST_ATTR, PID_ATTR

    argv = [*FAST, "--study", "dead", "--trials", "3", "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    storage = f"sqlite:///{tmp_path / 'r' / 'optuna.db'}"
    study = optuna.load_study(study_name="dead/1-32", storage=storage)
    orphan = study.ask()  # RUNNING, as a killed process leaves it
    orphan.set_user_attr(HOST_ATTR, socket.gethostname())
    orphan.set_user_attr(PID_ATTR, 2**22 + 12345)  # above pid_max's default: no such process
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    assert "kept the result" in capsys.readouterr().err
    lost = optuna.load_study(study_name="dead/1-32", storage=storage).trials[orphan.number]
    assert lost.state == optuna.trial.TrialState.FAIL and LOST_ATTR in lost.user_attrs

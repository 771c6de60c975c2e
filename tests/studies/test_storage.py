"""Storages: credentials never shown, bad URLs are one line, dead trials are failed."""

from __future__ import annotations

import os
import subprocess
import sys

import optuna
import pytest

from kvtune.studies.storage import (
    LOST_ATTR,
    counted_trials,
    default_storage_url,
    describe_storage,
    fail_dead_trials,
    open_storage,
    process_alive,
    redact_url,
    tag_trial,
)


@pytest.mark.parametrize("url, shown", [
    ("postgresql://alice:s3cret@db.example:5432/kv", "postgresql://***@db.example:5432/kv"),
    ("mysql+pymysql://bob@host/db?charset=utf8&password=pw", "mysql+pymysql://***@host/db?charset=utf8&password=***"),
    ("sqlite:////abs/path/optuna.db", "sqlite:////abs/path/optuna.db"),
    ("sqlite:///results/optuna.db", "sqlite:///results/optuna.db"),
])
def test_redact_url_removes_credentials_only(url, shown):
    assert redact_url(url) == shown


def test_default_storage_and_description():
    assert default_storage_url() == "sqlite:///results/optuna.db"
    assert default_storage_url("/tmp/r") == "sqlite:////tmp/r/optuna.db"
    assert describe_storage("postgresql://a:b@h/d", None) == "postgresql://***@h/d"
    assert describe_storage(None, "/x/j.log") == "journal:/x/j.log"


@pytest.mark.parametrize("url", [
    "postgresql://alice:s3cret@127.0.0.1:1/kvtune",   # no driver here, or nothing listening
    "sqlite://alice:s3cret@/nowhere.db",               # not a valid SQLite URL
    "redis://alice:s3cret@127.0.0.1:1",                # not an RDB URL
])
def test_unusable_storage_is_one_line_without_credentials(url):
    with pytest.raises(ValueError) as err:
        open_storage(url)
    message = str(err.value)
    assert message.startswith("storage: ") and "\n" not in message
    assert "s3cret" not in message and "alice" not in message


def test_journal_storage_opens_and_needs_an_existing_folder(tmp_path):
    storage = open_storage(journal=str(tmp_path / "j.log"))
    optuna.create_study(storage=storage, study_name="x")
    assert (tmp_path / "j.log").exists()
    with pytest.raises(ValueError, match="journal"):
        open_storage(journal=str(tmp_path / "missing" / "j.log"))
    with pytest.raises(ValueError, match="not both"):
        open_storage("sqlite:///x.db", str(tmp_path / "j.log"))


def test_trials_of_a_dead_process_are_failed_and_not_counted(tmp_path):
    storage = open_storage(journal=str(tmp_path / "j.log"))
    study = optuna.create_study(storage=storage, study_name="s")
    done = study.ask()
    study.tell(done, 1.0)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not process_alive(proc.pid) and process_alive(os.getpid())
    orphan = study.ask()
    tag_trial(orphan)
    storage.set_trial_user_attr(orphan._trial_id, "kvtune_pid", proc.pid)
    mine = study.ask()
    tag_trial(mine)  # this process is alive: left alone
    assert fail_dead_trials(study) == [orphan.number]
    states = {t.number: t.state for t in study.trials}
    assert states[orphan.number] == optuna.trial.TrialState.FAIL
    assert states[mine.number] == optuna.trial.TrialState.RUNNING
    assert LOST_ATTR in study.trials[orphan.number].user_attrs
    assert counted_trials(study) == 1

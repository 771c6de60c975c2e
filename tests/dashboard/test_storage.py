"""Optuna storages (dashboard/storage.py): opened read-only, never created, errors as messages;
kvtune's user attributes rebuilt into a TuningResult."""

from __future__ import annotations

import hashlib
import os

import optuna
import pytest

from kvtune.dashboard import storage


def digest(path) -> tuple:
    return hashlib.sha256(path.read_bytes()).hexdigest(), os.stat(path).st_mtime_ns


def test_storages_are_opened_read_only(results_dir):
    db = results_dir / "optuna.db"
    before = digest(db)
    url = f"sqlite:///{db}"
    names = storage.study_names(url)
    assert names.ok and {"dash/1-8", "dash/9-64", "handmade/1-16", "partial/1-8"} <= set(
        names.value
    )
    assert storage.group_studies(names.value)["dash"] == ["dash/1-8", "dash/9-64"]
    study = storage.load_study(url, "dash/1-8").value
    assert len(study.trials) >= 4 and storage.study_bucket_result(study)["name"] == "1-8"
    with pytest.raises(optuna.exceptions.StorageInternalError):  # the connection refuses to write
        study.set_user_attr("written_by_dashboard", True)
    assert digest(db) == before


def test_missing_or_unreachable_storages_are_messages(tmp_path):
    missing = tmp_path / "none.db"
    loaded = storage.study_names(f"sqlite:///{missing}")
    assert not loaded.ok and "does not exist" in loaded.error
    assert not missing.exists()  # never created
    assert not storage.study_names(None).ok
    assert "neither" in storage.study_names(str(tmp_path / "no-journal.log")).error
    assert not storage.load_study(f"sqlite:///{missing}", "x").ok


def test_journal_file_storage(tmp_path):
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    path = tmp_path / "journal.log"
    writer = JournalStorage(JournalFileBackend(str(path)))
    optuna.create_study(study_name="j/1-8", storage=writer).optimize(
        lambda t: t.suggest_float("x", 0, 1), n_trials=2
    )
    size = path.stat().st_size
    assert storage.study_names(str(path)).value == ["j/1-8"]
    assert len(storage.load_study(str(path), "j/1-8").value.trials) == 2
    assert path.stat().st_size == size


def test_tuning_result_rebuilt_from_study_attributes(results_dir):
    url = f"sqlite:///{results_dir / 'optuna.db'}"
    result = storage.tuning_result_from_studies(url, ["handmade/1-16"])
    assert (
        result.ok and result.value.study == "handmade" and result.value.buckets[0].max_batch == 16
    )
    from_run = storage.tuning_result_from_studies(url, ["dash/1-8", "dash/9-64"])
    assert [b.name for b in from_run.value.buckets] == ["1-8", "9-64"]
    partial = storage.tuning_result_from_studies(url, ["partial/1-8"])
    assert not partial.ok and "kvtune_result" in partial.error


def test_read_only_urls():
    url, kwargs = storage.read_only_storage_url("sqlite:///results/optuna.db")
    assert (
        url.startswith("sqlite:///file:/")
        and url.endswith("optuna.db?mode=ro&uri=true")
        and not kwargs
    )
    url, kwargs = storage.read_only_storage_url("postgresql://u@h/db")
    assert "default_transaction_read_only=on" in kwargs["connect_args"]["options"]

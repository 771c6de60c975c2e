"""Optuna storages, opened read-only and cached: the studies of `kvtune tune` for the Study and
Export pages.

A storage is an RDB URL or an existing journal file. SQLite opens in read-only mode (a missing file
is an error, never created), PostgreSQL and MySQL in read-only transactions; a journal file is only
read. kvtune names a bucket's study `<study>/<bucket>` and stores its result as the user attributes
`kvtune_result` and `kvtune_run` (studies/result.py); those are JSON and are only parsed.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from kvtune.dashboard.data import Loaded, one_line
from kvtune.harness.redact import redact_url
from kvtune.studies.result import TuningResult

STUDY_CACHE_S = 10  # a study being tuned gains trials; re-read it at most this often


def read_only_storage_url(url: str) -> tuple[str, dict]:
    """(URL, SQLAlchemy engine kwargs) that open `url` without the right to write.

    SQLite: the file opened as a URI with mode=ro (a missing file is an error, never created).
    PostgreSQL: every transaction read-only. MySQL: the session read-only. Others: as given.
    """
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :].split("?", 1)[0]
        if path.startswith("file:"):
            return url, {}
        absolute = Path(path).expanduser().resolve()
        return f"sqlite:///file:{absolute}?mode=ro&uri=true", {}
    if url.startswith(("postgresql", "postgres")):
        return url, {"connect_args": {"options": "-c default_transaction_read_only=on"}}
    if url.startswith("mysql"):
        return url, {"connect_args": {"init_command": "SET SESSION TRANSACTION READ ONLY"}}
    return url, {}


def open_storage(storage: str):
    """An Optuna storage for `storage` (an RDB URL or an existing journal file), opened read-only.

    ValueError with one line when it cannot be opened (missing file, bad URL, unreachable server).
    """
    import optuna

    if "://" not in storage:
        path = Path(storage).expanduser()
        if not path.is_file():
            raise ValueError(
                f"storage: {storage} is neither a database URL nor an existing journal file"
            )
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(path)))
    if storage.startswith("sqlite:///"):
        raw = storage[len("sqlite:///") :].split("?", 1)[0].removeprefix("file:")
        if not Path(raw).expanduser().is_file():
            raise ValueError(f"storage: SQLite file {raw} does not exist")
    url, engine_kwargs = read_only_storage_url(storage)
    try:
        return optuna.storages.RDBStorage(
            url, engine_kwargs=engine_kwargs or None, skip_table_creation=True
        )
    except Exception as exc:  # noqa: BLE001 - driver errors have many types
        raise ValueError(f"storage: cannot open {redact_url(storage)} ({one_line(exc)})") from None


@st.cache_resource(show_spinner=False, ttl=600)
def _storage(storage: str):
    return open_storage(storage)


@st.cache_data(show_spinner=False, ttl=STUDY_CACHE_S)
def _study_names(storage: str) -> tuple[list[str] | None, str | None]:
    import optuna

    try:
        names = optuna.get_all_study_names(storage=_storage(storage))
    except Exception as exc:  # noqa: BLE001
        return None, f"cannot list the studies in {redact_url(storage)} ({one_line(exc)})"
    return sorted(names), None


def study_names(storage: str | None) -> Loaded:
    """Names of every study in the storage (sorted), or why they could not be listed."""
    if not storage:
        return Loaded(error="no Optuna storage (start the dashboard with --storage URL)")
    names, error = _study_names(storage)
    return Loaded(error=error) if error else Loaded(names)


def trial_counts(storage: str | None) -> tuple:
    """((study name, trials), ...) of every study in the storage, read now (not cached): what the
    auto-refresh polls. () without a storage; (error,) when it cannot be read."""
    if not storage:
        return ()
    import optuna

    try:
        summaries = optuna.get_all_study_summaries(_storage(storage), include_best_trial=False)
    except Exception as exc:  # noqa: BLE001
        return (one_line(exc),)
    return tuple(sorted((s.study_name, s.n_trials) for s in summaries))


def group_studies(names: list[str]) -> dict[str, list[str]]:
    """kvtune names a bucket's study `<study>/<bucket>`: {study: [full names]} in name order.
    A name without '/' is its own group."""
    groups: dict[str, list[str]] = {}
    for name in names:
        study, _, _bucket = name.rpartition("/")
        groups.setdefault(study or name, []).append(name)
    return groups


@st.cache_resource(show_spinner=False, ttl=STUDY_CACHE_S)
def _load_study(storage: str, name: str):
    import optuna

    return optuna.load_study(study_name=name, storage=_storage(storage))


def load_study(storage: str | None, name: str) -> Loaded:
    """The Optuna study `name` (read-only storage), or why it could not be loaded."""
    if not storage:
        return Loaded(error="no Optuna storage (start the dashboard with --storage URL)")
    try:
        return Loaded(_load_study(storage, name))
    except Exception as exc:  # noqa: BLE001
        return Loaded(
            error=f"study {name!r} could not be loaded from {redact_url(storage)} ({one_line(exc)})"
        )


def study_bucket_result(study) -> dict | None:
    """The bucket's result the tuner stored on the study (user attr kvtune_result), if any."""
    from kvtune.studies.result import RESULT_ATTR

    value = study.user_attrs.get(RESULT_ATTR)
    return value if isinstance(value, dict) else None


def study_run_fields(study) -> dict | None:
    """The run-level fields the tuner stored on the study (user attr kvtune_run), if any."""
    from kvtune.studies.result import RUN_ATTR

    value = study.user_attrs.get(RUN_ATTR)
    return value if isinstance(value, dict) else None


def tuning_result_from_studies(storage: str | None, names: list[str]) -> Loaded:
    """A TuningResult rebuilt from the user attrs of a study's bucket studies (kvtune_run plus each
    bucket's kvtune_result), for studies whose tuning run folder is not in the results folder."""
    buckets, run_fields, missing = [], None, []
    for name in names:
        loaded = load_study(storage, name)
        if not loaded.ok:
            return loaded
        bucket = study_bucket_result(loaded.value)
        if bucket is None:
            missing.append(name)
            continue
        buckets.append(bucket)
        run_fields = run_fields or study_run_fields(loaded.value)
    if not buckets or run_fields is None:
        return Loaded(
            error="no finished kvtune result on these studies yet (user attrs "
            f"kvtune_result / kvtune_run missing on {', '.join(missing or names)})"
        )
    try:
        return Loaded(TuningResult.from_dict({**run_fields, "buckets": buckets}))
    except Exception as exc:  # noqa: BLE001
        return Loaded(
            error=f"the kvtune result stored on the studies is not valid ({one_line(exc)})"
        )


__all__ = [
    "STUDY_CACHE_S",
    "group_studies",
    "load_study",
    "open_storage",
    "read_only_storage_url",
    "redact_url",
    "study_bucket_result",
    "study_names",
    "study_run_fields",
    "trial_counts",
    "tuning_result_from_studies",
]

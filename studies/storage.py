"""Where studies live: Optuna storages by URL or journal file, and keeping them healthy.

- `sqlite:///results/optuna.db` (default, next to the results): embedded, nothing to start.
- any Optuna RDB URL (`postgresql://user:pw@host/db`, `mysql+pymysql://...`): several hosts
  work on one study by running `kvtune tune --storage URL --study NAME --resume` each.
- `--journal FILE`: Optuna's JournalStorage on a JournalFileBackend, for many processes on one
  host (file locks, no database).

Trials that a killed process left RUNNING are failed, never silently resumed: RDB storages carry
Optuna's heartbeat (a trial whose heartbeat is older than the grace period is failed by the next
trial of any process), and every trial records its host and process id, so a trial of this host
whose process is gone is failed at once (`fail_dead_trials`). Provenance records the URL with
its credentials removed (`redact_url`).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from kvtune.harness.redact import redact_url, redact_with
from kvtune.harness.store import process_alive

DEFAULT_HEARTBEAT_S = 10
OPEN_ATTEMPTS = 3
HOST_ATTR = "kvtune_host"
PID_ATTR = "kvtune_pid"
FAIL_ATTR = "kvtune_fail"  # why a trial failed: the configuration's fault (counts as a trial)
LOST_ATTR = "kvtune_lost"  # why a trial was lost: its process died (does not count)
# SQLAlchemy dialects and the driver module each needs, for a one-line error without it.
# (SQLAlchemy 2 reads postgresql:// with psycopg 3, mysql:// with mysqlclient.)
_DRIVERS = {"postgresql": "psycopg (pip install 'psycopg[binary]'; or postgresql+psycopg2:// with "
                          "psycopg2-binary)",
            "mysql": "mysqlclient (pip install mysqlclient; or mysql+pymysql:// with pymysql)"}


def default_storage_url(out_dir: str | os.PathLike = "results") -> str:
    """`sqlite:///<out_dir>/optuna.db` (relative paths stay relative to the working folder)."""
    return f"sqlite:///{Path(out_dir).as_posix()}/optuna.db"


def describe_storage(url: str | None, journal: str | None) -> str:
    """What provenance and the report say about the storage (credentials removed)."""
    if journal:
        return f"journal:{Path(journal).as_posix()}"
    return redact_url(url or default_storage_url())


def open_storage(url: str | None = None, journal: str | None = None, *,
                 heartbeat_s: int = DEFAULT_HEARTBEAT_S):
    """An Optuna storage for `url` (RDB) or `journal` (file path); exactly one may be given.

    heartbeat_s: RDB heartbeat interval, 1..3600 s (grace period: three intervals).
    ValueError, one line without credentials, when the storage cannot be opened.
    """
    import optuna

    if url and journal:
        raise ValueError("storage: give --storage URL or --journal FILE, not both")
    if not 1 <= int(heartbeat_s) <= 3600:
        raise ValueError(f"heartbeat-s: {heartbeat_s} out of range; allowed: 1..3600")
    if journal:
        from optuna.storages.journal import JournalFileBackend

        path = Path(journal)
        if not path.parent.is_dir():
            raise ValueError(f"journal: folder {path.parent} does not exist")
        if path.exists() and not path.is_file():
            raise ValueError(f"journal: {path} is not a regular file")
        _check_journal_lines(path)
        try:
            storage = optuna.storages.JournalStorage(JournalFileBackend(str(path)))
            storage.get_all_studies()  # replays the log: a corrupt file fails here, not mid-run
            return storage
        except Exception as exc:  # noqa: BLE001 - Optuna raises JSON, assertion and OS errors
            raise ValueError(f"journal: {path} is not a readable Optuna journal "
                             f"({type(exc).__name__}: {_one_line(exc)})") from None
    url = url or default_storage_url()
    shown = redact_url(url)
    scheme = url.partition("://")[0].split("+")[0].lower()
    if scheme == "sqlite":
        db_path = url.split(":///", 1)[1] if ":///" in url else ""
        if db_path and db_path != ":memory:":
            parent = Path(db_path.split("?")[0]).parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ValueError(f"storage: cannot create the folder of {shown}: {exc.strerror}") from None
    if scheme == "sqlite":
        engine_kwargs = {"connect_args": {"timeout": 60}}  # wait for other workers' write locks
    elif scheme in ("postgresql", "mysql"):
        engine_kwargs = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    if scheme not in ("sqlite", "postgresql", "mysql", "oracle", "mssql"):
        raise ValueError(f"storage: {shown!r} is not an Optuna RDB URL; allowed: sqlite:///FILE, "
                         "postgresql://..., mysql://... (or --journal FILE)")
    for attempt in range(OPEN_ATTEMPTS):
        try:
            storage = optuna.storages.RDBStorage(
                url, engine_kwargs=engine_kwargs, heartbeat_interval=int(heartbeat_s),
                grace_period=3 * int(heartbeat_s))
            if scheme == "sqlite":
                _sqlite_write_ahead_log(storage.engine)
            return storage
        except ImportError:  # Optuna re-raises the driver's ModuleNotFoundError as ImportError
            need = _DRIVERS.get(scheme, "of its dialect")
            raise ValueError(f"storage: {shown} needs the database driver {need}") from None
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises many kinds
            # Hosts that start together on an empty database race to create Optuna's tables;
            # the loser sees a duplicate-object error (PostgreSQL, MySQL) or a failed unique
            # constraint on alembic_version (SQLite), and a moment later the tables are there.
            if attempt + 1 < OPEN_ATTEMPTS and _creation_race(exc):
                time.sleep(1.0 + attempt)
                continue
            raise ValueError(f"storage: cannot open {shown}: {_one_line(exc, url)}") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _check_journal_lines(path: Path) -> None:
    """ValueError naming the line when a journal file holds a complete line that is not a JSON
    object (Optuna would fail with a JSON or assertion error in the middle of a run). A last
    line without its newline is another process writing, and is left to Optuna."""
    import json

    if not path.is_file():
        return
    try:
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, 1):
                if not line.endswith(b"\n"):
                    break
                try:
                    ok = isinstance(json.loads(line), dict)
                except (ValueError, RecursionError):
                    ok = False
                if not ok:
                    raise ValueError(f"journal: {path} line {number} is not an Optuna journal "
                                     "record (a JSON object); allowed: a file written by --journal")
    except OSError as exc:
        raise ValueError(f"journal: cannot read {path} ({exc.strerror})") from None


def _creation_race(exc: BaseException) -> bool:
    text = str(exc)
    return ("already exists" in text or "UNIQUE constraint failed: alembic_version" in text
            or "database is locked" in text)


def storage_file(url: str | None, journal: str | None) -> Path | None:
    """The file a storage lives in (a journal, or a SQLite database), or None for a server."""
    if journal:
        return Path(journal)
    url = url or default_storage_url()
    if url.split("+")[0].lower().startswith("sqlite:") and ":///" in url:
        db_path = url.split(":///", 1)[1].split("?")[0]
        if db_path and db_path != ":memory:":
            return Path(db_path)
    return None


def serialize_waiting_trial_pops(study, db_path: Path) -> None:
    """Make this process take an enqueued (WAITING) trial of `study` under an exclusive lock on
    `<db_path>.pop.lock`.

    Optuna moves a waiting trial to RUNNING with a read, then an update that SQLite cannot lock
    by row, so two processes of one host can both take the same start point: one then fails to
    tell it ("Cannot tell a COMPLETE trial") and its share of trials comes up one short. With the
    pop serialised, the second process sees the trial RUNNING and takes the next one. Servers
    (PostgreSQL, MySQL) lock the row themselves; journals lock their file.
    """
    import fcntl

    lock_path = Path(f"{db_path}.pop.lock")
    pop = study._pop_waiting_trial_id  # the one place Optuna takes a waiting trial (Study.ask)

    def locked_pop():
        with open(lock_path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                return pop()
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    study._pop_waiting_trial_id = locked_pop


def remove_if_unused(path: Path | None, storage) -> bool:
    """Delete the storage file `path` (with SQLite's -wal/-shm) when it holds no study: what a
    failed first run must not leave behind. Returns True when it was removed."""
    import optuna

    if path is None or not path.is_file():
        return False
    try:
        if optuna.get_all_study_summaries(storage, include_best_trial=False):
            return False
        engine = getattr(storage, "engine", None)
        if engine is not None:
            engine.dispose()
    except Exception:  # noqa: BLE001 - unreadable: leave it for the user to look at
        return False
    for extra in ("", "-wal", "-shm", "-journal", ".lock"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    return True


def _sqlite_write_ahead_log(engine) -> None:
    """WAL journal with synchronous=NORMAL: every trial commits a dozen times, and a full fsync
    per commit costs more than the simulator's trial. A killed process still loses nothing
    committed (only a power cut can drop the last commits), and readers do not block the writer
    of another worker process."""
    from sqlalchemy import event

    def on_connect(dbapi_connection, _record):
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections opened before the listener get replaced


def existing_studies(storage, names) -> list[str]:
    """The names among `names` that already exist in `storage`."""
    import optuna

    have = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    return [n for n in names if n in have]


def tag_trial(trial) -> None:
    """Record which process runs `trial` (so that its death can be recognised)."""
    trial.set_user_attr(HOST_ATTR, socket.gethostname())
    trial.set_user_attr(PID_ATTR, os.getpid())


def fail_dead_trials(study) -> list[int]:
    """Fail the RUNNING trials of this host whose process is gone; returns their numbers.

    A trial of another host is left alone (its own host's next run, or the RDB heartbeat, deals
    with it), and so is a trial without a recorded process.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    host = socket.gethostname()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get(HOST_ATTR) != host or PID_ATTR not in t.user_attrs:
            continue
        pid = int(t.user_attrs[PID_ATTR])
        if pid == os.getpid() or process_alive(pid):
            continue
        storage = study._storage
        try:
            storage.set_trial_user_attr(t._trial_id, LOST_ATTR,
                                        f"process {pid} on {host} died during the trial")
            if storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                failed.append(t.number)
        except UpdateFinishedTrialError:
            pass  # another process failed it first
    return failed


def counted_trials(study) -> int:
    """Trials that count toward `--trials`: complete, pruned, and failed by their configuration
    (a wrong output, an infeasible or unsupported config). Trials lost with their process do not."""
    from optuna.trial import TrialState

    n = 0
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or t.state == TrialState.FAIL and FAIL_ATTR in t.user_attrs:
            n += 1
    return n


def _one_line(exc: BaseException, url: str | None = None) -> str:
    # Drivers echo connection strings and their parts; never let a password through.
    text = redact_with(" ".join(str(exc).split()), url)
    first = text.split(" (Background on this error")[0]
    return (first[:300] + "...") if len(first) > 300 else first


__all__ = [
    "DEFAULT_HEARTBEAT_S",
    "counted_trials",
    "default_storage_url",
    "describe_storage",
    "existing_studies",
    "fail_dead_trials",
    "serialize_waiting_trial_pops",
    "open_storage",
    "process_alive",
    "redact_url",
    "remove_if_unused",
    "storage_file",
    "tag_trial",
]

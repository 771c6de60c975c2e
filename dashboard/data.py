"""Loading what the dashboard shows from the results folder, read-only and cached: runs,
measurements, tuning results; and the cached derived data (threshold rules, replayed timelines).
Optuna storages are read by dashboard/storage.py.

Nothing here writes to a results folder, and nothing executes what it reads: runs are JSON and
Parquet, tuning results are JSON (studies/result.py). Every loader returns an error text instead of
raising, so a page can show a clear message for a corrupt or half-written file.

Caches (st.cache_data) are keyed by the files' modification time and size, so a run still in
progress is re-read when it writes more rows, and an unchanged run is read once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from kvtune.dashboard.launch import ENV_RESULTS, ENV_STORAGE
from kvtune.harness.store import MANIFEST, MEASUREMENTS, list_runs
from kvtune.studies.result import TUNING_FILE, TuningResult

DEFAULT_RESULTS_DIR = "results"
DEFAULT_STORAGE_FILE = "optuna.db"
# Per-request arrays: only the SM timeline needs them, and they dominate the file's size.
PER_REQUEST_COLUMNS = ("kv_lens", "splits")


@dataclass(frozen=True)
class DashboardConfig:
    """Where the dashboard reads from.

    results_dir: the results folder (absolute). storage: an Optuna storage URL, or a journal file
    path; None when there is none. storage_note: where the storage came from, or why there is none.
    """

    results_dir: Path
    storage: str | None
    storage_note: str


def config_from_env(environ=None) -> DashboardConfig:
    """The folder and storage `kvtune dashboard` passed through the environment.

    KVTUNE_DASHBOARD_RESULTS (default ./results) and KVTUNE_DASHBOARD_STORAGE (default: the
    SQLite file results/optuna.db when it exists; never created).
    """
    environ = os.environ if environ is None else environ
    results = Path(environ.get(ENV_RESULTS) or DEFAULT_RESULTS_DIR).expanduser().resolve()
    storage = (environ.get(ENV_STORAGE) or "").strip() or None
    if storage:
        return DashboardConfig(results, storage, "from --storage")
    default_db = results / DEFAULT_STORAGE_FILE
    if default_db.is_file():
        return DashboardConfig(results, f"sqlite:///{default_db}", f"default ({default_db})")
    return DashboardConfig(results, None, f"no --storage given and no {default_db}")


# ---------------------------------------------------------------- runs and measurements


def results_signature(results_dir: str | os.PathLike) -> tuple:
    """(folder name, (mtime_ns, size) of its manifest, measurements and tuning result) of every
    run: changes when any run's files do."""
    root = Path(results_dir)
    if not root.is_dir():
        return ()
    out = []
    for sub in sorted(root.iterdir()):
        key = file_key(sub / MANIFEST)
        if key is not None:
            out.append(
                (sub.name, key, file_key(sub / MEASUREMENTS), file_key(sub / TUNING_FILE))
            )
    return tuple(out)


def file_key(path: str | os.PathLike) -> tuple[int, int] | None:
    """(mtime_ns, size) of a file, None when it is absent."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


@st.cache_data(show_spinner=False, max_entries=8)
def _list_runs(results_dir: str, signature: tuple) -> list[dict]:
    runs = list_runs(results_dir)
    for run in runs:
        path = Path(run["path"])
        problems = []
        run["has_measurements"] = (path / MEASUREMENTS).is_file()
        if run["has_measurements"]:
            error = parquet_problem(path / MEASUREMENTS)
            if error:
                problems.append(f"{MEASUREMENTS} cannot be read ({error})")
        run["has_tuning"] = False
        if (path / TUNING_FILE).is_file():
            loaded = tuning_result(path)
            run["has_tuning"] = loaded.ok
            if not loaded.ok:
                problems.append(f"{TUNING_FILE} is not a valid tuning result ({loaded.error})")
        run["problems"] = problems
    return runs


def runs(results_dir: str | os.PathLike) -> list[dict]:
    """Manifests of every run, newest first, with `path`, `has_tuning` (a valid tuning.json),
    `has_measurements` and `problems` (one line per file that cannot be read: a parquet whose
    footer or schema is broken, a tuning.json that is not a tuning result) added.
    An unreadable manifest gives status "corrupt" and its error (harness.store.list_runs)."""
    return _list_runs(str(results_dir), results_signature(results_dir))


def parquet_problem(path: str | os.PathLike) -> str | None:
    """Why a Parquet file cannot be read (its footer and schema; cheap: no data pages), or None.
    A half-written file of a run still going may show up here until it is complete."""
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path).schema.to_arrow_schema()
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one message on the page
        return one_line(exc)
    return None


@dataclass(frozen=True)
class Loaded:
    """A loaded value, or the reason it could not be loaded (error: one line for the page)."""

    value: object = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def one_line(exc: BaseException) -> str:
    """`Type: message` on one line, at most 400 characters (for a message on a page)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:400]


@st.cache_data(show_spinner=False, max_entries=16)
def _read_measurements(path: str, key: tuple) -> tuple[pd.DataFrame | None, str | None]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        columns = [c for c in schema.names if c not in PER_REQUEST_COLUMNS]
        frame = pq.read_table(path, columns=columns).to_pandas()
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one message on the page
        return None, f"{path} could not be read ({one_line(exc)})"
    return frame, None


def _measurement_file(run_dir: str | os.PathLike, reader) -> Loaded:
    """`reader(path, key)` ((frame, error), cached on the file's key) of the run's measurements
    file; an empty frame when the run has written none yet."""
    path = Path(run_dir) / MEASUREMENTS
    key = file_key(path)
    if key is None:
        return Loaded(pd.DataFrame())
    frame, error = reader(str(path), key)
    return Loaded(error=error) if error else Loaded(frame)


def measurements(run_dir: str | os.PathLike) -> Loaded:
    """The run's measurement rows without the per-request arrays (a DataFrame; empty when the run
    has written none yet), or the error that reading them gave."""
    return _measurement_file(run_dir, _read_measurements)


@st.cache_data(show_spinner=False, max_entries=16)
def _read_split_counts(path: str, key: tuple) -> tuple[pd.DataFrame | None, str | None]:
    import pyarrow.parquet as pq

    try:
        columns = [c for c in ("case_id", "series", "policy", "splits")
                   if c in pq.read_schema(path).names]
        frame = pq.read_table(path, columns=columns).to_pandas()
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one message on the page
        return None, f"{path} could not be read ({one_line(exc)})"
    return frame, None


def split_counts(run_dir: str | os.PathLike) -> Loaded:
    """The run's pieces per request (`splits`) by case and series: what the latency page's
    heuristic verdict needs to tell identical launches apart, read only for runs that bench a
    heuristic file (the measurements() frame leaves the per-request arrays out)."""
    return _measurement_file(run_dir, _read_split_counts)


@st.cache_data(show_spinner=False, max_entries=64)
def _read_case_rows(path: str, key: tuple, case_id: str) -> tuple[list[dict] | None, str | None]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, filters=[("case_id", "=", case_id)])
    except Exception as exc:  # noqa: BLE001
        return None, f"{path} could not be read ({one_line(exc)})"
    rows = table.to_pylist()
    return rows, None


def case_rows(run_dir: str | os.PathLike, case_id: str) -> Loaded:
    """Every row (all columns, per-request lists included) of one case of a run: a list of dicts."""
    path = Path(run_dir) / MEASUREMENTS
    key = file_key(path)
    if key is None:
        return Loaded(error=f"run {Path(run_dir).name} has no {MEASUREMENTS}")
    rows, error = _read_case_rows(str(path), key, case_id)
    return Loaded(error=error) if error else Loaded(rows)


@st.cache_data(show_spinner=False, max_entries=16)
def _read_tuning(path: str, key: tuple) -> tuple[TuningResult | None, str | None]:
    try:
        return TuningResult.from_dict(json.loads(Path(path).read_text())), None
    except Exception as exc:  # noqa: BLE001
        return None, f"{path} is not a valid tuning result ({one_line(exc)})"


def tuning_result(run_dir: str | os.PathLike) -> Loaded:
    """The run's TuningResult (tuning.json), or why there is none."""
    path = Path(run_dir) / TUNING_FILE
    key = file_key(path)
    if key is None:
        return Loaded(
            error=f"run {Path(run_dir).name} has no {TUNING_FILE} (not a finished tuning run)"
        )
    result, error = _read_tuning(str(path), key)
    return Loaded(error=error) if error else Loaded(result)


def tuning_json_bytes(run_dir: str | os.PathLike) -> bytes:
    """The tuning.json file as stored (for a download)."""
    return (Path(run_dir) / TUNING_FILE).read_bytes()


# ---------------------------------------------------------------- derived, cached


@st.cache_data(show_spinner=False, max_entries=256)
def policy_thresholds(
    name: str, params_json: str, shape: dict, device: dict, max_batch: int, long_tokens: int
) -> tuple[list[dict] | None, str | None]:
    """(rules, note): the threshold rules (Threshold.to_dict()) of one stored policy for a run's
    shape and device, and a note for the page; rules is None when they cannot be computed (an
    unknown policy, say), and the note says why."""
    from kvtune.dashboard.thresholds import policy_thresholds as compute
    from kvtune.kernels.plan import AttentionShape, DeviceSpec

    try:
        params = json.loads(params_json or "{}")
        shape_spec, device_spec = AttentionShape(**shape), DeviceSpec(**device)
    except Exception as exc:  # noqa: BLE001
        return None, f"{name}: no thresholds ({one_line(exc)})"
    note = None
    try:
        rules = compute(name, params, shape_spec, device_spec, max_batch, long_tokens)
    except ValueError as exc:
        # Parameters stored by an older kvtune may no longer be accepted: fall back to the
        # policy's current defaults, and say so.
        try:
            rules = compute(name, {}, shape_spec, device_spec, max_batch, long_tokens)
        except Exception:  # noqa: BLE001
            return None, f"{name}: no thresholds ({one_line(exc)})"
        note = (
            f"{name}: its stored parameters are not accepted now ({one_line(exc)}); "
            "rules use its current defaults"
        )
    except Exception as exc:  # noqa: BLE001
        return None, f"{name}: no thresholds ({one_line(exc)})"
    return [r.to_dict() for r in rules], note


@st.cache_data(show_spinner=False, max_entries=32)
def replay(row: dict, device: dict):
    """The simulated timeline of a stored row (dashboard.replay.replay_row), or the reason it
    cannot be rebuilt: (Replay | None, error | None)."""
    from kvtune.dashboard.replay import replay_row
    from kvtune.kernels.plan import DeviceSpec

    try:
        return replay_row(row, DeviceSpec(**device)), None
    except Exception as exc:  # noqa: BLE001
        return None, one_line(exc)


__all__ = [
    "DashboardConfig",
    "Loaded",
    "case_rows",
    "config_from_env",
    "file_key",
    "measurements",
    "one_line",
    "policy_thresholds",
    "replay",
    "results_signature",
    "runs",
    "tuning_json_bytes",
    "tuning_result",
]

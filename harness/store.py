"""Results on disk: one folder per run, `results/<run-id>/`.

A run folder holds `manifest.json` (command, versions, device, backend, seed, status) and
`measurements.parquet` (one row per case and policy). The manifest says `"status": "running"`
until the run has written all its rows; only then does it become `"complete"`. A run that fails
ends `"failed"` with its error, and keeps the rows it measured in `measurements.parquet`. Every
file is written to a temporary name and renamed into place, so a crash never leaves a half
written file, and nothing outside the run's own folder is touched.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

MANIFEST = "manifest.json"
MEASUREMENTS = "measurements.parquet"
RUN_STATUSES = ("running", "complete", "failed")


def new_run_id(kind: str = "bench", now: _dt.datetime | None = None) -> str:
    """`<UTC date>-<time>-<kind>-<4 hex>`: sorts by time, unique across concurrent runs."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{kind}-{secrets.token_hex(2)}"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=json_default) + "\n").encode())


def json_default(obj):
    """JSON for numpy scalars and arrays, datetimes and paths (json.dumps `default=`)."""
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (_dt.datetime, _dt.date)):
        return obj.isoformat()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


@dataclass
class RunWriter:
    """Creates a run folder and keeps its manifest and rows consistent on disk."""

    root: Path
    run_id: str
    manifest: dict

    @classmethod
    def create(cls, results_dir: str | os.PathLike, manifest: dict, kind: str = "bench") -> "RunWriter":
        root = Path(results_dir)
        root.mkdir(parents=True, exist_ok=True)
        for _ in range(10):
            run_id = new_run_id(kind)
            try:
                (root / run_id).mkdir()
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - ten collisions of 16 random bits in one second
            raise RuntimeError("could not create a unique run folder")
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        man = {**manifest, "run_id": run_id, "status": "running", "started_at": started}
        writer = cls(root / run_id, run_id, man)
        atomic_write_json(writer.root / MANIFEST, man)
        return writer

    def write_rows(self, rows: list[dict]) -> None:
        """Replace the run's measurements with `rows` (called as rows accumulate)."""
        frame = pd.DataFrame(rows)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".measurements.", suffix=".tmp")
        os.close(fd)
        try:
            frame.to_parquet(tmp, index=False)
            os.replace(tmp, self.root / MEASUREMENTS)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def update(self, **fields) -> None:
        self.manifest.update(fields)
        atomic_write_json(self.root / MANIFEST, self.manifest)

    def finish(self, status: str, error: str | None = None, **fields) -> None:
        if status not in RUN_STATUSES:
            raise ValueError(f"status: {status!r}; allowed: {', '.join(RUN_STATUSES)}")
        ended = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.update(status=status, ended_at=ended, error=error, **fields)


def list_runs(results_dir: str | os.PathLike) -> list[dict]:
    """Manifests of every run folder under `results_dir`, newest first; unreadable ones are
    reported with status "corrupt" instead of raising."""
    root = Path(results_dir)
    runs = []
    if not root.is_dir():
        return runs
    for sub in sorted(root.iterdir(), reverse=True):
        man_path = sub / MANIFEST
        if not man_path.is_file():
            continue
        try:
            man = json.loads(man_path.read_text())
        except (OSError, ValueError) as exc:
            man = {"run_id": sub.name, "status": "corrupt", "error": f"manifest unreadable: {exc}"}
        man.setdefault("run_id", sub.name)
        man["path"] = str(sub)
        runs.append(man)
    return runs


def load_measurements(run_dir: str | os.PathLike) -> pd.DataFrame:
    """The measurements of one run (empty frame when there are none yet)."""
    path = Path(run_dir) / MEASUREMENTS
    if not path.is_file():
        return pd.DataFrame()
    return pd.read_parquet(path)


def load_manifest(run_dir: str | os.PathLike) -> dict:
    return json.loads((Path(run_dir) / MANIFEST).read_text())

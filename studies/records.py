"""Every measurement of a tuning run, as rows of the run's measurements.parquet.

A row is the runner's row (harness/runner.py) plus where in the study it was taken:
  phase    "baseline" | "trial" | "finalist" | "oracle"
  study    the bucket's study name (`<study>/<bucket>`); bucket: "9-32"
  trial    the Optuna trial number (-1 outside trials); worker: worker index (0 in-process)
  round    finalist round, candidate: finalist index (-1 elsewhere)
The main process writes measurements.parquet; worker processes write
`measurements.worker-<i>.parquet` beside it, which the main process merges at the end. Every
write goes to a temporary file renamed into place, so a killed process leaves whole files.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

FLUSH_EVERY_ROWS = 500
PHASES = ("baseline", "trial", "finalist", "oracle", "validation", "buckets")
PART_GLOB = "measurements.worker-*.parquet"


class RowRecorder:
    """Collects rows and rewrites `path` with all of them every FLUSH_EVERY_ROWS rows and on flush."""

    def __init__(self, path: str | os.PathLike | None, worker: int = 0) -> None:
        self.path = Path(path) if path is not None else None
        self.worker = worker
        self.rows: list[dict] = []
        self._unflushed = 0

    def add(self, row: dict, *, phase: str, study: str, bucket: str, trial: int = -1,
            round_index: int = -1, candidate: int = -1) -> dict:
        if phase not in PHASES:
            raise ValueError(f"phase: {phase!r}; allowed: {', '.join(PHASES)}")
        row = {**row, "phase": phase, "study": study, "bucket": bucket, "trial": int(trial),
               "worker": self.worker, "round": int(round_index), "candidate": int(candidate)}
        self.rows.append(row)
        self._unflushed += 1
        if self._unflushed >= FLUSH_EVERY_ROWS:
            self.flush()
        return row

    def flush(self) -> None:
        if self.path is None or not self.rows:
            return
        write_parquet_atomic(self.path, pd.DataFrame(self.rows))
        self._unflushed = 0


def write_parquet_atomic(path: Path, frame: pd.DataFrame) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def worker_part_path(run_dir: str | os.PathLike, worker: int) -> Path:
    return Path(run_dir) / f"measurements.worker-{worker}.parquet"


def merge_parts(run_dir: str | os.PathLike, main_rows: list[dict]) -> list[dict]:
    """The main rows plus every worker part's rows; the parts are removed once merged."""
    rows = list(main_rows)
    parts = sorted(Path(run_dir).glob(PART_GLOB))
    for part in parts:
        rows.extend(pd.read_parquet(part).to_dict("records"))
    return rows


def remove_parts(run_dir: str | os.PathLike) -> None:
    for part in Path(run_dir).glob(PART_GLOB):
        part.unlink(missing_ok=True)


__all__ = [
    "PHASES",
    "RowRecorder",
    "merge_parts",
    "remove_parts",
    "worker_part_path",
    "write_parquet_atomic",
]

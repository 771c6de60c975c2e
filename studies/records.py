"""Every measurement of a tuning run, as rows of the run's measurements.parquet.

A row is the runner's row (harness/runner.py) plus where in the study it was taken:
  phase    "baseline" | "trial" | "finalist" | "oracle"
  study    the bucket's study name (`<study>/<bucket>`); bucket: "9-32"
  trial    the Optuna trial number (-1 outside trials); worker: worker index (0 in-process)
  round    finalist round, candidate: finalist index (-1 elsewhere)
Rows are durable per trial: every process (the main one and each worker) appends the rows it
took since its last flush as a new part file `measurements.part-w<worker>-<pid>-<seq>.parquet`
(written to a temporary name, fsync'd, renamed into place), and flushes after every trial. So a
SIGKILL loses at most the trial in progress: every finished trial has its rows on disk. The main
process folds the parts into measurements.parquet at the end (harness.store.merge_run_parts),
and a later `kvtune tune` (or listing the runs) does it for a run whose process was killed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from kvtune.harness.store import PART_GLOB, merge_run_parts, write_parquet_atomic

FLUSH_EVERY_ROWS = 500  # a flush also happens at this many rows within one long trial
PHASES = ("baseline", "trial", "finalist", "oracle", "validation", "buckets")


class RowRecorder:
    """Collects rows (all of them in `rows`) and appends the unflushed ones to `run_dir` as a
    new part file on every flush (None: memory only, for tests)."""

    def __init__(self, run_dir: str | os.PathLike | None, worker: int = 0) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.worker = worker
        self.rows: list[dict] = []
        self._flushed = 0
        self._parts = 0

    def add(self, row: dict, *, phase: str, study: str, bucket: str, trial: int = -1,
            round_index: int = -1, candidate: int = -1) -> dict:
        if phase not in PHASES:
            raise ValueError(f"phase: {phase!r}; allowed: {', '.join(PHASES)}")
        row = {**row, "phase": phase, "study": study, "bucket": bucket, "trial": int(trial),
               "worker": self.worker, "round": int(round_index), "candidate": int(candidate)}
        self.rows.append(row)
        if len(self.rows) - self._flushed >= FLUSH_EVERY_ROWS:
            self.flush()
        return row

    def flush(self) -> None:
        """Append the rows since the last flush as one part file (durable when it returns)."""
        if self.run_dir is None or self._flushed >= len(self.rows):
            return
        new = self.rows[self._flushed:]
        self._parts += 1
        name = f"measurements.part-w{self.worker:03d}-{os.getpid()}-{self._parts:06d}.parquet"
        write_parquet_atomic(self.run_dir / name, pd.DataFrame(new), sync=True)
        self._flushed = len(self.rows)

    def on_trial(self, study=None, trial=None) -> None:
        """Optuna callback: flush after every finished trial."""
        self.flush()


def merge_parts(run_dir: str | os.PathLike) -> list[dict]:
    """Every row of the run (its measurements.parquet plus all parts, which are removed once
    merged), as a list of rows."""
    merge_run_parts(run_dir)
    path = Path(run_dir) / "measurements.parquet"
    return pd.read_parquet(path).to_dict("records") if path.is_file() else []


def finish_failed(writer, recorder: RowRecorder, exc: BaseException) -> None:
    """Close a run stopped by `exc` (a harness.store.RunWriter): its rows so far flushed and
    merged, the manifest marked failed with the error on one line; nothing stored is lost."""
    recorder.flush()
    rows = merge_parts(writer.root)
    writer.finish("failed", error=" ".join(f"{type(exc).__name__}: {exc}".split()),
                  rows=len(rows))


def finish_complete(writer, recorder: RowRecorder) -> None:
    """Close a finished run: rows flushed and merged, the manifest marked complete with its row
    and failed-row counts."""
    recorder.flush()
    rows = merge_parts(writer.root)
    writer.finish("complete", rows=len(rows),
                  failed_rows=sum(1 for r in rows if r["status"] != "ok"))


__all__ = [
    "FLUSH_EVERY_ROWS",
    "PART_GLOB",
    "PHASES",
    "RowRecorder",
    "finish_complete",
    "finish_failed",
    "merge_parts",
    "write_parquet_atomic",
]

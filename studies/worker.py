"""A worker process of `kvtune tune --workers N`: `python -m studies.worker INDEX`.

It reads its orders as JSON on stdin (the run's TuneConfig, its share of each bucket's trials,
the deadline, the run folder; stdin keeps storage credentials off the disk), builds the same
context as the main process (on its own GPU where CUDA_VISIBLE_DEVICES names one), and works on
the buckets' studies in order. Its measurements go to part files in the run folder, one per
trial (studies/records.py), which the main process merges. Exit 0 when done, 2 with one line on
bad input. A worker dies with the main process: the kernel kills it when its parent exits
(PR_SET_PDEATHSIG on Linux), and it checks after every trial that its parent is still the one
that started it (elsewhere, and for the moment between fork and prctl).
"""

from __future__ import annotations

import json
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int | None) -> None:
    """Have the kernel SIGKILL this process when its parent exits (Linux), and exit now if the
    parent is already gone (it died before the prctl)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl: the check remains
            pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(3)


class ParentWatch:
    """Optuna callback: stop the worker (exit 3) when the process that started it is gone."""

    def __init__(self, parent_pid: int | None) -> None:
        self.parent_pid = parent_pid

    def __call__(self, study=None, trial=None) -> None:
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            os._exit(3)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from kvtune.studies.config import TuneConfig
    from kvtune.studies.objective import BASELINES_ATTR
    from kvtune.studies.records import RowRecorder
    from kvtune.studies.storage import default_storage_url, open_storage
    from kvtune.studies.study import (
        create_or_load,
        deadline_share,
        prepare,
        search,
        silence_optuna,
        stderr_line,
    )

    silence_optuna()
    index = int(argv[0])
    orders = json.loads(sys.stdin.read())
    parent = orders.get("parent_pid")
    die_with_parent(parent)
    watch = ParentWatch(parent)
    ctx = None
    recorder = RowRecorder(orders["run_dir"], worker=index)

    def on_trial(study, trial) -> None:
        recorder.flush()  # this trial's rows are on disk before the next one starts
        watch()
    try:
        config = TuneConfig.from_dict(orders["config"])
        ctx = prepare(config, worker=True)
        ctx.runner.run_id = orders["run_id"]
        from kvtune.harness.backends.select import check_cases_fit

        check_cases_fit(ctx.opened.backend, [c for _, cases in ctx.buckets for c in cases])
        storage = open_storage(config.storage or (None if config.journal else default_storage_url(config.out)),
                               config.journal, heartbeat_s=config.heartbeat_s)
        for k, (bucket, cases) in enumerate(ctx.buckets):
            study = create_or_load(ctx, storage, bucket, worker=index + 1, parallel=True)
            table = study.user_attrs[BASELINES_ATTR]
            baselines = {c.case_id: table[c.case_id] for c in cases}

            def fail_line(number, reason, name=study.study_name):
                stderr_line(f"{name} trial {number} failed (worker {index}): {reason}")

            search(ctx, study, cases, baselines, recorder, n_trials=orders["shares"][bucket.name][index],
                   timeout_s=deadline_share(orders["deadline"], len(ctx.buckets) - k),
                   on_trial=on_trial, on_fail=fail_line)
            recorder.flush()
        return 0
    except ValueError as exc:
        print(f"kvtune tune worker {index}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    finally:
        recorder.flush()
        if ctx is not None:
            ctx.opened.backend.close()


if __name__ == "__main__":
    sys.exit(main())

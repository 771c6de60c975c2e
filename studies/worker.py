"""A worker process of `kvtune tune --workers N`: `python -m studies.worker INDEX`.

It reads its orders as JSON on stdin (the run's TuneConfig, its share of each bucket's trials,
the deadline, the run folder; stdin keeps storage credentials off the disk), builds the same
context as the main process (on its own GPU where CUDA_VISIBLE_DEVICES names one), and works on
the buckets' studies in order. Its measurements go to `measurements.worker-<INDEX>.parquet` in
the run folder, which the main process merges. Exit 0 when done, 2 with one line on bad input.
"""

from __future__ import annotations

import json
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from kvtune.studies.config import TuneConfig
    from kvtune.studies.objective import BASELINES_ATTR
    from kvtune.studies.records import RowRecorder, worker_part_path
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
    ctx = None
    recorder = RowRecorder(worker_part_path(orders["run_dir"], index), worker=index)
    try:
        config = TuneConfig.from_dict(orders["config"])
        ctx = prepare(config, worker=True)
        ctx.runner.run_id = orders["run_id"]
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
                   on_fail=fail_line)
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

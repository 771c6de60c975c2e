"""One Optuna study per batch-size bucket: creating it, seeding it, searching, and its result.

A run of `kvtune tune --study NAME` works on the studies `NAME/<bucket>` (e.g. "demo/9-32"), one
per bucket of the suite (studies/buckets.py). Each study keeps in its user attributes what a
later process needs to continue it: the configuration it was created with (`kvtune_config`, a
resumed run must match it), the baseline latencies (`kvtune_baselines`), and at the end the
bucket's result (`kvtune_result`, studies/result.py). `TuneContext` is everything a process
(the main one or a worker) builds from a TuneConfig before it measures anything.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from optuna.exceptions import UpdateFinishedTrialError

from kvtune.studies.buckets import BatchBucket, assign_cases, parse_buckets
from kvtune.studies.config import TuneConfig
from kvtune.studies.objective import (
    BASELINES_ATTR,
    START_POINT_ATTR,
    BucketObjective,
    ConfigFailed,
    measure_baselines,
)
from kvtune.studies.rules import split_rule
from kvtune.studies.samplers import check_sampler, make_pruner, make_sampler, worker_seed
from kvtune.studies.space import SearchSpace, space_for, trial_params
from kvtune.studies.start_points import start_points
from kvtune.studies.storage import (
    counted_trials,
    default_storage_url,
    fail_dead_trials,
    serialize_waiting_trial_pops,
    storage_file,
)

CONFIG_ATTR = "kvtune_config"


@dataclass
class TuneContext:
    """What a process needs to work on a run's studies (built by `prepare`)."""

    config: TuneConfig
    shape: object
    suite: object
    buckets: list  # [(BatchBucket, [CaseRun])]
    opened: object  # harness.backends.select.OpenedBackend
    runner: object  # harness.runner.Runner
    space: SearchSpace
    baselines: list  # [(label, Policy)]
    validation: list = None  # [CaseRun] the search never sees (studies/validation.py)
    validation_how: str = ""
    stress_ids: tuple = ()
    bucket_rows: list = None  # --buckets auto: the chunk grid's rows, stored by the run

    def study_name(self, bucket: BatchBucket) -> str:
        return f"{self.config.study}/{bucket.name}"

    def fingerprint(self, cases) -> dict:
        """What must not change between a study and its resumption."""
        return {
            "cases": [c.case_id for c in cases],
            "baselines": [label for label, _ in self.baselines],
            "space": self.space.to_dict(),
            "device": self.opened.device.name,
            "backend": self.opened.backend.name,
            "shape": self.shape.to_dict(),
            "objective": self.config.objective,
        }


def validate(config: TuneConfig):
    """Check every setting that needs no device; returns (shape, suite, baselines, buckets)."""
    from kvtune.harness.backends.select import check_choices
    from kvtune.kernels.policies import from_specs
    from kvtune.workloads.selection import resolve_shape, resolve_suite

    shape = resolve_shape(config.case_settings())
    suite = resolve_suite(config.case_settings(), shape)
    check_sampler(config.sampler_name)
    make_pruner(config.pruner)
    labels = [s.strip() for s in config.baselines.split(",") if s.strip()]
    policies = from_specs(config.baselines)
    if len(set(labels)) != len(labels):
        raise ValueError(f"baselines: {config.baselines!r} names a policy twice")
    buckets = parse_buckets(config.buckets) if config.buckets and config.buckets != "auto" else None
    check_choices(config.backend, config.device_model, config.timer, config.stopping)
    return shape, suite, list(zip(labels, policies)), buckets


def prepare(config: TuneConfig, *, worker: bool = False) -> TuneContext:
    """Validate `config`, draw the suite's batches and open the backend (writes nothing).

    worker: a worker process on the simulator opens it directly (the main process recorded the
    environment already; the record imports torch, which costs a worker seconds of start-up).
    """
    from kvtune.harness.runner import CaseRun, Runner
    from kvtune.studies.validation import split_cases

    shape, suite, baselines, buckets = validate(config)
    split = split_cases(suite, config.validate, shape, stress=config.stress)
    cases = [CaseRun(c.case_id, c.batch()) for c in split.train]
    held = [CaseRun(c.case_id, c.batch()) for c in split.validation]
    if buckets is not None or config.buckets != "auto":
        assign_cases(cases, buckets, size=lambda c: c.batch.batch_size)  # refused before opening
    opened = _open_backend(config, worker)
    try:
        space = space_for(opened.device, shape, opened.backend, config.space)
        split_rule(opened.backend)  # a backend declaring an unknown rule is refused up front
        runner = Runner(opened.backend, opened.device, opened.ceiling_bytes_per_s)
        if config.buckets == "auto":
            from kvtune.studies.buckets_auto import search_buckets

            grid_rows = _Collect()
            buckets = search_buckets(runner, cases, config.max_buckets, grid_rows)
            if not worker:
                stderr_line("kvtune tune: --buckets auto found " + ",".join(b.name for b in buckets)
                            + " (pass them as --buckets to resume with the same studies)")
        assigned = assign_cases(cases, buckets, size=lambda c: c.batch.batch_size)
    except BaseException:
        opened.backend.close()
        raise
    return TuneContext(config, shape, suite, assigned, opened, runner, space, baselines, held,
                       split.how, tuple(c.case_id for c in split.stress),
                       grid_rows.rows if config.buckets == "auto" else [])


class _Collect:
    """Holds rows measured before the run's recorder exists (RowRecorder.add's signature)."""

    def __init__(self) -> None:
        self.rows: list = []

    def add(self, row: dict, **where) -> None:
        self.rows.append((row, where))


def _open_backend(config: TuneConfig, worker: bool):
    from kvtune.harness.backends.select import OpenedBackend, open_backend

    if worker and config.backend == "simulator" and config.device_model:
        from kvtune.harness.backends import backend_class
        from kvtune.harness.device import sim_model

        model = sim_model(config.device_model)  # a preset or a calibration file, its constants
        device = model.device
        backend = backend_class("simulator")(device, model.constants, kernel=model.kernel,
                                             calibrated=model.calibrated)
        return OpenedBackend(backend, device, device.hbm_bytes_per_s,
                             "datasheet bandwidth", f"simulated ({device.name}): {model.label}", {})
    return open_backend(config.backend, device_model_name=config.device_model,
                        timer=config.timer, cold_l2=not config.warm_l2, stopping=config.stopping)


def create_or_load(ctx: TuneContext, storage, bucket: BatchBucket, *, worker: int = 0,
                   parallel: bool = False):
    """The bucket's study (created when missing), with this process's sampler and pruner."""
    import optuna

    config = ctx.config
    name = ctx.study_name(bucket)
    directions = ["minimize", "minimize"] if config.multi_objective else ["minimize"]
    probe = optuna.create_study(storage=storage, study_name=name, directions=directions,
                                load_if_exists=True)
    done = counted_trials(probe)
    n_start = len(start_points(ctx.space))
    # Separate --resume processes on one storage each draw their own configurations.
    process = os.getpid() if config.resume else None
    sampler = make_sampler(config.sampler_name, seed=worker_seed(config.seed, worker, done, process),
                           space=ctx.space, parallel=parallel, n_trials=config.trials)
    pruner = make_pruner(config.pruner, n_startup_trials=max(5, n_start))
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)


def check_resumable(ctx: TuneContext, study, cases) -> None:
    """ValueError when `study` was created with other settings than this run's."""
    stored = study.user_attrs.get(CONFIG_ATTR)
    if stored is None:
        return
    now = ctx.fingerprint(cases)
    for key, value in now.items():
        if stored.get(key) != value:
            raise ValueError(
                f"resume: study {study.study_name} was created with another {key} "
                f"({_short(stored.get(key))}, this run: {_short(value)}); use the same settings "
                "or another --study")


def seed_study(ctx: TuneContext, study, cases, recorder, *, warn=print) -> dict:
    """Store the fingerprint, measure the missing baselines, enqueue the start points (not for
    the grid sampler, whose grid holds them).
    Returns the baseline table {case_id: {label: latency_us}}."""
    check_resumable(ctx, study, cases)
    if CONFIG_ATTR not in study.user_attrs:
        study.set_user_attr(CONFIG_ATTR, ctx.fingerprint(cases))
    bucket = study.study_name.rsplit("/", 1)[1]
    known = study.user_attrs.get(BASELINES_ATTR, {})
    table = measure_baselines(ctx.runner, cases, ctx.baselines, recorder,
                              study_name=study.study_name, bucket=bucket, known=known, warn=warn)
    if table != known:
        study.set_user_attr(BASELINES_ATTR, table)
    # The grid sampler visits every grid point, start points included (they are grid points),
    # and an enqueued trial would take the place of a grid point it does not mark as visited.
    for label, params in ([] if ctx.config.sampler_name == "grid" else start_points(ctx.space)):
        study.enqueue_trial(trial_params(params), user_attrs={START_POINT_ATTR: label},
                            skip_if_exists=True)
    return {c.case_id: table[c.case_id] for c in cases}


class StopAtTarget:
    """Optuna callback: stop this process once the study has `target` counted trials (several
    processes or hosts share a study; each stops when the shared count is reached)."""

    def __init__(self, target: int) -> None:
        self.target = target

    def __call__(self, study, trial) -> None:
        if counted_trials(study) >= self.target:
            study.stop()


def search(ctx: TuneContext, study, cases, baselines_us: dict, recorder, *, n_trials: int,
           timeout_s: float | None = None, on_trial=None, on_fail=None) -> None:
    """Run up to `n_trials` trials of this process on `study` (fewer when the study reaches
    --trials counted trials or `timeout_s` passes). Trials left RUNNING by dead processes of this
    host are failed first."""
    fail_dead_trials(study)
    if n_trials <= 0:
        return
    cfg = ctx.config
    if not cfg.journal:
        db = storage_file(cfg.storage or default_storage_url(cfg.out), None)
        if db is not None:  # SQLite: several processes may pop the same start point
            serialize_waiting_trial_pops(study, db)
    bucket = study.study_name.rsplit("/", 1)[1]
    objective = BucketObjective(ctx.runner, cases, baselines_us, ctx.space, recorder,
                                study.study_name, bucket, ctx.config.multi_objective, on_fail,
                                robust=ctx.config.robust)
    callbacks = [StopAtTarget(ctx.config.trials)]
    if on_trial is not None:
        callbacks.append(on_trial)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with _quiet_optuna():
        for _ in range(MAX_LOST_RACES + 1):
            left_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                study.optimize(objective, n_trials=n_trials, timeout=left_s,
                               catch=(ConfigFailed,), callbacks=callbacks, gc_after_trial=False)
                return
            except (ValueError, UpdateFinishedTrialError) as exc:
                if not lost_waiting_trial_race(exc):
                    raise
            # SQLite has no row locks, so two processes can both take the same enqueued trial
            # (a start point); the other one told it first. That trial was measured twice (its
            # rows are kept); go on with what is left of --trials.
            n_trials = min(n_trials, remaining_trials(ctx, study))
            if n_trials <= 0 or (deadline is not None and time.monotonic() >= deadline):
                return
        raise ValueError("workers: lost the race for an enqueued trial more than "
                         f"{MAX_LOST_RACES} times; use --journal for many processes on one host")


# How often one process may find that another told the trial it was running (see search).
MAX_LOST_RACES = 20


def lost_waiting_trial_race(exc: BaseException) -> bool:
    """Whether Optuna's error says another process finished the trial this one was running: its
    tell ("Cannot tell a COMPLETE trial") or a write to it (UpdateFinishedTrialError) failed."""
    if isinstance(exc, UpdateFinishedTrialError):
        return True
    return str(exc).startswith("Cannot tell a ") and "RUNNING" not in str(exc)


def remaining_trials(ctx: TuneContext, study) -> int:
    return max(0, ctx.config.trials - counted_trials(study))


def best_so_far(study) -> float | None:
    """The best geometric-mean score of the complete trials, or None."""
    from optuna.trial import TrialState

    values = [t.values[0] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    return min(values) if values else None


def silence_optuna() -> None:
    """Keep Optuna's own chatter (study created, experimental features) off the terminal:
    kvtune prints its progress bars, one line per failed trial, and the report."""
    import warnings

    import optuna
    from optuna.exceptions import ExperimentalWarning

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=ExperimentalWarning)


class _quiet_optuna:
    """Optuna logs every trial; kvtune prints its own progress and one line per failure."""

    def __enter__(self):
        import optuna

        self._level = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.ERROR)

    def __exit__(self, *exc):
        import optuna

        optuna.logging.set_verbosity(self._level)


def deadline_share(deadline: float | None, buckets_left: int) -> float | None:
    """Seconds this bucket may search: an equal share of what is left before `deadline`."""
    if deadline is None:
        return None
    return max(0.001, (deadline - time.time()) / max(1, buckets_left))


def stderr_line(text: str) -> None:
    try:
        from tqdm import tqdm

        tqdm.write(text, file=sys.stderr)
    except ImportError:  # pragma: no cover
        print(text, file=sys.stderr)


def _short(value) -> str:
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = [
    "CONFIG_ATTR",
    "StopAtTarget",
    "TuneContext",
    "best_so_far",
    "check_resumable",
    "create_or_load",
    "deadline_share",
    "prepare",
    "remaining_trials",
    "search",
    "seed_study",
    "silence_optuna",
    "validate",
]

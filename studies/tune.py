"""A whole tuning run: every bucket's study searched, its finalists chosen, the result written.

Order of work (nothing is written before every setting has been checked and the storage opened):
1. validate the settings and the output folder, draw the suite, open the backend, refuse a batch
   that cannot fit in the GPU's free memory, open the storage; refuse an existing study without
   --resume, or a resumed one created with other settings (kvtune.cli.tune first makes the
   study's stored settings, SETTINGS_ATTR, the defaults of a --resume); earlier runs whose
   process is gone are marked "killed" with their rows merged (harness/store.py). A storage
   file this run created is removed again when the run fails before a study is in it;
2. create results/<run-id>/ (manifest kind "tune", status "running", this process's identity);
3. per bucket: create or load `<study>/<bucket>`, measure the missing baselines, enqueue the
   start points;
4. search: in this process (--workers 1), or in N worker processes sharing the storage
   (studies/worker.py), each taking an equal share of every bucket's remaining trials;
5. per bucket: the top configurations (and the makespan-family candidates) re-measured
   interleaved and the winner chosen on training cases (studies/finalists.py); then measured on
   the held-out validation cases next to the engine's own planner and the baselines, and the
   bucket defers to that planner unless the winner beats it (studies/validation.py,
   studies/validation_step.py); the oracle when asked (studies/oracle.py);
   every configuration is planned with the backend's rule (studies/rules.py), which the result
   records as `rule` for the tuned table; the bucket's result goes into its study (user
   attribute `kvtune_result`) as soon as it is decided, so that a run stopped in a later bucket
   keeps it: a --resume with the same --trials that finds a bucket finished on the trials it
   still holds (none added) keeps that result, and neither searches that bucket nor measures
   its finalists and validation again;
6. tuning.json, summary.json, the measurements and the manifest ("complete"); the run's fields
   are stored in each bucket's study too (`kvtune_run`).
Rows are durable per trial: every process appends a part file after each trial
(studies/records.py), merged into measurements.parquet at the end. Workers die with this process
(studies/worker.py). With stdout not a terminal, a `progress:` line per tenth of --trials (or
every PROGRESS_LINE_S seconds) says the bucket, trials done and best score.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from kvtune.harness.redact import redact_tree
from kvtune.studies.config import SETTINGS_ATTR, TuneConfig, stored_settings_of
from kvtune.studies.finalists import (
    PER_BATCH_CANDIDATES,
    choose,
    measure_finalists,
    runners_up,
    top_configs,
)
from kvtune.studies.records import RowRecorder, finish_failed, merge_parts
from kvtune.studies.report import SUMMARY_FILE, build_summary, format_report, regret_geomean
from kvtune.studies.result import (
    RESULT_ATTR,
    RUN_ATTR,
    BucketResult,
    CaseEvidence,
    TuningResult,
    save_tuning_result,
)
from kvtune.studies.rules import rule_mismatch, split_rule, trial_policy
from kvtune.studies.start_points import start_points
from kvtune.studies.storage import (
    counted_trials,
    fail_dead_trials,
    default_storage_url,
    describe_storage,
    existing_studies,
    open_storage,
    remove_if_unused,
    storage_file,
)
from kvtune.studies.study import (
    best_so_far,
    check_resumable,
    create_or_load,
    deadline_share,
    prepare,
    remaining_trials,
    search,
    seed_study,
    silence_optuna,
    stderr_line,
)
from kvtune.studies.validation import REGRESSION_LIMIT
from kvtune.studies.validation_step import MAX_RUNNERS_UP, validate_with_runners_up

KERNELS = {"triton": "triton-splitkv", "flashinfer": "flashinfer-tensor-core"}
REPO_ROOT = Path(__file__).resolve().parent.parent
# The --trials under which a bucket's stored result (RESULT_ATTR) was decided (_kept_result).
RESULT_TRIALS_ATTR = "kvtune_result_trials"
POLL_S = 0.5
PROGRESS_LINE_S = 30.0  # at least one progress line this often when stdout is not a terminal


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def run_tune(config: TuneConfig, command: str = "") -> Path:
    """Run the tuning described by `config`; returns the run folder. ValueError for bad input."""
    import optuna
    from kvtune.harness.backends.select import check_cases_fit
    from kvtune.harness.store import RunWriter, check_output_dir, mark_killed_runs

    silence_optuna()
    check_output_dir(config.out)
    ctx = prepare(config)
    url = config.storage or (None if config.journal else default_storage_url(config.out))
    # A storage file this run creates is removed again if the run fails before any study is in it.
    new_file = storage_file(url, config.journal)
    new_file = new_file if new_file is not None and not new_file.exists() else None
    storage = None
    try:
        check_cases_fit(ctx.opened.backend, [c for _, cases in ctx.buckets for c in cases])
        storage = open_storage(url, config.journal, heartbeat_s=config.heartbeat_s)
        mark_killed_runs(config.out)  # a killed earlier run: its parts merged, status "killed"
        names = [ctx.study_name(b) for b, _ in ctx.buckets]
        existing = existing_studies(storage, names)
        shown = describe_storage(config.storage or default_storage_url(config.out), config.journal)
        if existing and not config.resume:
            raise ValueError(f"study: {config.study!r} already exists in {shown} (buckets "
                             f"{', '.join(n.rsplit('/', 1)[1] for n in existing)}); pass --resume "
                             "to continue it, or choose another --study")
        for bucket, cases in ctx.buckets:
            if ctx.study_name(bucket) in existing:
                check_resumable(ctx, optuna.load_study(study_name=ctx.study_name(bucket),
                                                       storage=storage), cases)
        gpus = _gpu_list(config)
        stderr_line(f"kvtune tune: {ctx.opened.notice}")
        writer = RunWriter.create(config.out, _manifest(ctx, command, shown), kind="tune")
        ctx.runner.run_id = writer.run_id
        recorder = RowRecorder(writer.root)
        for row, where in ctx.bucket_rows or []:  # --buckets auto: the chunk grid, measured first
            recorder.add(row, **where)
        try:
            result, extra = _run(ctx, storage, writer, recorder, shown, gpus)
        except BaseException as exc:
            finish_failed(writer, recorder, exc)
            raise
    except BaseException:
        if new_file is not None and storage is not None:
            remove_if_unused(new_file, storage)
        elif new_file is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{new_file}{suffix}").unlink(missing_ok=True)  # opened half-way, then failed
        raise
    finally:
        ctx.opened.backend.close()
    summary = build_summary(result, extra)
    print(format_report(result, summary))
    print(f"\nResults: {writer.root}/tuning.json, {writer.root}/{SUMMARY_FILE}, "
          f"{writer.root}/measurements.parquet; studies {config.study}/<bucket> in {shown}")
    return writer.root


def stored_settings(config: TuneConfig) -> dict | None:
    """The settings study `config.study` was created with (SETTINGS_ATTR of its first bucket
    study in config's storage), or None when it does not exist yet or predates them. Opening the
    storage creates nothing for an existing file; a missing SQLite file is not created."""
    import optuna

    silence_optuna()
    url = config.storage or (None if config.journal else default_storage_url(config.out))
    path = storage_file(url, config.journal)
    if path is not None and not path.exists():
        return None
    storage = open_storage(url, config.journal, heartbeat_s=config.heartbeat_s)
    prefix = f"{config.study}/"
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if summary.study_name.startswith(prefix) and isinstance(summary.user_attrs.get(SETTINGS_ATTR), dict):
            return dict(summary.user_attrs[SETTINGS_ATTR])
    return None


def _run(ctx, storage, writer, recorder, shown: str, gpus):
    from kvtune.harness.store import atomic_write_json

    config = ctx.config
    studies, baselines = {}, {}
    for bucket, cases in ctx.buckets:
        study = create_or_load(ctx, storage, bucket, parallel=config.workers > 1)
        if SETTINGS_ATTR not in study.user_attrs:  # the defaults of a later --resume
            study.set_user_attr(SETTINGS_ATTR, stored_settings_of(config))
        baselines[bucket.name] = seed_study(ctx, study, cases, recorder, warn=stderr_line)
        studies[bucket.name] = study
    recorder.flush()
    # Buckets an earlier run of this study decided under the same --trials, on the trials they
    # still hold: neither searched nor finished again (a run stopped by a time limit part-way
    # through step 5 goes on where it stopped).
    kept = {b.name: _kept_result(ctx, studies[b.name]) for b, _ in ctx.buckets}
    todo = [(b, cases) for b, cases in ctx.buckets if kept[b.name] is None]
    for name, result in kept.items():
        if result is not None:  # not searched, so search() does not fail its dead trials: here
            fail_dead_trials(studies[name])
    deadline = time.time() + config.timeout_s if config.timeout_s else None
    if config.workers == 1:
        for k, (bucket, cases) in enumerate(todo):
            study = studies[bucket.name]
            with _Bar(study, config) as bar:
                search(ctx, study, cases, baselines[bucket.name], recorder,
                       n_trials=remaining_trials(ctx, study),
                       timeout_s=deadline_share(deadline, len(todo) - k),
                       on_trial=_both(recorder.on_trial, bar.on_trial), on_fail=_fail_line(study))
    else:
        _run_workers(ctx, studies, deadline, writer, gpus,
                     skip={name for name, r in kept.items() if r is not None})
    results, extra = [], {}
    for bucket, cases in ctx.buckets:
        study = studies[bucket.name]
        if (kept_result := kept[bucket.name]) is not None:
            stderr_line(f"bucket {bucket.name}: kept the result an earlier run of this study "
                        f"decided with the same --trials, on the {kept_result.n_trials} trials it "
                        "holds")
            results.append(kept_result)
            continue
        finished = _finish_bucket(ctx, study, bucket, cases, baselines[bucket.name], recorder)
        if finished is None:
            continue
        results.append(finished[0])
        extra[bucket.name] = finished[1]
        # In the storage now, not only at the end: a run stopped while it finishes a later bucket
        # (a time limit's SIGTERM) keeps this one, and --resume does not measure it again.
        study.set_user_attr(RESULT_ATTR, redact_tree(finished[0].to_dict()))
        study.set_user_attr(RESULT_TRIALS_ATTR, config.trials)  # after it: a kill between the two
        # leaves no match, so the bucket is finished again rather than kept with a stale target
    recorder.flush()
    rows = merge_parts(writer.root)
    if not results:
        raise ValueError("study: no bucket has a complete trial (every configuration failed); "
                         "see the failure lines above")
    result = TuningResult(
        study=config.study, buckets=tuple(results), device=ctx.opened.device.to_dict(),
        shape=ctx.shape.to_dict(), kernel=_kernel(ctx), backend=ctx.opened.backend.name,
        simulated=not ctx.opened.device.live, provenance=_provenance(ctx, writer, shown),
        rule=split_rule(ctx.opened.backend))
    for b in results:
        studies[b.name].set_user_attr(RUN_ATTR, redact_tree(result.run_fields()))
    save_tuning_result(writer.root, result)
    atomic_write_json(writer.root / SUMMARY_FILE, build_summary(result, extra))
    failed = sum(1 for r in rows if r.get("status") != "ok")
    writer.finish("complete", rows=len(rows), failed_rows=failed,
                  trials={b.name: b.n_trials for b in results})
    return result, extra


def _kept_result(ctx, study) -> BucketResult | None:
    """The bucket's stored result when this run resumes a study whose earlier run finished the
    bucket under the same --trials and on exactly the trials it holds now: searching on and
    re-measuring its finalists and validation would answer the same question again (also when
    the search's time limit, --timeout-s, stopped it short of --trials). None otherwise: not a
    resume, no stored result, another --trials (more search asked for), or trials added since
    (another process)."""
    attrs = study.user_attrs
    stored = attrs.get(RESULT_ATTR)
    if not ctx.config.resume or not isinstance(stored, dict):
        return None
    target = attrs.get(RESULT_TRIALS_ATTR)
    if target is None:  # decided by a kvtune before the attribute: kept only when the bucket
        if remaining_trials(ctx, study):  # reached this --trials (that version's rule)
            return None
    elif target != ctx.config.trials:
        return None
    try:
        kept = BucketResult.from_dict(stored)
    except (KeyError, TypeError, ValueError):
        return None  # malformed: finish the bucket again
    return kept if kept.n_trials == counted_trials(study) else None


def _default_us(ctx, baselines_us, cases) -> dict | None:
    """{case_id: us} of the engine's own planner when it is one of the study's baselines."""
    from kvtune.kernels.parametric import engine_default_policy

    default = engine_default_policy()
    label = next((label for label, p in ctx.baselines if p == default), None)
    if label is None:
        return None
    return {c.case_id: baselines_us[c.case_id][label] for c in cases
            if label in baselines_us.get(c.case_id, {})}


def _finalist_label(stats) -> str:
    """A finalist as the tune's report prints it: knobs, family and piece cost."""
    p = stats.params
    text = f"{p.min_tokens_per_cta}/{p.max_waves}w/{p.max_splits}s/{p.ctas_per_sm}c/{p.schedule}"
    if stats.family:
        text += f" {stats.family}"
    if stats.piece_cost_tokens is not None:
        text += f" piece_cost_tokens={stats.piece_cost_tokens}"
    return text


def _finish_bucket(ctx, study, bucket, cases, baselines_us, recorder):
    """(BucketResult, [(median_us, spread)] per finalist) or None when nothing completed."""
    from kvtune.studies.oracle import OracleSearch
    from kvtune.studies.space import params_from_trial
    from optuna.trial import TrialState

    config = ctx.config
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        stderr_line(f"bucket {bucket.name}: no complete trial; left out of the result")
        return None
    pareto = study.best_trials if config.multi_objective else ()
    candidates = top_configs(complete, config.finalists, config.multi_objective, pareto)
    for family in config.per_batch_families:
        candidates += PER_BATCH_CANDIDATES[family](ctx.space, ctx.runner.device, cases)
    stats = measure_finalists(ctx.runner, cases, candidates, baselines_us, recorder,
                              study_name=study.study_name, bucket=bucket.name,
                              rounds=config.finalist_rounds, robust=config.robust)
    default_us = _default_us(ctx, baselines_us, cases)
    win = choose(stats, default_us, REGRESSION_LIMIT)
    order = [win, *runners_up(stats, win, default_us, REGRESSION_LIMIT, MAX_RUNNERS_UP)]

    def policy(i):
        s = stats[i]
        return candidates[i].policy() if s.family else trial_policy(ctx.runner.backend, s.params)

    position, family, validation = validate_with_runners_up(
        ctx, bucket, cases, [(_finalist_label(stats[i]), policy(i)) for i in order], recorder,
        study.study_name)
    win = order[position]
    w = stats[win]
    chosen = policy(win)
    family = family or w.family
    mismatch = None if w.family else rule_mismatch(ctx.runner.backend, w.params, cases,
                                                   ctx.runner.device)
    if mismatch:
        stderr_line(f"bucket {bucket.name}: warning: {mismatch}")
    oracle_us = {}
    if config.oracle:
        search_ = OracleSearch(ctx.runner, ctx.space, recorder, study_name=study.study_name,
                               bucket=bucket.name)
        seeds = [p for _, p in ctx.baselines] + [chosen]
        for case in cases:
            oracle_us[case.case_id] = search_.run(case, seeds).best_us
    evidence = tuple(
        CaseEvidence(case.case_id, case.batch.batch_size, w.case_us[case.case_id],
                     dict(baselines_us[case.case_id]), oracle_us.get(case.case_id))
        for case in cases)
    worst = max(e.tuned_us / e.best_baseline_us for e in evidence)
    front = tuple({"trial": t.number, "params": params_from_trial(t.params).to_dict(),
                   "geomean": t.values[0], "worst": t.values[1]}
                  for t in sorted(pareto, key=lambda t: t.values[0]))
    result = BucketResult(
        name=bucket.name, min_batch=bucket.min_batch, max_batch=bucket.max_batch,
        study_name=study.study_name, params=w.params, score=w.median, worst=worst,
        n_trials=counted_trials(study), cases=evidence,
        finalists=tuple(s.to_finalist(i == win) for i, s in enumerate(stats)),
        regret_geomean=regret_geomean(evidence) if config.oracle else None, pareto_front=front,
        family=family, validation=validation, max_chunk_tokens=w.max_chunk_tokens,
        piece_cost_tokens=w.piece_cost_tokens)
    return result, [(s.median_us, s.spread) for s in stats]


class _Bar:
    """A progress bar of one bucket's study: counted trials of --trials, best score so far.

    When stdout is not a terminal (a log file, CI, `| tee`), it also prints a plain line to
    stdout per finished batch of trials (a tenth of --trials) or every PROGRESS_LINE_S seconds,
    whichever comes first: `progress: bucket 9-32 trials 12/40 best 0.9634` (no line with
    --no-progress)."""

    def __init__(self, study, config: TuneConfig, position: int | None = None) -> None:
        from tqdm import tqdm

        self.study, self.target = study, config.trials
        self.bar = tqdm(total=self.target, initial=min(counted_trials(study), self.target),
                        desc=study.study_name, unit="trial", file=sys.stderr, position=position,
                        disable=config.no_progress or None, dynamic_ncols=True)
        self.lines = not config.no_progress and not _is_terminal(sys.stdout)
        self.line_every = max(1, self.target // 10)
        self.last_line_n, self.last_line_t = None, time.monotonic()
        self.refresh()

    def refresh(self) -> None:
        n = min(counted_trials(self.study), self.target)
        self.bar.n = n
        best = best_so_far(self.study)
        self.bar.set_postfix_str(f"best {best:.4f}" if best is not None else "best -", refresh=False)
        self.bar.refresh()
        if self.lines and n != self.last_line_n:
            now = time.monotonic()
            if (self.last_line_n is None or n - self.last_line_n >= self.line_every
                    or n >= self.target or now - self.last_line_t >= PROGRESS_LINE_S):
                bucket = self.study.study_name.rsplit("/", 1)[-1]
                shown = f"{best:.4f}" if best is not None else "-"
                print(f"progress: bucket {bucket} trials {n}/{self.target} best {shown}", flush=True)
                self.last_line_n, self.last_line_t = n, now

    def on_trial(self, study, trial) -> None:
        self.refresh()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.refresh()
        self.bar.close()


def _both(first, second):
    def callback(study, trial) -> None:
        first(study, trial)
        second(study, trial)
    return callback


def _fail_line(study):
    def line(number: int, reason: str) -> None:
        stderr_line(f"{study.study_name} trial {number} failed: {reason}")
    return line


def _run_workers(ctx, studies, deadline, writer, gpus, skip=frozenset()) -> None:
    """Start --workers processes on the studies, show their progress, wait for them. skip:
    bucket names not to search (kept from an earlier run)."""
    config = ctx.config
    n = config.workers
    shares = {}
    for bucket, _ in ctx.buckets:
        left = 0 if bucket.name in skip else remaining_trials(ctx, studies[bucket.name])
        shares[bucket.name] = [left // n + (1 if i < left % n else 0) for i in range(n)]
    # Workers open the backend the main process resolved (auto -> its choice, the device model).
    resolved = replace(config, backend=ctx.opened.backend.name,
                       device_model=None if ctx.opened.device.live else ctx.opened.device.name,
                       buckets=",".join(b.name for b, _ in ctx.buckets))  # --buckets auto: as found
    payload = json.dumps({"config": resolved.to_dict(), "shares": shares, "deadline": deadline,
                          "run_dir": str(writer.root), "run_id": writer.run_id,
                          "parent_pid": os.getpid()})
    # The main process's batches (baselines) would sit beside worker 0's on the same GPU.
    release = getattr(ctx.runner.backend, "release_memory", None)
    if release is not None:
        release()
    procs = []
    for i in range(n):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(gpus[i % len(gpus)])
        proc = subprocess.Popen([sys.executable, "-m", "kvtune.studies.worker", str(i)],
                                stdin=subprocess.PIPE, env=env, text=True)
        proc.stdin.write(payload)  # on stdin, so that storage credentials never touch the disk
        proc.stdin.close()
        procs.append(proc)
    bars = [_Bar(studies[b.name], config, position=k) for k, (b, _) in enumerate(ctx.buckets)]
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(POLL_S)
            for bar in bars:
                bar.refresh()
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait()
        raise
    finally:
        for bar in bars:
            bar.__exit__()
    bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise ValueError(f"workers: worker {bad[0][0]} exited with code {bad[0][1]} (its error is "
                         "printed above); the studies keep every finished trial, continue with --resume")


def _gpu_list(config: TuneConfig) -> list[str]:
    """--gpus for GPU backends with several workers (default: every GPU); [] otherwise."""
    from kvtune.harness.backends import GPU_BACKENDS
    from kvtune.harness.backends.select import resolve_backend_name

    if config.workers == 1 or resolve_backend_name(config.backend)[0] not in GPU_BACKENDS:
        return []
    if config.gpus:
        items = [g.strip() for g in config.gpus.split(",") if g.strip()]
        if not items or not all(g.isdigit() for g in items):
            raise ValueError(f"gpus: {config.gpus!r} is not a comma-separated list of GPU indices")
        return items
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def _kernel(ctx) -> str:
    if not ctx.opened.device.live:
        return f"simulated:{ctx.opened.device.name}"
    return KERNELS.get(ctx.opened.backend.name, ctx.opened.backend.name)


def _manifest(ctx, command: str, shown_storage: str) -> dict:
    config = ctx.config
    settings = config.to_dict()
    settings["storage"] = shown_storage
    return {
        "kind": "tune",
        "command": command,
        "study": config.study,
        "studies": [ctx.study_name(b) for b, _ in ctx.buckets],
        "storage": shown_storage,
        "suite": ctx.suite.name,
        "suite_description": ctx.suite.description,
        "cases": [c.to_dict() for c in ctx.suite.cases],
        "validation": {"how": ctx.validation_how, "cases": [c.case_id for c in ctx.validation],
                       "stress_cases": list(ctx.stress_ids)},
        "buckets": [{"name": b.name, "min_batch": b.min_batch, "max_batch": b.max_batch,
                     "cases": [c.case_id for c in cases]} for b, cases in ctx.buckets],
        "baselines": [{"label": label, "name": p.name, "params": p.params()} for label, p in ctx.baselines],
        "space": ctx.space.to_dict(),
        "start_points": [{"baseline": name, "params": p.to_dict()} for name, p in start_points(ctx.space)],
        "sampler": config.sampler_name,
        "settings": settings,
        "backend": ctx.opened.backend.name,
        "device": ctx.opened.device.to_dict(),
        "simulated": not ctx.opened.device.live,
        "ceiling_bytes_per_s": ctx.opened.ceiling_bytes_per_s,
        "ceiling_kind": ctx.opened.ceiling_kind,
        "environment": ctx.opened.environment,
        "shape": ctx.shape.to_dict(),
        "seed": config.seed,
    }


def _provenance(ctx, writer, shown_storage: str) -> dict:
    config = ctx.config
    env = ctx.opened.environment or {}
    return {
        "storage": shown_storage,
        "run_id": writer.run_id,
        "suite": ctx.suite.name,
        "cases": len(ctx.suite.cases),
        "seed": config.seed,
        "sampler": config.sampler_name,
        "pruner": config.pruner,
        "objective": config.objective,
        "trials": config.trials,
        "workers": config.workers,
        "baselines": [label for label, _ in ctx.baselines],
        "space": ctx.space.to_dict(),
        "finalists": config.finalists,
        "finalist_rounds": config.finalist_rounds,
        "oracle": config.oracle,
        "validation": ctx.validation_how,
        "validation_cases": len(ctx.validation),
        "stress_cases": len(ctx.stress_ids),
        "buckets_searched": config.buckets == "auto",
        "timer": env.get("timer"),
        "cold_l2": env.get("cold_l2"),
        "versions": {k: v for k, v in env.items() if k.endswith("_version")},
        "git_commit": env.get("git_commit"),
        "git_dirty": env.get("git_dirty"),
        "source_sha256": env.get("source_sha256"),
        # The Triton decode kernel the splits were measured with (kernels/fingerprint.py).
        "decode_kernel_sha256": env.get("decode_kernel_sha256"),
        "preset": config.preset,
    }


__all__ = ["run_tune"]

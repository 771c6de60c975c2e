"""The objective of a bucket's study: how much slower a configuration is than the best baseline.

For the cases of one batch-size bucket, always measured in the same order:
    ratio_c = latency(config on c) / min over baseline policies p of latency(p on c)
    score   = geometric mean of ratio_c over the cases          (lower is better; < 1 beats them)
    worst   = max of ratio_c                                     (the multi-objective second axis)
The default objective, "robust", scores geomean x max(1, worst / 1.02): a configuration whose
worst case is more than 2% slower than the best baseline pays for it in proportion, so a knob
such as max_splits is not tuned down just because most training batches never needed it (the
training cases include a stress share, studies/validation.py). "mean" is the plain geomean.
Baselines are measured once per case and kept in the study (user attribute `kvtune_baselines`,
{case_id: {baseline: latency_us}}), so a resumed or parallel study never measures them again.
After each case the running geometric mean is reported to Optuna, so a pruner can stop a
configuration that is already hopeless; start points are never pruned. A configuration that is
infeasible, unsupported by the backend, or whose output is wrong on any case makes the trial
FAIL (ConfigFailed, with the reason in the trial's `kvtune_fail` attribute): it never wins.
A configuration is planned with the backend's rule (studies/rules.py: trial_policy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvtune.studies.rules import trial_policy
from kvtune.studies.space import SearchSpace, infeasible_reason, suggest_params
from kvtune.studies.storage import FAIL_ATTR, tag_trial

BASELINES_ATTR = "kvtune_baselines"
START_POINT_ATTR = "kvtune_start_point"
PARAMS_ATTR = "split_params"
CASE_US_ATTR = "case_us"
CTAS_ATTR = "ctas"
WORST_ATTR = "worst"
DEFAULT_BASELINES = ("flashinfer-tensor-core", "fa3", "trtllm-oversub", "fixed-split")


class ConfigFailed(Exception):
    """A trial's configuration cannot be scored (infeasible, unsupported, wrong output)."""


def geomean(values) -> float:
    """Geometric mean of positive numbers (NaN for an empty list)."""
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        return float("nan")
    if (arr <= 0).any() or not np.isfinite(arr).all():
        raise ValueError("geomean: needs finite positive values")
    return float(np.exp(np.log(arr).mean()))


ROBUST_WORST_LIMIT = 1.02


def robust_score(ratios) -> float:
    """geomean(ratios) x max(1, max(ratios) / ROBUST_WORST_LIMIT) (see the module docstring)."""
    ratios = list(ratios)
    return geomean(ratios) * max(1.0, max(ratios) / ROBUST_WORST_LIMIT)


def case_ratios(latency_us: dict[str, float], baselines_us: dict[str, dict[str, float]],
                case_ids) -> list[float]:
    """latency / best baseline latency, per case id in `case_ids` order."""
    return [latency_us[c] / min(baselines_us[c].values()) for c in case_ids]


def score(latency_us: dict[str, float], baselines_us: dict[str, dict[str, float]], case_ids) -> tuple[float, float]:
    """(geometric mean, worst) of the ratios of `latency_us` to the best baseline per case."""
    ratios = case_ratios(latency_us, baselines_us, case_ids)
    return geomean(ratios), max(ratios)


def measure_baselines(runner, cases, baselines, recorder, *, study_name: str, bucket: str,
                      known: dict | None = None, warn=print) -> dict[str, dict[str, float]]:
    """{case_id: {baseline label: latency_us}} for every case, measuring only what `known` lacks.

    baselines: [(label, policy)]. A baseline whose row is not ok on a case is left out of that
    case (with a warning); a case no baseline can run is an error (it cannot be scored).
    """
    table = {c: dict(v) for c, v in (known or {}).items()}
    left_out: dict[tuple[str, str, str], list[str]] = {}  # (label, status, message) -> case ids
    for case in cases:
        have = table.setdefault(case.case_id, {})
        for label, policy in baselines:
            if label in have:
                continue
            row, _ = runner.measure_one(case, policy, series=label)
            recorder.add(row, phase="baseline", study=study_name, bucket=bucket)
            if row["status"] == "ok" and row["latency_us"] > 0:
                have[label] = float(row["latency_us"])
            else:
                key = (label, row["status"], row.get("message", ""))
                left_out.setdefault(key, []).append(case.case_id)
        if not have:
            raise ValueError(f"baselines: none ran on case {case.case_id}; it cannot be scored")
    # One line per baseline and reason, not one per case (a backend that cannot run a baseline
    # at all would otherwise print a line for every case of the suite).
    for (label, status, message), ids in left_out.items():
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        warn(f"baseline {label}: {status} on {len(ids)} case(s) ({shown}): {message}; "
             "left out of those cases")
    return table


@dataclass
class BucketObjective:
    """The Optuna objective of one bucket (see the module docstring).

    runner: harness.runner.Runner. cases: [CaseRun] in the fixed order. baselines_us: from
    measure_baselines. multi_objective: return (geomean, worst) and do not prune. on_fail:
    called with (trial number, reason) when a configuration fails.
    """

    runner: object
    cases: list
    baselines_us: dict
    space: SearchSpace
    recorder: object
    study_name: str
    bucket: str
    multi_objective: bool = False
    on_fail: object = None
    robust: bool = False
    _sm_count: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._sm_count = self.runner.device.sm_count

    def __call__(self, trial):
        import optuna

        try:
            return self._evaluate(trial)
        except (ConfigFailed, optuna.TrialPruned):
            raise
        except Exception as exc:  # noqa: BLE001 - a trial that raises must not end the study
            self._fail(trial, f"raised {type(exc).__name__}: {exc}")
        finally:
            # The trial's rows are made durable before Optuna marks it finished: a kill between
            # the two must not leave a finished trial without its rows (the callback's flush
            # after the trial came too late for that).
            flush = getattr(self.recorder, "flush", None)
            if flush is not None:
                flush()

    def _evaluate(self, trial):
        import optuna

        tag_trial(trial)
        try:
            params = suggest_params(trial, self.space)
        except ValueError as exc:  # an enqueued or resumed point outside this study's space
            self._fail(trial, f"infeasible: {exc}")
        trial.set_user_attr(PARAMS_ATTR, params.to_dict())
        reason = infeasible_reason(params, self.space, self.runner.device)
        policy = trial_policy(self.runner.backend, params)
        if reason is None:
            reason = self._unsupported(policy)
        if reason is not None:
            self._fail(trial, f"infeasible: {reason}")
        is_start = START_POINT_ATTR in trial.user_attrs
        latency: dict[str, float] = {}
        ratios: list[float] = []
        ctas = 0
        for step, case in enumerate(self.cases):
            try:
                row, plan = self.runner.measure_one(case, policy, series=f"trial:{trial.number}")
            except Exception as exc:  # noqa: BLE001
                self._fail(trial, f"raised {type(exc).__name__} on {case.case_id}: {exc}")
            self.recorder.add(row, phase="trial", study=self.study_name, bucket=self.bucket,
                              trial=trial.number)
            if row["status"] != "ok":
                self._fail(trial, f"{row['status']} on {case.case_id}: {row.get('message', '')}")
            latency[case.case_id] = float(row["latency_us"])
            ctas += int(plan.grid_size)
            ratios.append(latency[case.case_id] / min(self.baselines_us[case.case_id].values()))
            if not self.multi_objective:
                trial.report(self._score(ratios), step)
                if not is_start and trial.should_prune():
                    trial.set_user_attr(CASE_US_ATTR, latency)
                    raise optuna.TrialPruned(f"pruned after {step + 1} of {len(self.cases)} cases")
        trial.set_user_attr(CASE_US_ATTR, latency)
        trial.set_user_attr(CTAS_ATTR, ctas)
        trial.set_user_attr(WORST_ATTR, max(ratios))
        mean = geomean(ratios)
        return (mean, max(ratios)) if self.multi_objective else self._score(ratios)

    def _score(self, ratios) -> float:
        return robust_score(ratios) if self.robust else geomean(ratios)

    def _unsupported(self, policy) -> str | None:
        # Planning is cheap: ask the backend about every case before anything is measured.
        backend = self.runner.backend
        for case in self.cases:
            try:
                plan = policy.plan(case.batch.kv_lens, case.batch.shape, self.runner.device)
            except ValueError as exc:
                return f"plan for {case.case_id}: {exc}"
            why = backend.unsupported_reason(plan)
            if why:
                return f"backend {backend.name} cannot run it ({why})"
        return None

    def _fail(self, trial, reason: str):
        reason = " ".join(str(reason).split())
        reason = reason if len(reason) <= 300 else reason[:297] + "..."
        trial.set_user_attr(FAIL_ATTR, reason)
        if self.on_fail is not None:
            self.on_fail(trial.number, reason)
        raise ConfigFailed(reason)


__all__ = [
    "BASELINES_ATTR",
    "DEFAULT_BASELINES",
    "START_POINT_ATTR",
    "BucketObjective",
    "ConfigFailed",
    "case_ratios",
    "geomean",
    "measure_baselines",
    "robust_score",
    "score",
]

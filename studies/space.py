"""The search space of a tuning study: the five knobs of ParametricPolicy and what may be tried.

Knobs and their full ranges (SplitParams holds the chosen values, kernels/parametric.py the rule):
  min_tokens_per_cta  powers of two, 128..16384 tokens, each a multiple of page_size
                      (sampled as the integer `min_tokens_per_cta_log2`, 7..14, so that samplers
                      see an ordered axis)
  max_waves           1..16 (integer)
  max_splits          1..128 (integer, sampled on a log scale)
  ctas_per_sm         1, 2, 3, 4, 8, none above the device's `max_ctas_per_sm` (the occupancy the
                      decode kernel reaches there)
  schedule            every schedule of kernels.plan.SCHEDULES that the backend can run

A backend narrows the space by declaring, as class or instance attributes:
  supported_schedules: tuple of schedule names it can run (default: all of SCHEDULES);
  fixed_split_params: {knob: value} for knobs it cannot vary (e.g. {"ctas_per_sm": 1}).
A study narrows it further with overrides (`--space KNOB=VALUES`, a preset's [space] table):
ranges "lo..hi" for min_tokens_per_cta, max_waves and max_splits, lists "a,b" for ctas_per_sm and
schedule, or a single value for any knob. An override outside the full range is a ValueError.

`infeasible_reason` rejects a configuration before anything is measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtune.kernels.plan import SCHEDULES, AttentionShape, DeviceSpec, SplitParams

MIN_TOKENS_RANGE = (128, 16384)
MAX_WAVES_RANGE = (1, 16)
MAX_SPLITS_RANGE = (1, 128)
CTAS_PER_SM_CHOICES = (1, 2, 3, 4, 8)
KNOBS = ("min_tokens_per_cta", "max_waves", "max_splits", "ctas_per_sm", "schedule")
# Optuna parameter names (min_tokens_per_cta is sampled by its base-2 logarithm).
P_MIN_TOKENS_LOG2 = "min_tokens_per_cta_log2"
P_MAX_WAVES = "max_waves"
P_MAX_SPLITS = "max_splits"
P_CTAS = "ctas_per_sm"
P_SCHEDULE = "schedule"


@dataclass(frozen=True)
class SearchSpace:
    """What a study may try. Ranges are inclusive.

    min_tokens_per_cta: (lo, hi) tokens, powers of two, lo <= hi, within 128..16384.
    max_waves: (lo, hi) within 1..16. max_splits: (lo, hi) within 1..128 (log scale).
    ctas_per_sm: allowed values (subset of 1, 2, 3, 4, 8). schedules: allowed schedule names.
    page_size: the attention shape's page size (min_tokens_per_cta values are multiples of it).
    """

    min_tokens_per_cta: tuple[int, int] = MIN_TOKENS_RANGE
    max_waves: tuple[int, int] = MAX_WAVES_RANGE
    max_splits: tuple[int, int] = MAX_SPLITS_RANGE
    ctas_per_sm: tuple[int, ...] = CTAS_PER_SM_CHOICES
    schedules: tuple[str, ...] = SCHEDULES
    page_size: int = 16

    def __post_init__(self) -> None:
        lo, hi = self.min_tokens_per_cta
        for v in (lo, hi):
            if not _is_power_of_two(v) or not MIN_TOKENS_RANGE[0] <= v <= MIN_TOKENS_RANGE[1]:
                raise ValueError(f"space.min_tokens_per_cta: {v} not allowed; allowed: powers of two "
                                 f"{MIN_TOKENS_RANGE[0]}..{MIN_TOKENS_RANGE[1]}")
        _check_range("space.min_tokens_per_cta", (lo, hi), MIN_TOKENS_RANGE)
        _check_range("space.max_waves", self.max_waves, MAX_WAVES_RANGE)
        _check_range("space.max_splits", self.max_splits, MAX_SPLITS_RANGE)
        if not self.ctas_per_sm or any(c not in CTAS_PER_SM_CHOICES for c in self.ctas_per_sm):
            raise ValueError(f"space.ctas_per_sm: {list(self.ctas_per_sm)} not allowed; allowed: a "
                             f"non-empty subset of {', '.join(map(str, CTAS_PER_SM_CHOICES))}")
        if not self.schedules or any(s not in SCHEDULES for s in self.schedules):
            raise ValueError(f"space.schedule: {list(self.schedules)} not allowed; allowed: a "
                             f"non-empty subset of {', '.join(SCHEDULES)}")
        if not self.min_tokens_values():
            raise ValueError(f"space.min_tokens_per_cta: no power of two in {lo}..{hi} is a multiple "
                             f"of page_size {self.page_size}")
        object.__setattr__(self, "ctas_per_sm", tuple(sorted(set(self.ctas_per_sm))))
        object.__setattr__(self, "schedules", tuple(s for s in SCHEDULES if s in self.schedules))

    def min_tokens_values(self) -> tuple[int, ...]:
        lo, hi = self.min_tokens_per_cta
        return tuple(1 << k for k in range(_log2(lo), _log2(hi) + 1)
                     if (1 << k) % self.page_size == 0)

    def log2_range(self) -> tuple[int, int]:
        values = self.min_tokens_values()
        return _log2(values[0]), _log2(values[-1])

    def size(self) -> int:
        """Number of distinct configurations (all integers of the integer ranges)."""
        return (len(self.min_tokens_values()) * (self.max_waves[1] - self.max_waves[0] + 1)
                * (self.max_splits[1] - self.max_splits[0] + 1) * len(self.ctas_per_sm)
                * len(self.schedules))

    def grid(self) -> dict[str, list]:
        """The Optuna search space for GridSampler: every min_tokens value, every max_waves,
        max_splits on powers of two (plus both ends), every ctas_per_sm and schedule."""
        lo, hi = self.max_splits
        splits = sorted({lo, hi} | {1 << k for k in range(8) if lo <= (1 << k) <= hi})
        return {
            P_MIN_TOKENS_LOG2: list(range(self.log2_range()[0], self.log2_range()[1] + 1)),
            P_MAX_WAVES: list(range(self.max_waves[0], self.max_waves[1] + 1)),
            P_MAX_SPLITS: splits,
            P_CTAS: list(self.ctas_per_sm),
            P_SCHEDULE: list(self.schedules),
        }

    def to_dict(self) -> dict:
        return {
            "min_tokens_per_cta": list(self.min_tokens_per_cta),
            "max_waves": list(self.max_waves),
            "max_splits": list(self.max_splits),
            "ctas_per_sm": list(self.ctas_per_sm),
            "schedules": list(self.schedules),
            "page_size": self.page_size,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SearchSpace:
        return cls(tuple(d["min_tokens_per_cta"]), tuple(d["max_waves"]), tuple(d["max_splits"]),
                   tuple(d["ctas_per_sm"]), tuple(d["schedules"]), int(d["page_size"]))


def space_for(device: DeviceSpec, shape: AttentionShape, backend=None,
              overrides: dict | None = None) -> SearchSpace:
    """The study's space on `device` for `shape`, narrowed by `backend`'s declarations and by
    `overrides` ({knob: text or value}, see the module docstring). ValueError for a bad override
    or when nothing of a knob remains."""
    page = shape.page_size
    lo = max(MIN_TOKENS_RANGE[0], page)
    tokens = (lo, MIN_TOKENS_RANGE[1])
    waves, splits = MAX_WAVES_RANGE, MAX_SPLITS_RANGE
    ctas = tuple(c for c in CTAS_PER_SM_CHOICES if c <= device.max_ctas_per_sm) or (1,)
    schedules = tuple(getattr(backend, "supported_schedules", SCHEDULES) or SCHEDULES)
    for s in schedules:
        if s not in SCHEDULES:
            raise ValueError(f"backend.supported_schedules: {s!r} unknown; allowed: {', '.join(SCHEDULES)}")
    fixed = dict(getattr(backend, "fixed_split_params", None) or {})
    user = {k: parse_override(k, v) for k, v in (overrides or {}).items()}
    for source in (fixed, user):
        for knob, value in source.items():
            value = parse_override(knob, value) if source is fixed else value
            if knob == "min_tokens_per_cta":
                tokens = _narrow_range(knob, tokens, value)
            elif knob == "max_waves":
                waves = _narrow_range(knob, waves, value)
            elif knob == "max_splits":
                splits = _narrow_range(knob, splits, value)
            elif knob == "ctas_per_sm":
                ctas = _narrow_choices(knob, ctas, value)
            elif knob == "schedule":
                schedules = _narrow_choices(knob, schedules, value)
    return SearchSpace(tokens, waves, splits, ctas, schedules, page)


def parse_override(knob: str, value):
    """'512..4096' / '4' / 4 -> (lo, hi) for range knobs; 'a,b' / ['a', 'b'] / 'a' -> tuple for
    choice knobs. ValueError names the knob and what is allowed."""
    if knob not in KNOBS:
        raise ValueError(f"space: knob {knob!r} unknown; allowed: {', '.join(KNOBS)}")
    if knob in ("ctas_per_sm", "schedule"):
        items = value if isinstance(value, (list, tuple)) else str(value).split(",")
        items = [str(i).strip() for i in items if str(i).strip()]
        if not items:
            raise ValueError(f"space.{knob}: empty; allowed: a comma-separated list")
        if knob == "ctas_per_sm":
            try:
                return tuple(int(i) for i in items)
            except ValueError:
                raise ValueError(f"space.ctas_per_sm: {value!r} not allowed; allowed: integers from "
                                 f"{', '.join(map(str, CTAS_PER_SM_CHOICES))}") from None
        return tuple(items)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        parts = [str(v) for v in value]
    elif isinstance(value, (list, tuple, bool)):
        parts = ["?"]
    else:
        text = str(value).strip()
        parts = text.split("..") if ".." in text else [text, text]
    try:
        lo, hi = (int(p.strip()) for p in parts)
    except ValueError:
        raise ValueError(f"space.{knob}: {value!r} is not an integer or a range lo..hi") from None
    if lo > hi:
        raise ValueError(f"space.{knob}: {lo}..{hi} is empty; allowed: lo <= hi")
    return lo, hi


def _narrow_range(knob: str, full: tuple[int, int], value: tuple[int, int]) -> tuple[int, int]:
    lo, hi = value
    if lo < full[0] or hi > full[1]:
        raise ValueError(f"space.{knob}: {lo}..{hi} outside {full[0]}..{full[1]}; allowed: a range "
                         f"within {full[0]}..{full[1]}")
    if knob == "min_tokens_per_cta" and not (_is_power_of_two(lo) and _is_power_of_two(hi)):
        raise ValueError(f"space.min_tokens_per_cta: {lo}..{hi} not allowed; allowed: powers of two")
    return lo, hi


def _narrow_choices(knob: str, full: tuple, value: tuple) -> tuple:
    bad = [v for v in value if v not in full]
    if bad:
        raise ValueError(f"space.{knob}: {bad[0]!r} not allowed here; allowed: "
                         f"{', '.join(map(str, full))}")
    return tuple(value)


def suggest_params(trial, space: SearchSpace) -> SplitParams:
    """Ask `trial` (an optuna Trial) for one configuration of `space`."""
    lo2, hi2 = space.log2_range()
    log2 = trial.suggest_int(P_MIN_TOKENS_LOG2, lo2, hi2)
    waves = trial.suggest_int(P_MAX_WAVES, *space.max_waves)
    splits = trial.suggest_int(P_MAX_SPLITS, *space.max_splits, log=True)
    ctas = trial.suggest_categorical(P_CTAS, list(space.ctas_per_sm))
    schedule = trial.suggest_categorical(P_SCHEDULE, list(space.schedules))
    return SplitParams(min_tokens_per_cta=1 << log2, max_waves=waves, max_splits=splits,
                       ctas_per_sm=ctas, schedule=schedule)


def trial_params(params: SplitParams) -> dict:
    """The Optuna parameter dict of `params` (what enqueue_trial takes)."""
    return {
        P_MIN_TOKENS_LOG2: _log2(params.min_tokens_per_cta),
        P_MAX_WAVES: params.max_waves,
        P_MAX_SPLITS: params.max_splits,
        P_CTAS: params.ctas_per_sm,
        P_SCHEDULE: params.schedule,
    }


def params_from_trial(values: dict) -> SplitParams:
    """SplitParams from an Optuna trial's params (inverse of trial_params)."""
    return SplitParams(min_tokens_per_cta=1 << int(values[P_MIN_TOKENS_LOG2]),
                       max_waves=int(values[P_MAX_WAVES]), max_splits=int(values[P_MAX_SPLITS]),
                       ctas_per_sm=int(values[P_CTAS]), schedule=str(values[P_SCHEDULE]))


def infeasible_reason(params: SplitParams, space: SearchSpace, device: DeviceSpec) -> str | None:
    """Why `params` cannot be run in this study, or None. Checked before anything is measured."""
    if params.min_tokens_per_cta % space.page_size:
        return (f"min_tokens_per_cta {params.min_tokens_per_cta} is not a multiple of page_size "
                f"{space.page_size}")
    if params.ctas_per_sm > device.max_ctas_per_sm:
        return (f"ctas_per_sm {params.ctas_per_sm} above the occupancy of the decode kernel on "
                f"{device.name} (max_ctas_per_sm {device.max_ctas_per_sm})")
    if params.schedule not in space.schedules:
        return f"schedule {params.schedule} not in this study's schedules ({', '.join(space.schedules)})"
    if params.ctas_per_sm not in space.ctas_per_sm:
        return f"ctas_per_sm {params.ctas_per_sm} not in {list(space.ctas_per_sm)}"
    if params.min_tokens_per_cta not in space.min_tokens_values():
        return f"min_tokens_per_cta {params.min_tokens_per_cta} not in {list(space.min_tokens_values())}"
    for knob, (lo, hi) in (("max_waves", space.max_waves), ("max_splits", space.max_splits)):
        value = getattr(params, knob)
        if not lo <= value <= hi:
            return f"{knob} {value} outside {lo}..{hi}"
    return None


def project(params: SplitParams, space: SearchSpace) -> SplitParams:
    """The configuration of `space` nearest to `params`, knob by knob (log distance for the
    token, split and CTA counts; the first allowed schedule when `params.schedule` is not)."""
    tokens = min(space.min_tokens_values(),
                 key=lambda v: (abs(math.log2(v) - math.log2(params.min_tokens_per_cta)), v))
    waves = min(max(params.max_waves, space.max_waves[0]), space.max_waves[1])
    splits = min(max(params.max_splits, space.max_splits[0]), space.max_splits[1])
    ctas = min(space.ctas_per_sm, key=lambda c: (abs(math.log2(c) - math.log2(params.ctas_per_sm)), c))
    schedule = params.schedule if params.schedule in space.schedules else _nearest_schedule(
        params.schedule, space.schedules)
    return SplitParams(tokens, waves, splits, ctas, schedule)


def _nearest_schedule(schedule: str, allowed: tuple[str, ...]) -> str:
    # Prefer a schedule of the same family (persistent or static), then the first allowed.
    family = schedule.split("-")[0]
    same = [s for s in allowed if s.split("-")[0] == family]
    return (same or list(allowed))[0]


def _check_range(name: str, rng, full) -> None:
    lo, hi = rng
    if not (isinstance(lo, int) and isinstance(hi, int)) or not full[0] <= lo <= hi <= full[1]:
        raise ValueError(f"{name}: {lo}..{hi} not allowed; allowed: a range within {full[0]}..{full[1]}")


def _is_power_of_two(v) -> bool:
    return isinstance(v, int) and v > 0 and v & (v - 1) == 0


def _log2(v: int) -> int:
    return int(v).bit_length() - 1


__all__ = [
    "CTAS_PER_SM_CHOICES",
    "KNOBS",
    "SearchSpace",
    "infeasible_reason",
    "params_from_trial",
    "parse_override",
    "project",
    "space_for",
    "suggest_params",
    "trial_params",
]

"""Shared pieces of the split policies: parameter checks, the chunk-size search, the base class.

Policies live in kernels/baselines_flashinfer.py, kernels/baselines.py and kernels/parametric.py;
kernels/policies.py is the public entry (registry). Everything here is vectorised numpy: a policy
plans a 4096-request batch in milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from typing import ClassVar

import numpy as np

from kvtune.kernels.plan import PERSISTENT_SCHEDULES, DeviceSpec

MIB = 1 << 20


def check_int(name: str, value, lo: int, hi: int) -> int:
    """ValueError naming `name` and the range unless `value` is an int in lo..hi."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: {value!r} is not an integer; allowed: {lo}..{hi}")
    if not lo <= value <= hi:
        raise ValueError(f"{name}: {value} out of range; allowed: {lo}..{hi}")
    return int(value)


def check_float(name: str, value, lo: float, hi: float) -> float:
    """ValueError unless `value` is a finite real number in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: {value!r} is not a number; allowed: {lo}..{hi}")
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ValueError(f"{name}: {value} out of range; allowed: {lo}..{hi}")
    return float(value)


def check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: {value!r} is not a boolean; allowed: true, false")
    return bool(value)


def check_choice(name: str, value, allowed) -> str:
    if value not in allowed:
        raise ValueError(f"{name}: {value!r} not allowed; allowed: {', '.join(allowed)}")
    return value


def cdiv(a, b):
    """Ceiling division for ints and int numpy arrays (both operands > 0)."""
    return -(-a // b)


def smallest_fitting(low: int, high: int, fits: Callable[[int], bool]) -> int:
    """The binary search of FlashInfer's planners, kept bit-for-bit.

    `while low < high: mid = (low + high) // 2; if fits(mid): high = mid else low = mid + 1`.
    Returns the smallest value in [low, high] that fits when `fits` is monotone; `high` when
    none does; `low` unchanged when low >= high (FlashInfer's behaviour when the minimum chunk
    already exceeds the longest request).
    """
    while low < high:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return low


def resolve_ctas_per_sm(requested: int, device: DeviceSpec) -> int:
    """`requested` CTAs per SM, or the device's occupancy when 0; never above the device's."""
    if requested == 0:
        return device.max_ctas_per_sm
    return min(requested, device.max_ctas_per_sm)


def persistent_grid(schedule: str, sm_count: int, ctas_per_sm: int) -> int | None:
    """Resident CTAs of a persistent launch (build_plan caps it by the task count)."""
    return sm_count * ctas_per_sm if schedule in PERSISTENT_SCHEDULES else None


def lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


class PolicyBase:
    """Mix-in for policies written as frozen dataclasses whose fields are their parameters.

    `params()` returns the fields as plain JSON-able values, and `from_params(**params())`
    rebuilds an identical policy; the registry relies on both.
    """

    name: ClassVar[str] = ""

    def params(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_params(cls, **params):
        return cls(**params)

    @classmethod
    def default_params(cls) -> dict:
        return cls().params()


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def plain_notes(**notes) -> dict:
    """Notes with numpy scalars turned into Python ones (the CLI prints them, the store saves them)."""
    return {k: _plain(v) for k, v in notes.items()}

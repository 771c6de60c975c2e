"""Interference guard: is the GPU's memory our own while a measurement runs?

Seen on an H200 of this workplace (2026-11-26, benchmarks/interference_probe.py): on freshly
started machines the same llama3-70b-tp8 decode (one program per SM, latency-bound), timed every
1-4 s, read 45-47 us in some rounds and 64-135 us in others, in windows of one to several
seconds, for every kernel configuration alike. The SM and memory clocks read 1980 / 3201 MHz
throughout with no clock-event reason; a 480 MB device copy lost only 5-10% of its bandwidth in
the slow windows, and 50 ms of copies right before the timing did not help. The stopping rule
cannot see it (the samples of one measurement agree with each other), and a copy-bandwidth
bracket (the first two versions of this guard) let almost all of them through.

What such a kernel waits on is the latency of loads that miss L2, so the guard brackets each
measurement with `harness.latency_probe.LatencyProbe`: one dependent-load chain per SM through
a buffer of 8 x L2, 256 hops (about 70 us on a quiet H200; a probe times it three times).
Its speed (hops per second) is compared with the quiet speed: the second-fastest probe seen so far in this process (the fastest while there
are fewer than five; five probes are taken when the guard is made), so one lucky reading does
not set the bar and two quiet ones suffice however often the device is disturbed. If either probe
of the bracket is below (1 - tolerance) of it, the measurement is taken again after `wait_s`,
at most `max_retries` times; if no bracket was quiet, the fastest attempt is kept (with `key`).
Interference only ever slows a kernel, so neither retrying nor keeping the fastest disturbed
attempt biases towards fast outliers. The result says how many retries it took and the quiet
ratio of the bracket it kept (`QuietOutcome`).

A machine can also be disturbed for minutes, not seconds (tenth session, 2026-11-27: in a hybrid
tune on an H200 most brackets read 0.7-0.8 of the reference for the whole run, and a retry one
second later was disturbed again, so each row cost a wasted measurement and a second of sleep).
After `give_up_after` guarded measurements in a row ended without a quiet bracket, the guard
takes one attempt per measurement (no retry, no wait), still probing around each, until a
bracket reads quiet again; then the retries resume. The rows keep their quiet ratios either way.

Units: probe speeds in hops per second (any speed in tests), higher is quieter; seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kvtune.harness.stopping import check_number

T = TypeVar("T")

__all__ = ["QuietCheck", "QuietGuard", "QuietOutcome", "guard_for", "measure_quietly",
           "wait_until_quiet"]


@dataclass(frozen=True)
class QuietCheck:
    """Settings of the guard.

    tolerance: a probe below (1 - tolerance) x the quiet speed counts as disturbed; 0.01..0.5.
    max_retries: measurements taken again at most this often; 0..20.
    wait_s: pause before a retry, seconds; 0..60.
    give_up_after: after this many guarded measurements in a row without a quiet bracket, retry
        none until a bracket is quiet again (module docstring); 0 = never give up; 0..1000.
    """

    tolerance: float = 0.10
    max_retries: int = 5
    wait_s: float = 1.0
    give_up_after: int = 8

    def __post_init__(self) -> None:
        check_number("tolerance", self.tolerance, 0.01, 0.5)
        check_number("max_retries", self.max_retries, 0, 20, integer=True)
        check_number("wait_s", self.wait_s, 0.0, 60.0)
        check_number("give_up_after", self.give_up_after, 0, 1000, integer=True)


@dataclass(frozen=True)
class QuietOutcome:
    """How a guarded measurement went.

    quiet_ratio: the slower probe of the kept bracket over the quiet reference (1.0 = as fast as
    the quiet speed; nan when the guard was off). retries: measurements discarded as
    disturbed. quiet: the last bracket was within tolerance.
    """

    quiet_ratio: float = float("nan")
    retries: int = 0
    quiet: bool = True

    def to_dict(self) -> dict:
        return {"quiet_ratio": self.quiet_ratio, "interference_retries": self.retries,
                "quiet": self.quiet}


class QuietGuard:
    """The quiet reference of one device and the disturbed/quiet decision.

    probe_fn: returns a speed, higher is quieter (LatencyProbe.hops_per_s on a GPU; a fake in
    tests). The reference is the second-fastest finite probe so far (the fastest while fewer
    than five).
    """

    MIN_READINGS = 5

    def __init__(self, probe_fn: Callable[[], float], check: QuietCheck | None = None) -> None:
        self.probe_fn = probe_fn
        self.check = check or QuietCheck()
        self.readings: list[float] = []
        # Guarded measurements in a row that ended without a quiet bracket.
        self.disturbed_streak = 0

    @property
    def gave_up(self) -> bool:
        """True while the machine reads disturbed for longer than retries can wait out."""
        after = self.check.give_up_after
        return after > 0 and self.disturbed_streak >= after

    @property
    def reference(self) -> float:
        """The quiet speed: nan before any probe."""
        if not self.readings:
            return float("nan")
        ordered = sorted(self.readings)
        return ordered[-1] if len(ordered) < self.MIN_READINGS else ordered[-2]

    def probe(self) -> float:
        speed = float(self.probe_fn())
        if math.isfinite(speed) and speed > 0:
            self.readings.append(speed)
        return speed

    def ratio(self, *speeds: float) -> float:
        """The slowest of `speeds` over the quiet reference."""
        ref = self.reference
        return min(speeds) / ref if ref > 0 else float("nan")


def measure_quietly(measure: Callable[[], T], guard: QuietGuard | None,
                    sleep: Callable[[float], None] = time.sleep,
                    key: Callable[[T], float] | None = None) -> tuple[T, QuietOutcome]:
    """Run `measure()` between two probes; again (after guard.check.wait_s) while a probe is
    disturbed, at most guard.check.max_retries times (none while guard.gave_up). Returns the
    first measurement with a quiet bracket; if none was quiet, the attempt with the smallest
    key(result) (the fastest: the least disturbed), or the last one without a key. guard None:
    one measurement, no probes."""
    if guard is None:
        return measure(), QuietOutcome()
    check = guard.check
    max_retries = 0 if guard.gave_up else check.max_retries
    attempts: list[tuple[T, float]] = []
    while True:
        before = guard.probe()
        result = measure()
        after = guard.probe()
        ratio = guard.ratio(before, after)
        if ratio >= 1.0 - check.tolerance:
            guard.disturbed_streak = 0
            return result, QuietOutcome(quiet_ratio=ratio, retries=len(attempts), quiet=True)
        attempts.append((result, ratio))
        if len(attempts) > max_retries:
            break
        sleep(check.wait_s)
    guard.disturbed_streak += 1
    if key is None:
        kept, ratio = attempts[-1]
    else:
        kept, ratio = min(attempts, key=lambda a: key(a[0]))
    return kept, QuietOutcome(quiet_ratio=ratio, retries=len(attempts) - 1, quiet=False)


def wait_until_quiet(guard: QuietGuard, *, consecutive: int = 5, period_s: float = 0.5,
                     timeout_s: float = 60.0, sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> tuple[bool, float]:
    """Probe every `period_s` until `consecutive` probes in a row read quiet (>= 1 - tolerance
    of the reference), or `timeout_s` passes: for the start of a GPU run on a machine that may
    still be in its disturbed first minutes. Returns (quiet, seconds waited)."""
    check_number("consecutive", consecutive, 1, 1000, integer=True)
    check_number("period_s", period_s, 0.0, 60.0)
    check_number("timeout_s", timeout_s, 0.0, 3600.0)
    start = clock()
    streak = 0
    while True:
        ratio = guard.ratio(guard.probe())
        streak = streak + 1 if ratio >= 1.0 - guard.check.tolerance else 0
        waited = clock() - start
        if streak >= consecutive:
            return True, waited
        if waited >= timeout_s:
            return False, waited
        sleep(period_s)


_GUARDS: dict[tuple[str, int], QuietGuard] = {}
CALIBRATION_PROBES = 5


def guard_for(device=None, check: QuietCheck | None = None) -> QuietGuard:
    """The process-wide guard of a CUDA device (one probe buffer and one reference per device,
    so every measurement in the process shares it). A new guard takes CALIBRATION_PROBES probes
    50 ms apart before it answers."""
    import torch

    from kvtune.harness.latency_probe import LatencyProbe

    dev = torch.device("cuda") if device is None else torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    key = (dev.type, int(dev.index))
    guard = _GUARDS.get(key)
    if guard is None:
        guard = QuietGuard(LatencyProbe(dev).hops_per_s, check or QuietCheck())
        for _ in range(CALIBRATION_PROBES):
            guard.probe()
            time.sleep(0.05)
        _GUARDS[key] = guard
    elif check is not None:
        guard.check = check
    return guard

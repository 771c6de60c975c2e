"""Interference guard: is the GPU's memory bandwidth our own while a measurement runs?

Seen on an H200 of this workplace (2026-11-26 17:59 UTC, benchmarks/interference_probe.py): on
a freshly started machine, the same llama3-70b-tp8 decode timed every 4 s for 150 s read 45-53 us
in most rounds and 64-126 us in others, for every kernel configuration at once, in windows of
4-12 s. A memory-bound kernel timed inside such a window reads up to 2.7x slow while the
stopping rule is satisfied (the samples agree with each other), so nothing in the samples flags
it. Whatever the cause outside the process, it shows in the device copy bandwidth.

The guard therefore brackets a measurement with two device-to-device copies of a buffer much
larger than L2 (`BandwidthProbe`: 8 x L2 copied three times, about 0.7 ms on an H200) and
compares them with the quiet bandwidth: the 90th percentile of the probes seen so far in this
process (the maximum while there are fewer than five: a single lucky reading must not set the
bar), and at least a floor of `floor_fraction` of the datasheet bandwidth of a known card (a
quiet 480 MB copy on an H200 reaches about 0.85 of it). If either probe is below
(1 - tolerance) of that reference, the measurement is taken again after `wait_s`, at most
`max_retries` times; if no bracket was quiet, the fastest attempt is kept (with `key`).
Interference only ever slows a memory-bound kernel, so neither retrying nor keeping the fastest
disturbed attempt biases towards fast outliers. The result says how many retries it took and
the quiet ratio of the bracket it kept (`QuietOutcome`).

First version (2 x L2 probe, reference = the best probe): on the same H200 a 120 MB copy read
3.5-3.8 TB/s while the decode beside it ran at its quiet speed, so a lucky high reading made
most brackets "disturbed", and keeping the last attempt kept slow ones.

Units: bytes per second (read + written, as the copy ceiling everywhere in kvtune), seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

__all__ = ["BandwidthProbe", "QuietCheck", "QuietGuard", "QuietOutcome", "guard_for",
           "measure_quietly"]


@dataclass(frozen=True)
class QuietCheck:
    """Settings of the guard.

    tolerance: a probe below (1 - tolerance) x the quiet bandwidth counts as disturbed; 0.01..0.5.
    max_retries: measurements taken again at most this often; 0..20.
    wait_s: pause before a retry, seconds; 0..60.
    floor_fraction: fraction of the datasheet bandwidth a quiet copy reaches at least on a known
        card (the reference's lower bound); 0 disables the floor; 0..1.
    """

    tolerance: float = 0.10
    max_retries: int = 3
    wait_s: float = 1.0
    floor_fraction: float = 0.80

    def __post_init__(self) -> None:
        _check_range("tolerance", self.tolerance, 0.01, 0.5)
        _check_range("max_retries", self.max_retries, 0, 20, integer=True)
        _check_range("wait_s", self.wait_s, 0.0, 60.0)
        _check_range("floor_fraction", self.floor_fraction, 0.0, 1.0)


@dataclass(frozen=True)
class QuietOutcome:
    """How a guarded measurement went.

    quiet_ratio: the slower bracket probe over the quiet reference at the end (1.0 = as fast as
    the best copy seen; nan when the guard was off). retries: measurements discarded as
    disturbed. quiet: the last bracket was within tolerance.
    """

    quiet_ratio: float = float("nan")
    retries: int = 0
    quiet: bool = True

    def to_dict(self) -> dict:
        return {"quiet_ratio": self.quiet_ratio, "interference_retries": self.retries,
                "quiet": self.quiet}


class BandwidthProbe:
    """A device-to-device copy of `nbytes` (default: 8 x L2, at least 256 MiB) timed with
    CUDA events; `bytes_per_s()` is the median of `copies` copies, read + written bytes."""

    def __init__(self, device=None, nbytes: int | None = None, copies: int = 3) -> None:
        import torch

        self.device = torch.device("cuda") if device is None else torch.device(device)
        props = torch.cuda.get_device_properties(self.device)
        l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
        self.nbytes = int(nbytes or max(8 * l2, 256 << 20))
        self.copies = int(copies)
        # Random bytes: never time on zeros.
        self.src = torch.randint(0, 255, (self.nbytes,), dtype=torch.uint8, device=self.device)
        self.dst = torch.empty_like(self.src)

    def bytes_per_s(self) -> float:
        import torch

        times_ms = []
        with torch.cuda.device(self.device):
            for _ in range(self.copies):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                self.dst.copy_(self.src)
                end.record()
                end.synchronize()
                times_ms.append(start.elapsed_time(end))
        times_ms.sort()
        return 2 * self.nbytes / (times_ms[len(times_ms) // 2] * 1e-3)


class QuietGuard:
    """The quiet reference of one device and the disturbed/quiet decision.

    probe_fn: returns a bandwidth in bytes/s (a BandwidthProbe's bytes_per_s on a GPU; a fake in
    tests). floor_bytes_per_s: the reference's lower bound (floor_fraction x datasheet), 0 for
    none. The reference is the 90th percentile of every finite probe so far (their maximum while
    fewer than five), and at least the floor.
    """

    MIN_READINGS = 5
    QUANTILE = 0.9

    def __init__(self, probe_fn: Callable[[], float], check: QuietCheck | None = None,
                 floor_bytes_per_s: float = 0.0) -> None:
        self.probe_fn = probe_fn
        self.check = check or QuietCheck()
        self.readings: list[float] = []
        self.floor_bytes_per_s = float(floor_bytes_per_s)

    @property
    def reference_bytes_per_s(self) -> float:
        if not self.readings:
            return self.floor_bytes_per_s
        ordered = sorted(self.readings)
        if len(ordered) < self.MIN_READINGS:
            top = ordered[-1]
        else:
            top = ordered[min(len(ordered) - 1, int(self.QUANTILE * (len(ordered) - 1) + 0.5))]
        return max(top, self.floor_bytes_per_s)

    def probe(self) -> float:
        bw = float(self.probe_fn())
        if math.isfinite(bw) and bw > 0:
            self.readings.append(bw)
        return bw

    def ratio(self, *bandwidths: float) -> float:
        """The slowest of `bandwidths` over the quiet reference."""
        ref = self.reference_bytes_per_s
        return min(bandwidths) / ref if ref > 0 else float("nan")


def measure_quietly(measure: Callable[[], T], guard: QuietGuard | None,
                    sleep: Callable[[float], None] = time.sleep,
                    key: Callable[[T], float] | None = None) -> tuple[T, QuietOutcome]:
    """Run `measure()` between two probes; again (after guard.check.wait_s) while a probe is
    disturbed, at most guard.check.max_retries times. Returns the first measurement with a quiet
    bracket; if none was quiet, the attempt with the smallest key(result) (the fastest: the
    least disturbed), or the last one without a key. guard None: one measurement, no probes."""
    if guard is None:
        return measure(), QuietOutcome()
    check = guard.check
    attempts: list[tuple[T, float]] = []
    while True:
        before = guard.probe()
        result = measure()
        after = guard.probe()
        ratio = guard.ratio(before, after)
        if ratio >= 1.0 - check.tolerance:
            return result, QuietOutcome(quiet_ratio=ratio, retries=len(attempts), quiet=True)
        attempts.append((result, ratio))
        if len(attempts) > check.max_retries:
            break
        sleep(check.wait_s)
    if key is None:
        kept, ratio = attempts[-1]
    else:
        kept, ratio = min(attempts, key=lambda a: key(a[0]))
    return kept, QuietOutcome(quiet_ratio=ratio, retries=len(attempts) - 1, quiet=False)


_GUARDS: dict[tuple[str, int], QuietGuard] = {}


def guard_for(device=None, check: QuietCheck | None = None) -> QuietGuard:
    """The process-wide guard of a CUDA device (one probe buffer and one running reference per
    device, so every measurement in the process shares what the quietest copy reached)."""
    import torch

    from kvtune.harness.device import model_for_gpu_name

    dev = torch.device("cuda") if device is None else torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    key = (dev.type, int(dev.index))
    guard = _GUARDS.get(key)
    if guard is None:
        preset = model_for_gpu_name(torch.cuda.get_device_name(dev))
        check_ = check or QuietCheck()
        floor = check_.floor_fraction * preset.hbm_bytes_per_s if preset else 0.0
        guard = QuietGuard(BandwidthProbe(dev).bytes_per_s, check_, floor)
        _GUARDS[key] = guard
    elif check is not None:
        guard.check = check
    return guard


def _check_range(name: str, value, lo, hi, integer: bool = False) -> None:
    if integer and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{name}: {value!r} must be an integer in {lo}..{hi}")
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not lo <= value <= hi:
        raise ValueError(f"{name}: {value!r} out of range; allowed: {lo}..{hi}")

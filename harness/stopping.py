"""When to stop timing: nvbench's noise-based stopping rule and the warm-up rule, as pure logic.

Nothing here touches a GPU. The timing loop (harness/timing.py) feeds per-iteration times in
microseconds into a `StoppingState` and asks it after every batch whether to stop; the same
state can be driven by a synthetic stream in a test.

Stopping (after nvbench): take at least `min_samples` samples and `min_time_ms` of summed sample
time, then stop as soon as the relative standard error of the mean is at most `max_noise`. Stop
anyway at `timeout_s` of wall-clock time (or at `max_samples`), with a warning that the noise
target was not reached.

Warm-up: repeat an estimate of one iteration's time until two consecutive estimates agree within
`rel_tol` (and at least `min_runs` estimates were taken), so JIT compilation, autotuning and
module load (all in the first runs) stay out of the timed samples.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

# Largest GPU time one batch of timed iterations should take before the rule is asked again:
# small enough that the timeout is honoured to within a fraction of a second.
MAX_BATCH_TIME_US = 100_000.0
MAX_BATCH_ITERATIONS = 2_000


@dataclass(frozen=True)
class StoppingRule:
    """nvbench's stopping rule.

    min_samples: samples taken before the noise target is checked, 1..1,000,000 (default 10).
    min_time_ms: summed sample time (GPU time, excluding L2 flushes) before the noise target is
        checked, 0..600,000 ms (default 50).
    max_noise: target relative standard error of the mean (std / sqrt(n) / mean), 0 < x <= 1
        (default 0.005 = 0.5%).
    timeout_s: wall-clock seconds after which timing stops even if the target was not met,
        0 < x <= 3600 (default 5).
    max_samples: hard cap on samples, min_samples..10,000,000 (default 100,000).
    quiet_retries: the interference guard's retries (harness/interference.py): a measurement
        whose latency probe reads disturbed is taken again at most this often, 1 s apart,
        0..20 (default 5); 0 measures once and still records the quiet ratio. Fewer retries
        make a long tuning run on a noisy machine affordable; its rows say how quiet they were.
    """

    min_samples: int = 10
    min_time_ms: float = 50.0
    max_noise: float = 0.005
    timeout_s: float = 5.0
    max_samples: int = 100_000
    quiet_retries: int = 5

    def __post_init__(self) -> None:
        check_number("min_samples", self.min_samples, 1, 1_000_000, integer=True)
        check_number("min_time_ms", self.min_time_ms, 0.0, 600_000.0)
        if not (isinstance(self.max_noise, (int, float)) and 0.0 < self.max_noise <= 1.0):
            raise ValueError(f"max_noise: {self.max_noise!r} out of range; allowed: 0 < max_noise <= 1")
        if not (isinstance(self.timeout_s, (int, float)) and 0.0 < self.timeout_s <= 3600.0):
            raise ValueError(f"timeout_s: {self.timeout_s!r} out of range; allowed: 0 < timeout_s <= 3600")
        check_number("max_samples", self.max_samples, self.min_samples, 10_000_000, integer=True)
        check_number("quiet_retries", self.quiet_retries, 0, 20, integer=True)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class WarmupRule:
    """Warm-up until two consecutive estimates agree.

    min_runs: estimates taken at least, 2..1000 (default 3; the first one usually holds JIT).
    rel_tol: largest relative difference of two consecutive estimates that counts as settled,
        0 < x < 1 (default 0.02).
    max_runs: cap on estimates, min_runs..10,000 (default 20); reaching it gives a warning.
    """

    min_runs: int = 3
    rel_tol: float = 0.02
    max_runs: int = 20

    def __post_init__(self) -> None:
        check_number("min_runs", self.min_runs, 2, 1000, integer=True)
        if not (isinstance(self.rel_tol, (int, float)) and 0.0 < self.rel_tol < 1.0):
            raise ValueError(f"rel_tol: {self.rel_tol!r} out of range; allowed: 0 < rel_tol < 1")
        check_number("max_runs", self.max_runs, self.min_runs, 10_000, integer=True)

    def to_dict(self) -> dict:
        return asdict(self)


def warmup_settled(estimates_us: list[float], rule: WarmupRule) -> bool:
    """True once at least `rule.min_runs` estimates exist and the last two agree within rel_tol."""
    if len(estimates_us) < rule.min_runs:
        return False
    prev, last = float(estimates_us[-2]), float(estimates_us[-1])
    if not (math.isfinite(prev) and math.isfinite(last)) or prev <= 0:
        return False
    return abs(last - prev) <= rule.rel_tol * prev


def relative_standard_error(samples_us) -> float:
    """std (ddof=1) / sqrt(n) / mean; inf for fewer than 2 samples or a mean <= 0."""
    x = np.asarray(samples_us, dtype=np.float64)
    if x.size < 2:
        return math.inf
    mean = float(x.mean())
    if not mean > 0:
        return math.inf
    return float(x.std(ddof=1)) / math.sqrt(x.size) / mean


@dataclass(frozen=True)
class SampleSummary:
    """Statistics of a list of per-iteration times, all in microseconds (NaN when empty)."""

    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    std_us: float
    samples: int
    rel_stderr: float
    total_time_ms: float


def summarize(samples_us) -> SampleSummary:
    """Median, p10, p90, mean, std (ddof=1; 0 for one sample), count, noise and total time."""
    x = np.asarray(samples_us, dtype=np.float64)
    if x.size == 0:
        nan = float("nan")
        return SampleSummary(nan, nan, nan, nan, nan, 0, math.inf, 0.0)
    p10, p50, p90 = np.percentile(x, [10, 50, 90])
    return SampleSummary(
        median_us=float(p50),
        p10_us=float(p10),
        p90_us=float(p90),
        mean_us=float(x.mean()),
        std_us=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        samples=int(x.size),
        rel_stderr=relative_standard_error(x),
        total_time_ms=float(x.sum()) / 1000.0,
    )


@dataclass
class StoppingState:
    """Samples gathered so far under one rule, and the decision to stop.

    Feed samples with `extend`, then call `should_stop(elapsed_s)` with the wall-clock seconds
    since timing began. `stop_reason` is "noise" (target met), "timeout" or "max_samples".
    launches_per_sample: launches averaged into one sample (a graph replay holds several), so the
    GPU time counted towards min_time_ms is sample x launches_per_sample.
    """

    rule: StoppingRule
    launches_per_sample: int = 1
    samples_us: list[float] = field(default_factory=list)
    stop_reason: str | None = None
    _total_us: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.launches_per_sample, bool) or not (
            isinstance(self.launches_per_sample, int) and self.launches_per_sample >= 1
        ):
            raise ValueError(f"launches_per_sample: {self.launches_per_sample!r} must be an integer >= 1")

    def extend(self, samples_us) -> None:
        for value in samples_us:
            value = float(value)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"sample_us: {value!r} is not a finite time >= 0")
            self.samples_us.append(value)
            self._total_us += value * self.launches_per_sample

    @property
    def count(self) -> int:
        return len(self.samples_us)

    @property
    def total_time_ms(self) -> float:
        return self._total_us / 1000.0

    @property
    def minimums_met(self) -> bool:
        return self.count >= self.rule.min_samples and self.total_time_ms >= self.rule.min_time_ms

    @property
    def noise_met(self) -> bool:
        """Minimums reached and the relative standard error at most max_noise."""
        return self.minimums_met and relative_standard_error(self.samples_us) <= self.rule.max_noise

    def should_stop(self, elapsed_s: float) -> bool:
        if self.noise_met:
            self.stop_reason = "noise"
        elif self.count >= self.rule.max_samples:
            self.stop_reason = "max_samples"
        elif elapsed_s >= self.rule.timeout_s and self.count > 0:
            self.stop_reason = "timeout"
        else:
            return False
        return True

    def warnings(self) -> list[str]:
        """One line when timing stopped without meeting the noise target, else nothing."""
        if self.stop_reason in (None, "noise"):
            return []
        head = (
            f"noise target not reached: stopped by {self.stop_reason} after {self.count} samples "
            f"({self.total_time_ms:.1f} ms of GPU time)"
        )
        if not self.minimums_met:
            note = (
                f"{head}, before min_samples {self.rule.min_samples} and min_time_ms "
                f"{self.rule.min_time_ms:g} were both reached"
            )
            return [note]
        rse = relative_standard_error(self.samples_us)
        return [f"{head}, relative standard error {rse:.2%} > max_noise {self.rule.max_noise:.2%}"]


def next_batch_size(state: StoppingState, estimate_us: float) -> int:
    """How many timed iterations to enqueue before asking the rule again.

    Enough to reach min_samples and min_time_ms in one go, else a quarter more samples (the
    standard error falls as 1/sqrt(n)), capped so one batch stays near MAX_BATCH_TIME_US of GPU
    time and within max_samples. estimate_us: one sample's expected value, > 0 (per launch; the
    GPU time of a sample is that times state.launches_per_sample).
    """
    rule = state.rule
    est = max(float(estimate_us), 1e-3) if math.isfinite(estimate_us) else 1.0
    est *= state.launches_per_sample
    need_samples = max(rule.min_samples - state.count, 0)
    need_time = max(rule.min_time_ms * 1000.0 - state._total_us, 0.0) / est
    want = max(need_samples, math.ceil(need_time), math.ceil(0.25 * state.count), 1)
    cap = max(1, min(MAX_BATCH_ITERATIONS, int(MAX_BATCH_TIME_US / est)))
    return int(max(1, min(want, cap, rule.max_samples - state.count)))


def check_number(name: str, value, lo, hi, integer: bool = False) -> None:
    """ValueError naming `name` and the allowed range unless lo <= value <= hi (an int when
    `integer`; NaN and bools are refused)."""
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not lo <= value <= hi:
        what = "an integer" if integer else "a number"
        raise ValueError(f"{name}: {value!r} out of range; allowed: {what} in {lo}..{hi}")


def collect_samples(
    run_batch: Callable[[int], list[float]],
    state: StoppingState,
    estimate_us: float,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Run batches of timed iterations until `state` says stop; returns the wall-clock seconds.

    run_batch(n) enqueues and times n iterations and returns their samples in microseconds.
    estimate_us: the warm-up's estimate of one sample, refreshed from the latest samples. clock:
    seconds (injected so a test can drive the timeout).
    """
    begin = clock()
    estimate = estimate_us
    while True:
        state.extend(run_batch(next_batch_size(state, estimate)))
        recent = state.samples_us[-16:]
        estimate = sum(recent) / len(recent)
        if state.should_stop(clock() - begin):
            return clock() - begin

"""Timing a GPU callable the way a kernel engineer trusts: the public entry of kvtune's timers.

    result = measure_callable(fn, timer="auto", cold_l2=True)

`fn` launches one iteration's work on the current CUDA stream. The timer is one of
  - "events": a CUDA event pair around each iteration, one synchronize per batch;
  - "cupti":  CUPTI activity records, first kernel start to last kernel end of each iteration
              (launch gaps and Python overhead excluded, L2-flush kernels not counted);
  - "graph":  the launches captured once in a CUDA graph, events around replays;
  - "auto":   cupti when cupti-python imports and records a probe kernel, else events, with one
              warning (per process) that names the reason.
The timer actually used is in every result (`timer_used`). The eager timers (events, cupti)
start each batch behind a GPU sleep that covers the host's enqueue of the whole batch
(timers_cuda.HostPace): without it a step shorter than the host's launch time per iteration
measured the host, not the GPU (docs/PERFORMANCE.md, "Host pace").

Cold L2 (default): eager timers write a buffer of 2 x L2 before every timed iteration and read it
back (so the lines left in L2 are clean; see harness/l2_cache.py), outside the timed span; the
graph timer rotates `inputs`, copies that together exceed 3 x L2 (build them with
`copies_needed`). Hot: cold_l2=False (the CLI's --warm-l2).

Warm-up runs on the timer that measures (graph: after three eager calls, since compilation cannot
happen under capture) until two consecutive estimates agree within 2% (at least 3), so JIT
compilation, autotuning and module load stay out. Then batches of timed iterations run until
nvbench's stopping rule (harness/stopping.py) says stop. NVML telemetry is read before, during and
after (harness/telemetry.py); a throttled measurement is flagged in `telemetry`.

Interference guard (default on, `quiet=None` turns it off): each measurement is bracketed by a
memory-latency probe (one dependent-load chain per SM; harness/latency_probe.py) and taken again
(up to 5 times, 1 s apart) while either probe reads below 0.9 of the device's quiet speed in this
process (harness/interference.py: on fresh H200s a latency-bound decode read up to 2.9x slow in
windows of seconds, at full clocks, with samples that agreed with each other); if no bracket is
quiet the fastest attempt is kept. `quiet_ratio` and `interference_retries` say how it went; a
measurement still disturbed after the retries carries a warning.

Seen on an H200 (2026-11-26, benchmarks/bench_timers.py): a cold 270 us decode read within 1.3%
under all three timers; a hot 5.2 us decode read 5.15 us (cupti), 5.19 us (graph) and 76 us
(events, launch-bound).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from kvtune.harness.interference import QuietCheck, guard_for, measure_quietly
from kvtune.harness.l2_cache import ROTATION_FACTOR, copies_needed, distinct_bytes, launches_per_replay
from kvtune.harness.stopping import (
    StoppingRule,
    StoppingState,
    WarmupRule,
    collect_samples,
    summarize,
    warmup_settled,
)
from kvtune.harness.telemetry import TelemetryMonitor, empty_telemetry

TIMERS = ("auto", "cupti", "events", "graph")

__all__ = [
    "TIMERS",
    "StoppingRule",
    "TimerChoice",
    "TimerUnavailable",
    "TimingResult",
    "WarmupRule",
    "copies_needed",
    "measure_callable",
    "resolve_timer",
]


class TimerUnavailable(RuntimeError):
    """The requested timer cannot run here (no GPU, CUPTI missing); the message is one line."""


@dataclass(frozen=True)
class TimerChoice:
    """The timer that will run, and why it differs from the one asked for (None when it does not)."""

    name: str
    requested: str
    fallback_reason: str | None = None


_cupti_probe_result: dict[str, str | None] = {}  # "result" -> None (works) or the reason
_warned_reasons: set[str] = set()


def gpu_available() -> bool:
    """True when torch sees a CUDA GPU (never raises)."""
    from kvtune.harness.device import cuda_available

    return cuda_available()


def cupti_unavailable_reason() -> str | None:
    """None when CUPTI imports and records a probe kernel here; else the reason. Probed once."""
    if "result" not in _cupti_probe_result:
        from kvtune.harness.timers_cuda import probe_cupti

        _cupti_probe_result["result"] = probe_cupti()
    return _cupti_probe_result["result"]


def resolve_timer(requested: str = "auto") -> TimerChoice:
    """The timer `requested` resolves to on this machine.

    ValueError for a name outside TIMERS; TimerUnavailable when there is no GPU, or when "cupti"
    was asked for explicitly and does not work. "auto" falls back to "events" and warns once per
    process with the reason.
    """
    if requested not in TIMERS:
        raise ValueError(f"timer: {requested!r} unknown; allowed: {', '.join(TIMERS)}")
    if not gpu_available():
        raise TimerUnavailable(
            f"timer {requested}: no CUDA GPU here; GPU timers need one (the simulator backend does not)"
        )
    if requested in ("events", "graph"):
        return TimerChoice(requested, requested)
    reason = cupti_unavailable_reason()
    if reason is None:
        return TimerChoice("cupti", requested)
    if requested == "cupti":
        raise TimerUnavailable(f"timer cupti: {reason}")
    if reason not in _warned_reasons:
        _warned_reasons.add(reason)
        warnings.warn(f"timer auto: using events because {reason}", RuntimeWarning, stacklevel=2)
    return TimerChoice("events", requested, fallback_reason=reason)


@dataclass(frozen=True)
class TimingResult:
    """One timed callable. Times in microseconds per iteration (per launch under graph).

    rel_stderr: relative standard error of the mean at the end. noise_met: the stopping rule's
    target was reached. stop_reason: "noise", "timeout" or "max_samples". launches_per_sample: 1,
    or the launches in one graph replay. input_copies: input sets rotated. telemetry: the flat
    dict of harness.telemetry.TelemetryRecord (fields None without NVML).
    """

    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    std_us: float
    samples: int
    noise_met: bool
    rel_stderr: float
    timer_used: str
    timer_requested: str
    cold_l2: bool
    stop_reason: str
    timer_fallback_reason: str | None = None
    warnings: tuple[str, ...] = ()
    warmup_runs: int = 0
    warmup_estimate_us: float = float("nan")
    launches_per_sample: int = 1
    input_copies: int = 1
    total_time_ms: float = 0.0
    wall_time_s: float = 0.0
    stopping: dict = field(default_factory=dict)
    telemetry: dict = field(default_factory=dict)
    quiet_ratio: float = float("nan")
    interference_retries: int = 0

    @property
    def rel_spread(self) -> float:
        """(p90 - p10) / median."""
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us > 0 else float("nan")

    def measurement_fields(self) -> dict:
        """Keyword arguments for harness.backends.Measurement (status, bytes are the caller's)."""
        return {
            "latency_us": self.median_us,
            "p10_us": self.p10_us,
            "p90_us": self.p90_us,
            "mean_us": self.mean_us,
            "std_us": self.std_us,
            "samples": self.samples,
            "rel_spread": self.rel_spread,
            "noise_met": self.noise_met,
            "timer": self.timer_used,
            "cold_l2": self.cold_l2,
            "telemetry": dict(self.telemetry),
            "extra": {
                "rel_stderr": self.rel_stderr,
                "stop_reason": self.stop_reason,
                "timer_requested": self.timer_requested,
                "timer_fallback_reason": self.timer_fallback_reason or "",
                "timing_warnings": "; ".join(self.warnings),
                "warmup_runs": self.warmup_runs,
                "launches_per_sample": self.launches_per_sample,
                "input_copies": self.input_copies,
                "quiet_ratio": self.quiet_ratio,
                "interference_retries": self.interference_retries,
            },
        }


# The guard a caller gets by default: its retries follow the stopping rule's quiet_retries.
DEFAULT_QUIET = QuietCheck()


def guard_settings(quiet: QuietCheck | None, stopping: StoppingRule) -> QuietCheck | None:
    """The guard measure_callable runs: None (off) and a caller's own QuietCheck as given; the
    default one with stopping.quiet_retries retries."""
    if quiet is DEFAULT_QUIET:
        return replace(quiet, max_retries=stopping.quiet_retries)
    return quiet


def measure_callable(
    fn: Callable,
    *,
    inputs: Sequence[object] | None = None,
    timer: str = "auto",
    cold_l2: bool = True,
    stopping: StoppingRule | None = None,
    warmup: WarmupRule | None = None,
    l2_bytes: int | None = None,
    device=None,
    telemetry: bool = True,
    min_replay_us: float = 200.0,
    quiet: QuietCheck | None = DEFAULT_QUIET,
) -> TimingResult:
    """Time `fn` on the GPU and return the statistics of its per-iteration time.

    fn: launches one iteration's work on the current stream; called as fn(inputs[k]) when inputs
        is given (k rotating over the copies), else as fn(). Never synchronizes, never allocates
        under graph capture beyond what torch's graph pool allows.
    inputs: input copies to rotate through. Required for timer "graph" with cold_l2: they must
        number at least 2 and together (distinct tensors) exceed 3 x L2; see copies_needed().
    timer: one of TIMERS. cold_l2: flush / rotate (True) or hot L2 (False).
    stopping, warmup: the rules (defaults: nvbench's 10 samples, 50 ms, 0.5%, 5 s; 3 runs, 2%).
    l2_bytes: the L2 size (default: what torch reports for the device).
    device: CUDA device (index, "cuda:N" or torch.device); default the current one.
    telemetry: read NVML around the measurement.
    min_replay_us: under graph, launches per replay are chosen so a replay lasts at least this.
    quiet: the interference guard's settings (harness/interference.py); None: no guard; the
        default takes its retries from stopping.quiet_retries.
    Raises ValueError for bad arguments, TimerUnavailable when the timer cannot run here.
    """
    import torch

    stopping = stopping if stopping is not None else StoppingRule()
    warmup = warmup if warmup is not None else WarmupRule()
    if not isinstance(stopping, StoppingRule):
        raise ValueError(f"stopping: {stopping!r} is not a StoppingRule")
    quiet = guard_settings(quiet, stopping)
    if not isinstance(warmup, WarmupRule):
        raise ValueError(f"warmup: {warmup!r} is not a WarmupRule")
    if inputs is not None and len(inputs) == 0:
        raise ValueError("inputs: empty; allowed: None or at least one input set")
    choice = resolve_timer(timer)
    dev = torch.device("cuda") if device is None else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device: {device!r} is not a CUDA device")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    with torch.cuda.device(dev):
        props = torch.cuda.get_device_properties(dev)
        l2 = int(l2_bytes if l2_bytes is not None else getattr(props, "L2_cache_size", 0))
        if cold_l2 and l2 <= 0:
            raise ValueError(f"l2_bytes: {l2} must be > 0 for cold-L2 timing")
        if choice.name == "graph" and cold_l2:
            _check_rotation(inputs, l2)
        guard = guard_for(dev, quiet) if quiet is not None else None
        result, outcome = measure_quietly(
            lambda: _measure(fn, inputs, choice, cold_l2, stopping, warmup, l2, dev, props,
                             telemetry, min_replay_us), guard, key=lambda r: r.median_us)
        notes = result.warnings
        if not outcome.quiet:
            notes += (f"interference: the latency probe around the measurement read "
                      f"{outcome.quiet_ratio:.2f} of its quiet speed after {outcome.retries} "
                      "retries; the fastest attempt was kept",)
        return replace(result, quiet_ratio=outcome.quiet_ratio,
                       interference_retries=outcome.retries, warnings=notes)


def _check_rotation(inputs, l2_bytes: int) -> None:
    if not inputs:
        raise ValueError(
            "inputs: timer graph with cold L2 needs input copies that together exceed "
            f"{ROTATION_FACTOR} x L2 ({l2_bytes} bytes); build them with copies_needed()"
        )
    total = distinct_bytes(inputs)
    if len(inputs) < 2 or total <= ROTATION_FACTOR * l2_bytes:
        raise ValueError(
            f"inputs: {len(inputs)} copies of {total} distinct bytes in all; timer graph with cold "
            f"L2 needs at least 2 copies exceeding {ROTATION_FACTOR} x L2 ({l2_bytes} bytes)"
        )


def _measure(fn, inputs, choice, cold_l2, stopping, warmup, l2, dev, props, telemetry,
             min_replay_us) -> TimingResult:
    from kvtune.harness.l2_cache import L2Flusher
    from kvtune.harness.timers_cuda import CuptiTimer, EventsTimer, GraphTimer

    copies = len(inputs) if inputs else 1
    if inputs:
        def call(i: int):
            return fn(inputs[i % copies])
    else:
        def call(i: int):
            return fn()

    # The graph timer keeps L2 cold by rotation alone; its eager priming still flushes so the
    # estimate that sizes the graph is a cold one.
    flusher = L2Flusher(l2, dev) if cold_l2 else None
    launches = 1
    if choice.name == "graph":
        # a few eager calls first: compilation and autotuning cannot happen under capture
        primer = EventsTimer(call, flusher)
        primer.run_batch(1)
        estimate_us = sorted(primer.run_batch(3))[1]
        # cold: every copy once per round (checked to exceed 3 x L2); hot: one input set suffices
        rotation = inputs if cold_l2 else (inputs[:1] if inputs else None)
        copies = len(rotation) if rotation else 1
        launches = launches_per_replay(copies, estimate_us, min_replay_us)
        runner = GraphTimer(fn, rotation, launches)
    elif choice.name == "cupti":
        runner = CuptiTimer(call, flusher)
    else:
        runner = EventsTimer(call, flusher)

    monitor = TelemetryMonitor(dev.index, pci_bus_id=_pci_bus_id(props)) if telemetry else None
    notes: list[str] = []
    runner.start()
    try:
        # warm up on the timer that measures, so its estimates are the quantity being measured
        estimate_us, warmup_runs, warm_notes = _warm_up(runner, warmup, launches)
        notes += warm_notes
        if choice.name == "graph":
            # the eager estimate of a launch-bound kernel is too high; size the graph again
            # from the replays' own estimate (one re-capture at most)
            better = launches_per_replay(copies, estimate_us, min_replay_us)
            if better > launches:
                runner.stop()
                launches = better
                runner = GraphTimer(fn, rotation, launches)
                runner.start()
        state = StoppingState(stopping, launches_per_sample=launches)
        if monitor is not None:
            monitor.start()
        wall_s = collect_samples(lambda n: runner.run_batch(n, monitor), state, estimate_us)
        if monitor is not None:
            monitor.stop()
    finally:
        runner.stop()
    notes += state.warnings()
    stats = summarize(state.samples_us)
    tel = monitor.record().to_dict() if monitor is not None else empty_telemetry()
    return TimingResult(
        median_us=stats.median_us,
        p10_us=stats.p10_us,
        p90_us=stats.p90_us,
        mean_us=stats.mean_us,
        std_us=stats.std_us,
        samples=stats.samples,
        noise_met=state.stop_reason == "noise",
        rel_stderr=stats.rel_stderr,
        timer_used=choice.name,
        timer_requested=choice.requested,
        cold_l2=bool(cold_l2),
        stop_reason=state.stop_reason or "",
        timer_fallback_reason=choice.fallback_reason,
        warnings=tuple(notes),
        warmup_runs=warmup_runs,
        warmup_estimate_us=estimate_us,
        launches_per_sample=launches,
        input_copies=copies,
        total_time_ms=stats.total_time_ms,
        wall_time_s=wall_s,
        stopping=stopping.to_dict(),
        telemetry=tel,
    )


def _warm_up(timer, rule: WarmupRule, launches: int = 1) -> tuple[float, int, list[str]]:
    """Run estimates on `timer` until two consecutive ones agree; (estimate_us, runs, notes).

    Each estimate is the median of a few samples (about 1 ms of GPU work, 3..50 samples of
    `launches` launches each) after the first, a single sample, which usually holds compilation.
    """
    estimates: list[float] = []
    iterations = 1
    while True:
        times = sorted(timer.run_batch(iterations))
        estimates.append(times[len(times) // 2])
        if warmup_settled(estimates, rule):
            return estimates[-1], len(estimates), []
        if len(estimates) >= rule.max_runs:
            last = estimates[-2:]
            note = (
                f"warm-up did not settle in {rule.max_runs} runs: last estimates "
                f"{last[0]:.2f} and {last[1]:.2f} us differ by more than {rule.rel_tol:.0%}"
            )
            return estimates[-1], len(estimates), [note]
        est = max(estimates[-1], 1e-3) * launches
        iterations = int(min(50, max(3, math.ceil(1000.0 / est))))


def _pci_bus_id(props) -> str | None:
    """NVML's PCI bus id string for a torch device's properties, when torch reports one."""
    bus = getattr(props, "pci_bus_id", None)
    dev = getattr(props, "pci_device_id", None)
    dom = getattr(props, "pci_domain_id", None)
    if bus is None or dev is None or dom is None:
        return None
    return f"{int(dom):08X}:{int(bus):02X}:{int(dev):02X}.0"

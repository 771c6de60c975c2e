"""CPU tests of the timing layer: stopping and warm-up rules on synthetic streams, the timer
fallback chain (CUPTI or GPU missing), CUPTI span attribution, and L2 rotation."""

from __future__ import annotations

import sys
import types
import typing
import warnings

import numpy as np
import pytest
import torch

from kvtune.harness import l2_cache, stopping, timers_cuda, timing
from kvtune.harness.backends import Measurement
from kvtune.harness.l2_cache import (
    copies_needed,
    distinct_bytes,
    flush_bytes,
    launch_rotation,
    launches_per_replay,
    rotation_schedule,
    tensor_bytes,
)
from kvtune.harness.stopping import (
    StoppingRule,
    StoppingState,
    WarmupRule,
    collect_samples,
    next_batch_size,
    relative_standard_error,
    summarize,
    warmup_settled,
)

MIB = 1 << 20


# ------------------------------------------------------------------------------ stopping rule


class FakeClock:
    """Wall clock that advances by the GPU time of each batch plus a fixed host overhead."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def synthetic_batches(mean_us, rel_sd, seed, clock, overhead_s=0.0):
    rng = np.random.default_rng(seed)
    calls = []

    def run_batch(n):
        calls.append(n)
        x = np.abs(rng.normal(mean_us, rel_sd * mean_us, size=n))
        clock.now += float(x.sum()) * 1e-6 + overhead_s
        return x.tolist()

    return run_batch, calls


def test_defaults_are_nvbench_rule():
    rule = StoppingRule()
    assert (rule.min_samples, rule.min_time_ms, rule.max_noise, rule.timeout_s) == (10, 50.0, 0.005, 5.0)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"min_samples": 0}, "min_samples"),
        ({"min_samples": 2.5}, "min_samples"),
        ({"min_time_ms": -1}, "min_time_ms"),
        ({"max_noise": 0}, "max_noise"),
        ({"max_noise": 1.5}, "max_noise"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"min_samples": 50, "max_samples": 20}, "max_samples"),
    ],
)
def test_stopping_rule_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=field):
        StoppingRule(**kwargs)


def test_converges_on_quiet_stream_after_minimums():
    clock = FakeClock()
    run_batch, calls = synthetic_batches(100.0, 0.01, seed=1, clock=clock)
    state = StoppingState(StoppingRule())
    collect_samples(run_batch, state, estimate_us=100.0, clock=clock)
    assert state.stop_reason == "noise" and state.noise_met
    # 50 ms of 100 us samples is 500 samples: the time minimum, not the sample minimum, binds
    assert state.count >= 500 and state.total_time_ms >= 50.0
    assert relative_standard_error(state.samples_us) <= 0.005
    assert state.warnings() == []
    # the first batch asks for everything the minimums need in one go
    assert calls[0] == 500


def test_quiet_stream_never_stops_before_min_samples():
    clock = FakeClock()
    run_batch, _ = synthetic_batches(10_000.0, 0.0001, seed=2, clock=clock)
    state = StoppingState(StoppingRule(min_samples=25, min_time_ms=0.0))
    collect_samples(run_batch, state, estimate_us=10_000.0, clock=clock)
    assert state.count == 25 and state.stop_reason == "noise"


def test_times_out_on_noisy_stream_with_warning():
    clock = FakeClock()
    # rel sd 300%: the standard error needs ~360,000 samples, far past a 0.2 s timeout
    run_batch, _ = synthetic_batches(50.0, 3.0, seed=3, clock=clock, overhead_s=0.002)
    rule = StoppingRule(timeout_s=0.2)
    state = StoppingState(rule)
    wall = collect_samples(run_batch, state, estimate_us=50.0, clock=clock)
    assert state.stop_reason == "timeout" and not state.noise_met
    assert wall >= 0.2
    (warning,) = state.warnings()
    assert "noise target not reached" in warning and "timeout" in warning
    assert relative_standard_error(state.samples_us) > rule.max_noise


def test_timeout_before_minimums_says_so():
    state = StoppingState(StoppingRule(min_samples=100))
    state.extend([5.0, 6.0])
    assert state.should_stop(elapsed_s=10.0)
    assert state.stop_reason == "timeout"
    assert "min_samples" in state.warnings()[0]


def test_max_samples_caps_a_noisy_stream():
    clock = FakeClock()
    run_batch, _ = synthetic_batches(5.0, 2.0, seed=4, clock=clock)
    state = StoppingState(StoppingRule(max_samples=300, timeout_s=3600))
    collect_samples(run_batch, state, estimate_us=5.0, clock=clock)
    assert state.count == 300 and state.stop_reason == "max_samples" and not state.noise_met


def test_noise_flag_follows_relative_standard_error():
    rule = StoppingRule(min_samples=10, min_time_ms=0.0, max_noise=0.01)
    quiet, noisy = StoppingState(rule), StoppingState(rule)
    quiet.extend([100.0, 100.5] * 10)
    noisy.extend([50.0, 150.0] * 10)
    assert quiet.noise_met and not noisy.noise_met


def test_graph_samples_count_gpu_time_of_all_launches():
    state = StoppingState(StoppingRule(min_samples=1, min_time_ms=1.0), launches_per_sample=10)
    state.extend([50.0, 50.0])  # two replays of 10 launches of 50 us: 1 ms of GPU time
    assert state.total_time_ms == pytest.approx(1.0)
    assert next_batch_size(StoppingState(StoppingRule(), launches_per_sample=10), 100.0) == 50


def test_rejects_non_finite_samples():
    with pytest.raises(ValueError, match="sample_us"):
        StoppingState(StoppingRule()).extend([1.0, float("nan")])


def test_next_batch_size_is_capped_by_batch_time_and_max_samples():
    state = StoppingState(StoppingRule(min_time_ms=10_000.0, timeout_s=60))
    assert next_batch_size(state, 1000.0) == int(stopping.MAX_BATCH_TIME_US / 1000.0)
    assert next_batch_size(state, 0.001) == stopping.MAX_BATCH_ITERATIONS
    capped = StoppingState(StoppingRule(min_samples=5, max_samples=7))
    capped.extend([1.0] * 6)
    assert next_batch_size(capped, 1.0) == 1


def test_summary_statistics():
    s = summarize(list(range(1, 101)))
    assert s.median_us == pytest.approx(50.5)
    assert s.p10_us == pytest.approx(10.9) and s.p90_us == pytest.approx(90.1)
    assert s.mean_us == pytest.approx(50.5) and s.samples == 100
    assert s.std_us == pytest.approx(np.std(np.arange(1, 101), ddof=1))
    assert s.total_time_ms == pytest.approx(5.05)
    assert summarize([]).samples == 0


# ------------------------------------------------------------------------------ warm-up


def test_warmup_settles_on_two_agreeing_estimates():
    rule = WarmupRule()
    assert not warmup_settled([5000.0, 100.0], rule)  # fewer than 3 runs
    assert not warmup_settled([5000.0, 100.0, 110.0], rule)  # 10% apart
    assert warmup_settled([5000.0, 100.0, 101.0], rule)
    assert not warmup_settled([5000.0, 0.0, 0.0], rule)


class ScriptedTimer:
    """Returns scripted per-iteration times: the first call is 'compilation'."""

    def __init__(self, medians):
        self.medians = list(medians)
        self.batches = []

    def run_batch(self, n, monitor=None):
        self.batches.append(n)
        value = self.medians.pop(0) if len(self.medians) > 1 else self.medians[0]
        return [value] * n


def test_warm_up_keeps_compilation_out_and_stops_when_settled():
    timer = ScriptedTimer([2_000_000.0, 130.0, 100.0, 101.0, 100.5])
    estimate, runs, notes = timing._warm_up(timer, WarmupRule())
    assert runs == 4 and estimate == 101.0 and notes == []
    assert timer.batches[0] == 1  # the compiling call runs once, alone


def test_warm_up_cap_gives_a_warning():
    timer = ScriptedTimer([100.0, 200.0] * 20)
    _, runs, notes = timing._warm_up(timer, WarmupRule(max_runs=6))
    assert runs == 6 and len(notes) == 1 and "did not settle" in notes[0]


# ------------------------------------------------------------------------------ timer choice


@pytest.fixture
def fresh_timer_state(monkeypatch):
    monkeypatch.setattr(timing, "_cupti_probe_result", {})
    monkeypatch.setattr(timing, "_warned_reasons", set())


def fake_cupti_module(record_kernels: bool):
    """A stand-in for cupti-python: activity records go through the real CuptiTracer."""
    mod = types.SimpleNamespace()
    mod.ActivityKind = types.SimpleNamespace(
        RUNTIME=5, DRIVER=4, CONCURRENT_KERNEL=10, MEMCPY=1, MEMSET=2
    )
    state = {"t": 1000, "corr": 0, "pending": [], "callbacks": None, "enabled": set()}

    def get_timestamp():
        state["t"] += 10
        return state["t"]

    def activity_enable(kind):
        state["enabled"].add(int(kind))

    def activity_disable(kind):
        state["enabled"].discard(int(kind))

    def activity_register_callbacks(requested, completed):
        state["callbacks"] = (requested, completed)

    def activity_flush_all(flag):
        _, completed = state["callbacks"]
        records, state["pending"] = state["pending"], []
        completed(records)

    def launch(name="probe_kernel"):
        """What a kernel launch produces: an API record and (if recorded) a kernel record."""
        state["corr"] += 1
        state["t"] += 1
        corr, t = state["corr"], state["t"]
        state["pending"].append(types.SimpleNamespace(kind=5, start=t, end=t + 1, correlation_id=corr))
        if record_kernels:
            state["pending"].append(
                types.SimpleNamespace(kind=10, start=t + 100, end=t + 5100, correlation_id=corr, name=name)
            )

    mod.get_timestamp = get_timestamp
    mod.activity_enable = activity_enable
    mod.activity_disable = activity_disable
    mod.activity_register_callbacks = activity_register_callbacks
    mod.activity_flush_all = activity_flush_all
    mod.finalize = lambda: None
    mod._launch = launch
    mod._state = state
    return mod


def install_cupti(monkeypatch, module):
    package = types.ModuleType("cupti")
    package.cupti = module
    monkeypatch.setitem(sys.modules, "cupti", package)
    monkeypatch.setitem(sys.modules, "cupti.cupti", module)


def test_unknown_timer_is_a_value_error():
    with pytest.raises(ValueError, match="timer: 'stopwatch' unknown; allowed: auto, cupti, events, graph"):
        timing.resolve_timer("stopwatch")


@pytest.mark.parametrize("name", timing.TIMERS)
def test_no_gpu_means_timer_unavailable(monkeypatch, fresh_timer_state, name):
    monkeypatch.setattr(timing, "gpu_available", lambda: False)
    with pytest.raises(timing.TimerUnavailable, match="no CUDA GPU"):
        timing.resolve_timer(name)


def test_measure_callable_without_gpu_raises_timer_unavailable(monkeypatch, fresh_timer_state):
    monkeypatch.setattr(timing, "gpu_available", lambda: False)
    with pytest.raises(timing.TimerUnavailable):
        timing.measure_callable(lambda: None, timer="events")


def test_auto_falls_back_to_events_with_one_warning_when_cupti_missing(monkeypatch, fresh_timer_state):
    monkeypatch.setattr(timing, "gpu_available", lambda: True)
    monkeypatch.setitem(sys.modules, "cupti", None)  # import cupti -> ImportError
    with pytest.warns(RuntimeWarning, match="using events because cupti-python not importable"):
        choice = timing.resolve_timer("auto")
    assert choice.name == "events" and choice.requested == "auto"
    assert "not importable" in choice.fallback_reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second resolution must not warn again
        assert timing.resolve_timer("auto").name == "events"
    with pytest.raises(timing.TimerUnavailable, match="timer cupti: cupti-python not importable"):
        timing.resolve_timer("cupti")
    assert timing.resolve_timer("events").name == "events"
    assert timing.resolve_timer("graph").name == "graph"


def test_auto_falls_back_when_cupti_records_no_probe_kernel(monkeypatch, fresh_timer_state):
    monkeypatch.setattr(timing, "gpu_available", lambda: True)
    module = fake_cupti_module(record_kernels=False)
    install_cupti(monkeypatch, module)
    real_probe = timers_cuda.probe_cupti
    calls = []

    def probe():
        calls.append(1)
        return real_probe(launch=module._launch, synchronize=lambda: None)

    monkeypatch.setattr(timers_cuda, "probe_cupti", probe)
    with pytest.warns(RuntimeWarning, match="recorded no probe kernel"):
        assert timing.resolve_timer("auto").name == "events"
    assert module._state["enabled"] == set()  # the probe tore CUPTI down again
    assert timing.resolve_timer("auto").fallback_reason.startswith("CUPTI recorded no probe kernel")
    assert len(calls) == 1  # probed once per process


def test_auto_picks_cupti_when_probe_kernel_is_recorded(monkeypatch, fresh_timer_state):
    monkeypatch.setattr(timing, "gpu_available", lambda: True)
    module = fake_cupti_module(record_kernels=True)
    install_cupti(monkeypatch, module)
    real_probe = timers_cuda.probe_cupti
    monkeypatch.setattr(
        timers_cuda, "probe_cupti", lambda: real_probe(launch=module._launch, synchronize=lambda: None)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice = timing.resolve_timer("auto")
    assert choice.name == "cupti" and choice.fallback_reason is None


# ------------------------------------------------------------------------------ CUPTI spans


def test_spans_run_from_first_kernel_start_to_last_kernel_end_and_skip_flushes():
    windows = [(100, 200), (300, 400)]
    api = [(50, 1), (110, 2), (150, 3), (250, 4), (310, 5)]  # 1 and 4 are L2 flushes
    gpu = [
        (1, 1000, 9000, "flush"),
        (2, 9100, 9600, "k_a"),
        (3, 9650, 9900, "k_b"),
        (4, 10_000, 20_000, "flush"),
        (5, 20_100, 20_400, "k_a"),
    ]
    assert timers_cuda.iteration_spans_us(windows, api, gpu) == [0.8, 0.3]


def test_span_without_gpu_record_is_an_error():
    with pytest.raises(timers_cuda.TimerError, match="iteration 1"):
        timers_cuda.iteration_spans_us([(0, 10), (20, 30)], [(5, 1), (25, 2)], [(1, 0, 100, "k")])


def test_cupti_timer_batch_excludes_flush_kernels(monkeypatch):
    """The CUPTI timer loop on a fake CUPTI: the flush is launched outside the timed bracket."""
    module = fake_cupti_module(record_kernels=True)
    lead_ins = []
    monkeypatch.setattr(timers_cuda.HostPace, "lead_in", lambda self, n: lead_ins.append(n))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)

    class Flusher:
        def flush(self):
            module._launch("flush")
            # a flush kernel ten times longer than the work: counting it would show
            module._state["pending"][-1].end += 50_000

    timer = timers_cuda.CuptiTimer(lambda i: module._launch(f"work_{i}"), Flusher(), cupti=module)
    timer.start()
    samples = timer.run_batch(4)
    timer.stop()
    assert samples == [5.0] * 4  # 5000 ns per work kernel, flushes not counted
    assert module._state["enabled"] == set()
    assert lead_ins == [4]  # the whole batch's lead-in, asked for before its first iteration


# ------------------------------------------------------------------------------ lead-in


def test_lead_in_covers_the_hosts_enqueue_with_margin():
    # 30 iterations of 270 us on the host (an H100 decode step's flush + two Triton launches)
    cycles = timers_cuda.lead_in_cycles(30, 270.0)
    assert cycles == int(timers_cuda.LEAD_IN_MARGIN * 30 * 270.0 * timers_cuda.SLEEP_CYCLES_PER_US)
    assert cycles / timers_cuda.SLEEP_CYCLES_PER_US > 30 * 270.0  # longer than the enqueue
    assert timers_cuda.lead_in_cycles(1, 0.0) == timers_cuda.LEAD_IN_CYCLES
    assert timers_cuda.lead_in_cycles(10**9, 1e6) == timers_cuda.MAX_LEAD_IN_CYCLES


@pytest.mark.parametrize("n, host_us", [(-1, 10.0), (3, -1.0), (3, float("nan"))])
def test_lead_in_rejects_bad_input(n, host_us):
    with pytest.raises(ValueError, match="iterations, host_us_per_iteration"):
        timers_cuda.lead_in_cycles(n, host_us)


def test_paced_chunks_cover_the_batch_in_order():
    chunks = timers_cuda.paced_chunks(2 * timers_cuda.PACED_CHUNK + 3)
    assert [len(c) for c in chunks] == [timers_cuda.PACED_CHUNK] * 2 + [3]
    assert [i for c in chunks for i in c] == list(range(2 * timers_cuda.PACED_CHUNK + 3))
    assert timers_cuda.paced_chunks(0) == []


def test_host_pace_sizes_the_next_batch_from_the_last(monkeypatch):
    slept = []
    monkeypatch.setattr(torch.cuda, "_sleep", slept.append, raising=False)
    pace = timers_cuda.HostPace()
    pace.lead_in(30)
    assert slept[-1] == timers_cuda.lead_in_cycles(30, timers_cuda.HOST_US_GUESS)
    pace.learn(0.030, 30)  # a slow host: 1 ms per iteration
    pace.lead_in(30)
    assert slept[-1] == timers_cuda.lead_in_cycles(30, 1000.0)
    assert slept[-1] > slept[0]
    pace.learn(0.0, 0)  # an empty batch teaches nothing
    assert pace.host_us == pytest.approx(1000.0)


def test_events_timer_learns_the_hosts_pace(monkeypatch):
    """EventsTimer on fake events: the batch's lead-in is sized from the batch before."""
    class Event:
        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 0.001

    monkeypatch.setattr(timers_cuda._EventPool, "take",
                        lambda self, n: ([Event() for _ in range(n)], [Event() for _ in range(n)]))
    asked = []
    monkeypatch.setattr(timers_cuda.HostPace, "lead_in",
                        lambda self, n: asked.append((n, self.host_us)))
    clock = iter(range(0, 1000, 1))
    monkeypatch.setattr(timers_cuda.time, "perf_counter", lambda: next(clock) * 0.004)
    timer = timers_cuda.EventsTimer(lambda i: None, None)
    assert timer.run_batch(5) == [1.0] * 5
    timer.run_batch(5)
    assert asked[0] == (5, timers_cuda.HOST_US_GUESS)
    assert asked[1] == (5, pytest.approx(4000.0 / 5))  # 4 ms over 5 iterations
    # a batch longer than the launch queue holds runs as paced chunks, each behind its lead-in
    n = timers_cuda.PACED_CHUNK + 6
    assert timer.run_batch(n) == [1.0] * n
    assert [a[0] for a in asked[2:]] == [timers_cuda.PACED_CHUNK, 6]


# ------------------------------------------------------------------------------ rotation


def test_flush_buffer_is_twice_l2():
    assert flush_bytes(50 * MIB) == 100 * MIB
    assert flush_bytes(0) == 4096


@pytest.mark.parametrize(
    "l2, per_copy, expected",
    [
        (50 * MIB, 4 * MIB, 38),  # 37 copies = 148 MiB <= 150 MiB; 38 exceed it
        (50 * MIB, 50 * MIB, 4),  # three copies equal 3 x L2 but do not exceed it
        (60 * MIB, 7 * MIB, 26),
        (50 * MIB, 1 << 30, 2),  # one copy would exceed 3 x L2, but never fewer than 2 when cold
    ],
)
def test_copies_needed_exceed_three_times_l2(l2, per_copy, expected):
    n = copies_needed(l2, per_copy)
    assert n == expected
    assert n * per_copy > 3 * l2
    if n > 2:
        assert (n - 1) * per_copy <= 3 * l2


def test_copies_needed_hot_and_bad_input():
    assert copies_needed(50 * MIB, 4 * MIB, cold_l2=False) == 1
    with pytest.raises(ValueError, match="bytes_per_copy"):
        copies_needed(50 * MIB, 0)
    with pytest.raises(ValueError, match="l2_bytes"):
        copies_needed(0, 4 * MIB)
    with pytest.raises(ValueError, match="bytes_per_copy"):
        copies_needed(50 * MIB, 16)  # millions of copies


@pytest.mark.parametrize("copies, estimate_us", [(38, 5.0), (2, 300.0), (1, 5.0), (7, float("nan"))])
def test_rotation_touches_every_copy_equally(copies, estimate_us):
    launches = launches_per_replay(copies, estimate_us)
    assert launches % copies == 0 and launches >= copies
    counters = [0] * copies
    inputs = [{"counter_index": k} for k in range(copies)]
    launch_rotation(lambda inp: counters.__setitem__(inp["counter_index"], counters[inp["counter_index"]] + 1),
                    inputs, rotation_schedule(copies, launches))
    assert min(counters) >= 1 and len(set(counters)) == 1 and sum(counters) == launches


def test_graph_timer_capture_body_touches_every_copy():
    """What GraphTimer records under capture: one launch per schedule entry over all copies."""
    touched = []
    inputs = [torch.full((4,), float(k)) for k in range(5)]
    timer = timers_cuda.GraphTimer(lambda x: touched.append(int(x[0])), inputs, launches=15)
    timer._launch_all()
    assert sorted(set(touched)) == [0, 1, 2, 3, 4] and touched.count(0) == 3
    hot = timers_cuda.GraphTimer(lambda: touched.append(-1), None, launches=3)
    hot._launch_all()
    assert touched[-3:] == [-1, -1, -1]


def test_rotation_schedule_rejects_partial_rounds():
    with pytest.raises(ValueError, match="launches"):
        rotation_schedule(4, 6)
    with pytest.raises(ValueError, match="num_copies"):
        rotation_schedule(0, 6)


def test_launches_per_replay_amortises_short_kernels():
    assert launches_per_replay(1, 5.0, min_replay_us=200.0) == 40
    assert launches_per_replay(3, 5.0, min_replay_us=200.0) == 42
    assert launches_per_replay(2, 500.0) == 2


def test_tensor_bytes_counts_shared_tensors_once():
    shared = torch.zeros(256, dtype=torch.int32)  # 1 KiB, e.g. plan indices shared by copies
    copies = [{"kv": torch.zeros(1024, dtype=torch.bfloat16), "idx": shared} for _ in range(3)]
    assert tensor_bytes(copies[0]) == 2048 + 1024
    assert distinct_bytes(copies) == 3 * 2048 + 1024
    assert tensor_bytes((shared, [shared, {"a": shared}])) == 1024


def test_graph_cold_rotation_is_checked(monkeypatch):
    small = [torch.zeros(1024) for _ in range(3)]
    with pytest.raises(ValueError, match="exceeding 3 x L2"):
        timing._check_rotation(small, l2_bytes=50 * MIB)
    with pytest.raises(ValueError, match="needs input copies"):
        timing._check_rotation(None, l2_bytes=50 * MIB)
    big = [torch.zeros(1) for _ in range(2)]
    monkeypatch.setattr(timing, "distinct_bytes", lambda inputs: 151 * MIB)
    timing._check_rotation(big, l2_bytes=50 * MIB)  # 2 copies, 151 MiB > 150 MiB: accepted


# ------------------------------------------------------------------------------ result


def test_timing_result_fills_a_measurement():
    result = timing.TimingResult(
        median_us=10.0, p10_us=9.0, p90_us=12.0, mean_us=10.2, std_us=0.5, samples=40,
        noise_met=True, rel_stderr=0.004, timer_used="cupti", timer_requested="auto",
        cold_l2=True, stop_reason="noise", launches_per_sample=1, telemetry={"flagged": False},
    )
    m = Measurement(status="ok", **result.measurement_fields())
    assert m.latency_us == 10.0 and m.timer == "cupti" and m.noise_met
    assert m.rel_spread == pytest.approx(0.3)
    row = m.to_row()
    assert row["timer_requested"] == "auto" and row["telemetry_flagged"] is False


def test_l2_cache_module_has_no_gpu_import_at_top():
    # the pure helpers must stay importable and usable without CUDA
    assert l2_cache.copies_needed(1, 1) >= 2


def test_l2_flusher_writes_twice_l2_with_a_new_value_and_reads_it_back():
    flusher = l2_cache.L2Flusher(1 << 20, "cpu")
    assert flusher._buffer.numel() * 4 == 2 << 20 and flusher.read_back
    flusher.flush()
    first = int(flusher._buffer[0])
    flusher.flush()
    assert int(flusher._buffer[-1]) == first + 1 and int(flusher._sink) == first + 1
    write_only = l2_cache.L2Flusher(1 << 20, "cpu", read_back=False)
    write_only._sink.fill_(-7)
    write_only.flush()
    assert int(write_only._sink) == -7 and int(write_only._buffer[0]) == 1


# ------------------------------------------------------------------------------ orchestration


class FakeRunner:
    """Stands in for a GPU timer: fixed per-sample times with a little deterministic jitter."""

    instances: typing.ClassVar[list] = []

    def __init__(self, value_us):
        self.value_us = value_us
        self.started = self.stopped = False
        self.batches = []
        self.rng = np.random.default_rng(len(FakeRunner.instances))
        FakeRunner.instances.append(self)

    def start(self):
        self.started = True

    def stop(self):
        self.stopped = True

    def run_batch(self, n, monitor=None):
        self.batches.append(n)
        if monitor is not None:
            monitor.sample()
        return (self.value_us * (1 + 0.001 * self.rng.standard_normal(n))).tolist()


def install_fake_timers(monkeypatch, eager_us, graph_us, touched):
    FakeRunner.instances = []

    class FakeEvents(FakeRunner):
        def __init__(self, call, flusher):
            super().__init__(eager_us)
            self.call = call

        def run_batch(self, n, monitor=None):
            for _ in range(n):
                self.call(len(touched))
            return super().run_batch(n, monitor)

    class FakeGraph(FakeRunner):
        def __init__(self, fn, rotation, launches):
            super().__init__(graph_us)
            self.launches, self.rotation = launches, rotation

    monkeypatch.setattr(timers_cuda, "EventsTimer", FakeEvents)
    monkeypatch.setattr(timers_cuda, "CuptiTimer", FakeEvents)
    monkeypatch.setattr(timers_cuda, "GraphTimer", FakeGraph)
    monkeypatch.setattr(l2_cache, "L2Flusher", lambda l2, dev: "flusher")


def test_graph_is_resized_from_its_own_warm_up_estimate(monkeypatch):
    touched = []
    install_fake_timers(monkeypatch, eager_us=40.0, graph_us=5.0, touched=touched)
    choice = timing.TimerChoice("graph", "graph")
    result = timing._measure(lambda: touched.append(1), None, choice, False, StoppingRule(),
                             WarmupRule(), 50 * MIB, torch.device("cuda", 0), object(), False, 200.0)
    first_graph, second_graph = FakeRunner.instances[1:]
    assert first_graph.launches == 5 and first_graph.stopped  # sized from the 40 us eager guess
    launches = second_graph.launches  # re-sized from the ~5 us replays: 200 us / 5 us
    assert launches in (40, 41) and second_graph.stopped
    assert result.timer_used == "graph" and result.launches_per_sample == launches
    assert result.median_us == pytest.approx(5.0, rel=0.01) and result.noise_met
    # 50 ms of GPU time at ~40 launches x 5 us per sample: about 250 samples
    assert 240 <= result.samples <= 260 and result.stop_reason == "noise"
    assert result.telemetry == timing.empty_telemetry()


def test_eager_timer_rotates_inputs_and_warms_up_on_itself(monkeypatch):
    touched = []
    install_fake_timers(monkeypatch, eager_us=100.0, graph_us=1.0, touched=touched)
    inputs = [{"k": k} for k in range(3)]
    choice = timing.TimerChoice("cupti", "auto")
    result = timing._measure(lambda inp: touched.append(inp["k"]), inputs, choice, True,
                             StoppingRule(), WarmupRule(), 50 * MIB, torch.device("cuda", 0),
                             object(), False, 200.0)
    (runner,) = FakeRunner.instances
    assert runner.started and runner.stopped and runner.batches[0] == 1  # warm-up began alone
    assert set(touched) == {0, 1, 2}
    assert result.timer_used == "cupti" and result.timer_requested == "auto"
    assert result.warmup_runs >= 3 and result.input_copies == 3 and result.samples >= 500


def test_cupti_records_only_launch_apis_where_it_can():
    import enum

    module = fake_cupti_module(record_kernels=True)
    module.runtime_api_trace_cbid = enum.IntEnum("runtime_api_trace_cbid", {
        "INVALID": 0, "cudaGetDevice_v3020": 1, "cudaLaunchKernel_v7000": 2,
        "_runtime_api_trace_cbid__cudaLaunchKernel_v13000": 3, "cudaMemsetAsync_v3020": 4,
        "cudaGetLastError_v3020": 5, "SIZE": 6})
    module.driver_api_trace_cbid = enum.IntEnum("driver_api_trace_cbid", {
        "cuCtxGetCurrent": 1, "cuLaunchKernelEx": 2, "cuMemcpyDtoDAsync_v2": 3, "FORCE_INT": 99})
    switched = {}
    module.activity_enable_runtime_api = lambda cbid, on: switched.__setitem__(("rt", cbid), on)
    module.activity_enable_driver_api = lambda cbid, on: switched.__setitem__(("drv", cbid), on)
    tracer = timers_cuda.CuptiTracer(module)
    tracer.start()
    assert tracer.api_filter == "launches"
    # the name-mangled "__cudaLaunchKernel" (CUDA 13's launch path for <<<>>>) is no enum member
    # on Python >= 3.11, so it is never switched off and stays recorded
    assert switched == {("rt", 1): 0, ("rt", 2): 1, ("rt", 4): 1, ("rt", 5): 0,
                        ("drv", 1): 0, ("drv", 2): 1, ("drv", 3): 1}
    tracer.stop()
    older = timers_cuda.CuptiTracer(fake_cupti_module(record_kernels=True))
    older.start()  # a CUPTI without per-API switches records everything
    assert older.api_filter == "none"
    older.stop()

"""The three GPU timers behind harness.timing: CUDA events, CUPTI activity records, CUDA graphs.

Each timer takes `call(i)`, which launches iteration i's work once on the current stream, and
offers `start()`, `run_batch(n, monitor) -> [n samples in us]` and `stop()`. A batch enqueues n
timed iterations, in chunks of PACED_CHUNK for the eager timers, each chunk behind a GPU sleep
that covers the host's enqueue of it (HostPace, below), and synchronises after each chunk; the
L2 flush (when cold) is enqueued before each iteration, outside its timed span.

- events: a CUDA event pair around each iteration.
- cupti:  CUPTI's activity API (package cupti-python). Each iteration is bracketed by two CUPTI
  timestamps taken on the host; the API records (RUNTIME, DRIVER) that started inside the bracket
  give the correlation ids of the iteration's launches, and the sample is the span from the first
  of their GPU records' start (CONCURRENT_KERNEL, MEMCPY, MEMSET) to the last one's end. The L2
  flush is launched outside every bracket, so its kernel is never counted; launch gaps on the host
  and Python overhead before the first kernel are not counted either.
- graph:  the iteration's launches, once per rotated input copy, captured in one CUDA graph;
  events around each replay; the sample is the replay time over the launches in it.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence

from kvtune.harness.l2_cache import L2Flusher, launch_rotation, rotation_schedule

# The host must stay ahead of the GPU for a whole batch. Where enqueueing one iteration (the
# flush, the launches, the events) takes the host longer than the GPU takes to run it, the GPU
# waits between an iteration's start event and its first launch, or between its launches, and
# the sample measures the host. On an H100 the flush plus kernels/decode.py's two Triton
# launches took the host 100-270 us per iteration against 35-70 us of GPU work on
# llama3-70b-tp8 decodes; event pairs read those 1.3-4x slow in many calls, a CUDA-graph replay
# and a loop behind a long sleep never (docs/PERFORMANCE.md, twenty-second session). So every
# batch starts behind a GPU sleep (torch.cuda._sleep) long enough for the host to enqueue all of
# it: LEAD_IN_MARGIN x the iterations x the host's time per iteration in the timer's batch
# before (HOST_US_GUESS for the first), at SLEEP_CYCLES_PER_US (the H100 / H200 top SM clock,
# 1.98 GHz, rounded up: a slower clock only sleeps longer), between LEAD_IN_CYCLES and
# MAX_LEAD_IN_CYCLES.
LEAD_IN_CYCLES = 50_000
MAX_LEAD_IN_CYCLES = 2_000_000_000  # 1 s
SLEEP_CYCLES_PER_US = 2_000
HOST_US_GUESS = 300.0
LEAD_IN_MARGIN = 1.5
# Iterations enqueued behind one lead-in. The host gets only as far ahead as the driver's launch
# queue lets it (on the order of a thousand pending launches); past that it blocks, the GPU
# drains the queue at the host's pace and the samples time the host again. At up to about ten
# launches and events per iteration (the flush, a hybrid step's launches, the event pair), 64
# iterations stay well inside it, so a batch runs as chunks of 64, each behind its own lead-in
# once the one before has finished. The price is wall time, not accuracy: the GPU idles about
# 1.5 x the host's enqueue time of each chunk (a lead-in sized by what the GPU would have done
# meanwhile could be shorter, but a sample already holding host time would then shorten the
# next lead-in too, so the measurement could stay host-bound).
PACED_CHUNK = 64


def paced_chunks(n: int) -> list[range]:
    """The iterations 0 .. n - 1 of a batch in chunks of at most PACED_CHUNK."""
    return [range(c, min(n, c + PACED_CHUNK)) for c in range(0, n, PACED_CHUNK)]


class TimerError(RuntimeError):
    """A timer could not produce samples (for example CUPTI recorded no kernel)."""


def lead_in_cycles(iterations: int, host_us_per_iteration: float) -> int:
    """GPU sleep cycles that cover the host's enqueue of `iterations` iterations (>= 0) taking
    `host_us_per_iteration` us each (>= 0), LEAD_IN_MARGIN over, clamped to
    [LEAD_IN_CYCLES, MAX_LEAD_IN_CYCLES]."""
    if iterations < 0 or not host_us_per_iteration >= 0:
        raise ValueError(f"iterations, host_us_per_iteration: {iterations}, "
                         f"{host_us_per_iteration} not allowed; allowed: >= 0")
    cycles = LEAD_IN_MARGIN * iterations * host_us_per_iteration * SLEEP_CYCLES_PER_US
    return int(min(max(cycles, LEAD_IN_CYCLES), MAX_LEAD_IN_CYCLES))


class HostPace:
    """The host's enqueue time per iteration, learnt batch by batch, and the lead-in it needs."""

    def __init__(self, host_us: float = HOST_US_GUESS) -> None:
        self.host_us = float(host_us)

    def lead_in(self, iterations: int) -> None:
        """Enqueue the GPU sleep for a batch of `iterations` (nothing where torch lacks it)."""
        import torch

        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is not None:
            sleep(lead_in_cycles(iterations, self.host_us))

    def learn(self, enqueue_s: float, iterations: int) -> None:
        """Record that the host took enqueue_s seconds to enqueue `iterations` iterations."""
        if iterations > 0:
            self.host_us = max(enqueue_s * 1e6 / iterations, 1.0)


def _lead_in() -> None:
    """A short fixed lead-in (the graph timer: one replay is one cheap launch)."""
    HostPace(LEAD_IN_CYCLES / SLEEP_CYCLES_PER_US).lead_in(1)


class _EventPool:
    """Reusable timing events, grown on demand (creating events each batch costs host time)."""

    def __init__(self) -> None:
        self.starts: list = []
        self.ends: list = []

    def take(self, n: int):
        import torch

        while len(self.starts) < n:
            self.starts.append(torch.cuda.Event(enable_timing=True))
            self.ends.append(torch.cuda.Event(enable_timing=True))
        return self.starts, self.ends


class EventsTimer:
    """A CUDA event pair around each iteration; the batch in paced chunks (PACED_CHUNK), one
    synchronize after each."""

    name = "events"

    def __init__(self, call: Callable[[int], object], flusher: L2Flusher | None) -> None:
        self._call = call
        self._flusher = flusher
        self._pool = _EventPool()
        self._iteration = 0
        self._pace = HostPace()

    def start(self) -> None:
        pass

    def run_batch(self, n: int, monitor=None) -> list[float]:
        starts, ends = self._pool.take(n)
        for chunk in paced_chunks(n):
            if chunk.start:
                ends[chunk.start - 1].synchronize()  # the GPU is idle before the next lead-in
            self._pace.lead_in(len(chunk))
            t0 = time.perf_counter()
            for i in chunk:
                if self._flusher is not None:
                    self._flusher.flush()
                starts[i].record()
                self._call(self._iteration)
                ends[i].record()
                self._iteration += 1
            self._pace.learn(time.perf_counter() - t0, len(chunk))
        if monitor is not None:
            monitor.sample()  # while the GPU is still busy with the batch
        ends[n - 1].synchronize()
        return [starts[i].elapsed_time(ends[i]) * 1000.0 for i in range(n)]

    def stop(self) -> None:
        pass


class GraphTimer:
    """Launches captured once in a CUDA graph (one per schedule entry); events around replays.

    fn: launches the work on one input set (`fn(inputs[k])`), or with no argument when inputs is
    None. launches: launches per replay, a multiple of the number of copies.
    """

    name = "graph"

    def __init__(self, fn: Callable, inputs: Sequence[object] | None, launches: int) -> None:
        self._fn = fn
        self._inputs = inputs
        self.launches = int(launches)
        self.schedule = rotation_schedule(len(inputs) if inputs else 1, self.launches)
        self._graph = None
        self._pool = _EventPool()

    def _launch_all(self) -> None:
        if self._inputs:
            launch_rotation(self._fn, self._inputs, self.schedule)
        else:
            for _ in self.schedule:
                self._fn()

    def start(self) -> None:
        import torch

        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._launch_all()
        graph.replay()  # the first replays upload the graph; keep them out of the samples
        graph.replay()
        torch.cuda.synchronize()
        self._graph = graph

    def run_batch(self, n: int, monitor=None) -> list[float]:
        starts, ends = self._pool.take(n)
        _lead_in()
        for i in range(n):
            starts[i].record()
            self._graph.replay()
            ends[i].record()
        if monitor is not None:
            monitor.sample()
        ends[n - 1].synchronize()
        return [starts[i].elapsed_time(ends[i]) * 1000.0 / self.launches for i in range(n)]

    def stop(self) -> None:
        self._graph = None


# ----------------------------------------------------------------------------------------- CUPTI

API_KINDS = ("RUNTIME", "DRIVER")
GPU_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET")
ACTIVITY_BUFFER_BYTES = 8 << 20
# Only the API calls that put work on the GPU are recorded: a torch op makes many more runtime
# calls (device queries, error checks), and turning each record into a Python object cost about
# 0.3 ms per timed iteration on an H200 (2026-11-26), which made a 5 us kernel take seconds to
# reach 50 ms of samples.
LAUNCH_API_PREFIXES = {
    "runtime_api_trace_cbid": ("cudaLaunch", "cudaMemcpy", "cudaMemset", "cudaGraphLaunch"),
    "driver_api_trace_cbid": ("cuLaunch", "cuMemcpy", "cuMemset", "cuGraphLaunch"),
}


def import_cupti():
    """The cupti-python module (`from cupti import cupti`); ImportError when missing."""
    from cupti import cupti

    return cupti


class CuptiTracer:
    """Collects CUPTI activity records: API calls as (start_ns, correlation_id), GPU work as
    (correlation_id, start_ns, end_ns, name). start() enables and registers, collect() flushes and
    hands over what arrived, stop() disables and detaches CUPTI."""

    def __init__(self, cupti) -> None:
        self._cupti = cupti
        self._lock = threading.Lock()
        self._api: list[tuple[int, int]] = []
        self._gpu: list[tuple[int, int, int, str]] = []
        self._api_kinds = {int(getattr(cupti.ActivityKind, k)) for k in API_KINDS}
        self._gpu_kinds = {int(getattr(cupti.ActivityKind, k)) for k in GPU_KINDS}
        self._enabled: list = []
        self.api_filter = "none"  # "launches" once only launch APIs are recorded

    def _buffer_requested(self):
        return ACTIVITY_BUFFER_BYTES, 0

    def _buffer_completed(self, activities) -> None:
        api, gpu = [], []
        for record in activities:
            kind = int(record.kind)
            if kind in self._api_kinds:
                api.append((int(record.start), int(record.correlation_id)))
            elif kind in self._gpu_kinds:
                name = getattr(record, "name", "") or ""
                gpu.append((int(record.correlation_id), int(record.start), int(record.end), str(name)))
        with self._lock:
            self._api.extend(api)
            self._gpu.extend(gpu)

    def start(self) -> None:
        cupti = self._cupti
        for kind in API_KINDS + GPU_KINDS:
            member = getattr(cupti.ActivityKind, kind)
            cupti.activity_enable(member)
            self._enabled.append(member)
        self.api_filter = "launches" if self._record_launch_apis_only() else "none"
        cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)

    def _record_launch_apis_only(self) -> bool:
        """Turn off API records of calls that launch nothing; False (all recorded) where this
        CUPTI cannot. Either way the spans are right: a launch's record is never turned off."""
        cupti = self._cupti
        switches = {
            "runtime_api_trace_cbid": getattr(cupti, "activity_enable_runtime_api", None),
            "driver_api_trace_cbid": getattr(cupti, "activity_enable_driver_api", None),
        }
        try:
            for enum_name, prefixes in LAUNCH_API_PREFIXES.items():
                members = getattr(cupti, enum_name, None)
                switch = switches[enum_name]
                if members is None or switch is None:
                    return False
                # Private names ("__cudaLaunchKernel_v13000") are no members on Python >= 3.11
                # and are left as they are: recorded.
                for name, member in members.__members__.items():
                    api = name.rsplit("__", 1)[-1].lstrip("_")
                    if api in ("INVALID", "SIZE", "FORCE_INT"):
                        continue
                    switch(int(member), 1 if api.startswith(prefixes) else 0)
        except Exception:  # noqa: BLE001 - an older CUPTI: keep recording every API call
            return False
        return True

    def _flush(self) -> None:
        # forced: hand over partly filled buffers too
        flag = getattr(getattr(self._cupti, "ActivityFlag", None), "FLUSH_FORCED", 1)
        self._cupti.activity_flush_all(int(flag))

    def collect(self) -> tuple[list, list]:
        self._flush()
        with self._lock:
            api, gpu = self._api, self._gpu
            self._api, self._gpu = [], []
        return api, gpu

    def stop(self) -> None:
        cupti = self._cupti
        try:
            self._flush()
        finally:
            for member in self._enabled:
                try:
                    cupti.activity_disable(member)
                except Exception:  # noqa: BLE001 - best effort: tear down what can be
                    pass
            self._enabled = []
            try:
                cupti.finalize()
            except Exception:  # noqa: BLE001
                pass


def iteration_spans_us(
    windows_ns: Sequence[tuple[int, int]],
    api_records: Sequence[tuple[int, int]],
    gpu_records: Sequence[tuple[int, int, int, str]],
) -> list[float]:
    """GPU span of each iteration in microseconds, from CUPTI records.

    windows_ns: per iteration, the host timestamps (CUPTI clock, ns) taken just before and just
    after its launches. api_records: (start_ns, correlation_id) of API calls. gpu_records:
    (correlation_id, start_ns, end_ns, name) of kernels, copies and memsets. An iteration's span runs
    from the earliest start to the latest end of the GPU records whose launch call started inside
    its window; work launched outside every window (the L2 flush) is never counted. TimerError when
    an iteration has no GPU record.
    """
    api = sorted(api_records)
    starts = [s for s, _ in api]
    by_corr: dict[int, tuple[int, int]] = {}
    for corr, start, end, _name in gpu_records:
        if corr in by_corr:
            lo, hi = by_corr[corr]
            by_corr[corr] = (min(lo, start), max(hi, end))
        else:
            by_corr[corr] = (start, end)
    spans = []
    for index, (t0, t1) in enumerate(windows_ns):
        lo = bisect.bisect_left(starts, t0)
        hi = bisect.bisect_right(starts, t1)
        found = [by_corr[corr] for _, corr in api[lo:hi] if corr in by_corr]
        if not found:
            raise TimerError(f"CUPTI recorded no GPU work for timed iteration {index}")
        spans.append((max(e for _, e in found) - min(s for s, _ in found)) / 1000.0)
    return spans


class CuptiTimer:
    """Kernel time from CUPTI activity records: first kernel start to last kernel end."""

    name = "cupti"

    def __init__(self, call: Callable[[int], object], flusher: L2Flusher | None, cupti=None) -> None:
        self._call = call
        self._flusher = flusher
        self._cupti = cupti
        self._tracer: CuptiTracer | None = None
        self._iteration = 0
        self._pace = HostPace()

    def start(self) -> None:
        if self._cupti is None:
            self._cupti = import_cupti()
        self._tracer = CuptiTracer(self._cupti)
        self._tracer.start()

    def run_batch(self, n: int, monitor=None) -> list[float]:
        import torch

        stamp = self._cupti.get_timestamp
        windows = []
        for chunk in paced_chunks(n):
            if chunk.start:
                torch.cuda.synchronize()  # the GPU is idle before the next lead-in
            self._pace.lead_in(len(chunk))
            start = time.perf_counter()
            for _ in chunk:
                if self._flusher is not None:
                    self._flusher.flush()
                t0 = stamp()
                self._call(self._iteration)
                t1 = stamp()
                windows.append((t0, t1))
                self._iteration += 1
            self._pace.learn(time.perf_counter() - start, len(chunk))
        if monitor is not None:
            monitor.sample()
        torch.cuda.synchronize()
        api, gpu = self._tracer.collect()
        return iteration_spans_us(windows, api, gpu)

    def stop(self) -> None:
        if self._tracer is not None:
            self._tracer.stop()
            self._tracer = None


def probe_cupti(launch: Callable[[], object] | None = None, synchronize=None) -> str | None:
    """None when CUPTI works here (it imports and records a probe kernel), else the reason.

    launch: enqueues a small kernel (default: a fill of a 4 KiB CUDA tensor). synchronize: waits
    for it (default torch.cuda.synchronize).
    """
    try:
        cupti = import_cupti()
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken binary wheel
        return f"cupti-python not importable ({type(exc).__name__}: {exc})"
    if launch is None or synchronize is None:
        import torch

        probe = torch.empty(1024, dtype=torch.float32, device="cuda")
        launch = launch or (lambda: probe.fill_(1.0))
        synchronize = synchronize or torch.cuda.synchronize
    tracer = CuptiTracer(cupti)
    try:
        tracer.start()
        try:
            t0 = cupti.get_timestamp()
            launch()
            t1 = cupti.get_timestamp()
            synchronize()
            api, gpu = tracer.collect()
        finally:
            tracer.stop()
        iteration_spans_us([(t0, t1)], api, gpu)
    except Exception as exc:  # noqa: BLE001
        return f"CUPTI recorded no probe kernel ({type(exc).__name__}: {exc})"
    return None

"""The `triton` backend: runs a Plan with the Triton kernels of kernels/decode.py on a CUDA GPU.

Per batch (kv_lens, shape, seed) it builds the paged cache, the queries and the float64 reference
once, and reuses them for every plan of that batch; only one batch is held at a time (a batch of
262,144 tokens is about 1 GB of cache). The cache follows the batch's shape: e4m3 pages with
per-tensor scales for kv_dtype "fp8_e4m3" (kernels/paged.py), whose reference is computed on the
dequantised values; the error bound is that of the query type. Per plan it puts the work list on the device once
(`prepare_decode`), so a timed iteration is only the kernel launches.

verify: output poisoned with NaN, one decode, error ||out - ref|| / ||ref|| against the float64
reference; NaN (an unwritten or broken output) fails. Bounds: 2e-2 for bf16/fp16, 1e-5 for
float32 inputs. measure: verifies first (a wrong output is never timed), then times one decode
(stage 1 + merge) with the shared timers of harness/timing.py (`measure_callable`: events, CUPTI
or CUDA graph, cold L2, nvbench's stopping rule), or with a caller's callable timer. `_time` is
the one place a timer is called.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from kvtune.harness.backends import BackendUnavailable, Measurement, Verification
from kvtune.kernels.plan import DeviceSpec, Plan, check_launch_order
from kvtune.workloads.batch import DecodeBatch

ERROR_BOUNDS = {"bfloat16": 2e-2, "float16": 2e-2, "float32": 1e-5}
NOISE_TARGET = 0.005  # relative standard error of the mean that counts as "noise met"
MAX_CACHED_PLANS = 8  # prepared launches (and verifications) kept per batch
# Cached batches may hold this share of the GPU's memory, counted as what PyTorch's caching
# allocator has reserved (not only the tensors' bytes): the timer's L2 flush, graph copies, the
# plans' scratch and, with --workers, other processes on the same GPU need the rest.
CACHE_SHARE = 4
MEMORY_MARGIN_BYTES = 256 << 20  # launch scratch, the allocator's rounding, cuBLAS workspace
NO_GPU_MESSAGE = "backend triton: no CUDA GPU (torch.cuda.is_available() is False)"


class WallClockTimer:
    """Host clock around each run: for the CPU interpreter path only, where there is no GPU.

    A callable timer takes `run` (one decode) and returns per-run times in microseconds.
    """

    name = "wall-clock"
    cold_l2 = False

    def __init__(self, reps: int = 3, warmup: int = 0) -> None:
        self.reps, self.warmup = int(reps), int(warmup)

    def __call__(self, run: Callable[[], object]) -> list[float]:
        for _ in range(self.warmup):
            run()
        samples = []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            run()
            samples.append((time.perf_counter() - t0) * 1e6)
        return samples


class TritonBackend:
    """Backend "triton": the project's Triton split-KV kernels, run exactly as the plan says.

    device: the DeviceSpec policies plan for (default: the live GPU, `harness.device.live_device`).
    timer: a name of harness.timing.TIMERS ("auto", "cupti", "events", "graph"; default "auto"),
        or a callable `timer(run) -> per-run times in us` with optional attributes `name` and
        `cold_l2` (tests; the CPU path defaults to WallClockTimer).
    cold_l2: flush L2 before each timed run (rotate input copies under "graph"), or time hot.
    stopping: a harness.stopping.StoppingRule (default: nvbench's rule).
    torch_device: "cuda" (default). "cpu" runs the kernels in Triton's interpreter, which only
        tests use; it needs TRITON_INTERPRET=1 (set automatically where there is no GPU).
    config: a kernels.decode.KernelConfig overriding the tuned per-shape configuration.
    merge: stage 2 of split requests, one of kernels.decode.MERGES ("chunked", the default:
        kernels/merge_chunked.py; "blocks": kernels/merge.py; "tail": kernels/merge_tail.py,
        which merges in stage 1's tail, measured slower on an H100).
    merge_pdl: launch the chunked merge as stage 1's programmatic dependent
        (kernels.decode.prepare_decode's merge_pdl; on by default, where the GPU has it).
    launch_order: stage 1's launch order, one of kernels.plan.LAUNCH_ORDERS ("plan";
        "longest-first": a static plan's items longest first, KV heads inner, the same bits;
        refused by prepare_decode for persistent plans), or None (the default): the product's,
        kernels.plan.product_launch_order. Rows record the order that ran ("launch_order").
    Raises BackendUnavailable (one line) when torch_device is "cuda" and there is no CUDA GPU,
    ValueError for an unknown timer name.
    """

    name = "triton"

    def __init__(self, device: DeviceSpec | None = None, timer=None, *, cold_l2: bool = True,
                 stopping=None, torch_device: str = "cuda", config=None,
                 merge: str = "chunked", merge_pdl: bool = True,
                 launch_order: str | None = None) -> None:
        import torch

        from kvtune.harness.timing import TIMERS

        if isinstance(timer, str) and timer not in TIMERS:
            raise ValueError(f"timer: {timer!r} unknown; allowed: {', '.join(TIMERS)}")
        if torch_device not in ("cuda", "cpu"):
            raise ValueError(f"torch_device: {torch_device!r} not allowed; allowed: cuda, cpu")
        if torch_device == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailable(NO_GPU_MESSAGE)
        from kvtune.kernels import decode as decode_module

        if torch_device == "cpu" and not decode_module.INTERPRETED:
            raise ValueError("torch_device: 'cpu' needs Triton's interpreter (TRITON_INTERPRET=1 "
                             "before kernels.decode is imported)")
        if merge not in decode_module.MERGES:
            raise ValueError(f"merge: {merge!r} not allowed; allowed: "
                             f"{', '.join(decode_module.MERGES)}")
        if launch_order is not None:
            check_launch_order(launch_order)
        self._decode = decode_module
        self.launch_order = launch_order
        self.merge = merge
        self.merge_pdl = bool(merge_pdl)
        self.torch_device = torch_device
        if device is None:
            device = _default_device(torch_device)
        self.device = device
        if timer is None:
            timer = "auto" if torch_device == "cuda" else WallClockTimer()
        if isinstance(timer, str) and torch_device == "cpu":
            raise ValueError(f"timer: {timer!r} needs a CUDA GPU; the cpu path takes a callable")
        self.timer = timer
        self.timer_name = timer if isinstance(timer, str) else getattr(timer, "name", "custom")
        self.cold_l2 = bool(cold_l2)
        self.stopping = stopping
        self.config = config
        # Recently used batches stay on the device (a study measures the same cases every trial);
        # oldest first out once their bytes pass the budget.
        self._batches: OrderedDict[tuple, _BatchInputs] = OrderedDict()
        # Keyed by id(plan); each entry keeps its plan alive, so an id is never reused while cached.
        self._launches: OrderedDict[int, object] = OrderedDict()
        self._verified: OrderedDict[int, tuple[Plan, Verification]] = OrderedDict()

    def unsupported_reason(self, plan: Plan) -> str | None:
        return None

    def verify(self, batch: DecodeBatch, plan: Plan) -> Verification:
        if _is_hybrid(plan):
            from kvtune.harness.backends import triton_hybrid

            return triton_hybrid.verify(self, batch, plan)

        inputs = self._batch_inputs(batch)
        launch = self._launch(plan, inputs)
        return self.check_output(
            plan, inputs, lambda out: self._decode.run_decode(launch, inputs.q, inputs.cache, out=out),
            "decode")

    def check_output(self, plan, inputs, run, label: str) -> Verification:
        """Run `run(out)` once into a NaN-filled output like inputs.q and judge it against
        inputs.ref (float64 reference) within the dtype's bound; a kernel error is a failed
        verification. The result is remembered for `plan` (measure times only verified plans)."""
        import torch

        from kvtune.kernels.reference import judge_output

        bound = ERROR_BOUNDS[str(inputs.q.dtype).removeprefix("torch.")]
        out = torch.full_like(inputs.q, float("nan"))
        try:
            run(out)
            if self.torch_device == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a kernel error is a failed verification
            result = Verification(ok=False, checked=True, bound=bound,
                                  message=f"{label} raised {type(exc).__name__}: {exc}")
        else:
            ok, err, msg = judge_output(out, inputs.ref, bound)
            result = Verification(ok=ok, checked=True, rel_error=err, bound=bound, message=msg)
        self._remember(self._verified, plan, (plan, result))
        return result

    def measure(self, batch: DecodeBatch, plan: Plan) -> Measurement:
        if _is_hybrid(plan):
            from kvtune.harness.backends import triton_hybrid

            return triton_hybrid.measure(self, batch, plan)
        inputs = self._batch_inputs(batch)
        seen = self._verified.get(id(plan))
        check = seen[1] if seen is not None and seen[0] is plan else self.verify(batch, plan)
        if not check.ok:
            return Measurement(status="failed", checked=True, rel_error=check.rel_error,
                               message=f"verification failed: {check.message}")
        launch = self._launch(plan, inputs)
        # A side split's second configuration is part of what launched (fidelity's launch key).
        side = f"+{launch.side.config}" if launch.side is not None else ""
        extra = {"kernel_launches": launch.num_launches,
                 "kernel_config": str(launch.config) + side,
                 "kernel_config_label": launch.config_label,
                 "launch_order": launch.launch_order}
        if not isinstance(self.timer, str):
            out = inputs.q.new_empty(inputs.q.shape)
            samples = self._time(lambda: self._decode.run_decode(launch, inputs.q, inputs.cache,
                                                                 out=out))
            return _measurement(np.asarray(samples, dtype=np.float64), batch.min_bytes, check,
                                self.timer, extra)
        copies = self._input_copies(batch, inputs)

        def run(copy=None):
            cache, q, out = copy if copy is not None else copies[0]
            self._decode.run_decode(launch, q, cache, out=out)

        result = self._time(run, copies if len(copies) > 1 else None)
        fields = result.measurement_fields()
        fields["extra"].update(extra)
        median = result.median_us
        return Measurement(status="ok", bytes_moved=int(batch.min_bytes),
                           achieved_bytes_per_s=batch.min_bytes / (median * 1e-6), checked=True,
                           rel_error=check.rel_error, message=check.message, **fields)

    def close(self) -> None:
        self._drop_batch()

    def release_memory(self) -> None:
        """Free every cached batch and give the allocator's cache back to the GPU (before worker
        processes start on the same GPU)."""
        self._drop_batch()

    def check_fits(self, batch: DecodeBatch, label: str = "batch") -> None:
        """ValueError, one line naming `label`, when `batch` cannot fit in the GPU memory this
        process could use (free memory, plus what it would give back); nothing on the CPU."""
        if self.torch_device != "cuda":
            return
        need = batch_need_bytes(batch)
        free = self._available_bytes()
        check_fit(label, need, free)

    # -- internals -------------------------------------------------------------------------

    def _time(self, run: Callable, inputs=None):
        """The one place a timer is called.

        A callable timer gets `run()` and returns per-run times in us; a named timer goes through
        harness.timing.measure_callable and returns its TimingResult.
        """
        if not isinstance(self.timer, str):
            return self.timer(run)
        from kvtune.harness.timing import measure_callable

        return measure_callable(run, inputs=inputs, timer=self.timer, cold_l2=self.cold_l2,
                                stopping=self.stopping, l2_bytes=self.device.l2_bytes or None)

    def _input_copies(self, batch: DecodeBatch, inputs: _BatchInputs) -> list[tuple]:
        """(cache, q, out) sets to time on: one, or under a cold "graph" timer enough distinct
        copies of the cache and queries that the graph's rotation keeps L2 cold."""
        import dataclasses

        from kvtune.harness.l2_cache import copies_needed

        if inputs.copies is None:
            inputs.copies = [(inputs.cache, inputs.q, inputs.q.new_empty(inputs.q.shape))]
        wanted = 1
        if self.timer == "graph" and self.cold_l2 and self.device.l2_bytes > 0:
            wanted = copies_needed(self.device.l2_bytes, batch.min_bytes)
        while len(inputs.copies) < wanted:
            c = inputs.cache
            cache = dataclasses.replace(c, k_pages=c.k_pages.clone(), v_pages=c.v_pages.clone())
            q = inputs.q.clone()
            inputs.copies.append((cache, q, q.new_empty(q.shape)))
        return inputs.copies[:wanted]

    def _batch_inputs(self, batch: DecodeBatch) -> _BatchInputs:
        key = _batch_key(batch)
        cached = self._batches.get(key)
        if cached is not None:
            self._batches.move_to_end(key)
            return cached
        need = batch_need_bytes(batch)
        self._make_room(batch_held_bytes(batch))
        if self.torch_device == "cuda":
            check_fit(_batch_label(batch), need, self._available_bytes())
        from kvtune.kernels.paged import PagedKVCache, make_queries
        from kvtune.kernels.reference import decode_reference

        cache = PagedKVCache.from_lengths(batch.kv_lens, batch.shape, device=self.torch_device,
                                          seed=batch.seed)
        q = make_queries(batch.batch_size, batch.shape, device=self.torch_device, seed=batch.seed)
        ref = decode_reference(q, cache)
        inputs = _BatchInputs(key=key, cache=cache, q=q, ref=ref)
        self._batches[key] = inputs
        return inputs

    def _make_room(self, nbytes: int) -> None:
        """Evict cached batches, oldest first, until one of `nbytes` more fits the cache budget
        (decode and hybrid batches alike). A prepared launch holds its batch's tensors (a hybrid
        launch the decodes' view of the cache's pages), so the launches and verifications go
        with them: kept, they held every evicted batch of a hybrid tune's validation alive and
        ran an H100 out of memory (docs/PERFORMANCE.md, thirteenth session, call 4)."""
        budget = self._cache_budget_bytes()
        while self._batches and self._used_bytes() + nbytes > budget:
            self._batches.popitem(last=False)  # free before allocating the next
            self._launches.clear()
            self._verified.clear()
            self._empty_cache()

    def _cache_budget_bytes(self) -> int:
        """Device bytes the cached batches may hold: a CACHE_SHARE-th of the GPU's memory (the
        timer's L2 flush, graph copies and the plans' scratch need the rest); one batch on the
        CPU."""
        if self.torch_device != "cuda":
            return 0
        import torch

        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory // CACHE_SHARE

    def _used_bytes(self) -> int:
        """What the cached batches cost: their tensors' bytes, or on a GPU what the caching
        allocator has reserved if that is more (freed blocks it keeps count too)."""
        held = sum(b.nbytes for b in self._batches.values())
        if self.torch_device != "cuda":
            return held
        import torch

        return max(held, int(torch.cuda.memory_reserved()))

    def _available_bytes(self) -> int:
        """GPU bytes a new batch could get: free on the device (other processes counted), plus
        what this process's allocator holds unused, plus the cached batches it would drop."""
        import torch

        free, _total = torch.cuda.mem_get_info()
        unused = int(torch.cuda.memory_reserved()) - int(torch.cuda.memory_allocated())
        return int(free) + max(0, unused) + sum(b.nbytes for b in self._batches.values())

    def _empty_cache(self) -> None:
        if self.torch_device == "cuda":
            import torch

            torch.cuda.empty_cache()

    def _launch(self, plan: Plan, inputs: _BatchInputs):
        launch = self._launches.get(id(plan))
        if launch is None or launch.plan is not plan:
            launch = self._decode.prepare_decode(plan, inputs.cache, config=self.config,
                                                 merge=self.merge, merge_pdl=self.merge_pdl,
                                                 launch_order=self.launch_order)
            self._remember(self._launches, plan, launch)
        return launch

    @staticmethod
    def _remember(table: OrderedDict, plan: Plan, value) -> None:
        """Keep the last MAX_CACHED_PLANS entries (each launch holds its scratch buffers)."""
        table[id(plan)] = value
        table.move_to_end(id(plan))
        while len(table) > MAX_CACHED_PLANS:
            table.popitem(last=False)

    def _drop_batch(self) -> None:
        self._batches.clear()
        self._launches.clear()
        self._verified.clear()
        if self.torch_device == "cuda":
            import torch

            torch.cuda.empty_cache()


class _BatchInputs:
    """The device tensors of one batch: cache, queries and the float64 reference output."""

    def __init__(self, key, cache, q, ref) -> None:
        self.key, self.cache, self.q, self.ref = key, cache, q, ref
        self.copies: list[tuple] | None = None  # (cache, q, out) sets the timer rotates over

    @property
    def nbytes(self) -> int:
        """Device bytes held: the pages, queries and reference, times the timing copies."""
        c = self.cache
        one = sum(t.numel() * t.element_size() for t in (c.k_pages, c.v_pages, self.q))
        return one * max(1, len(self.copies or ())) + self.ref.numel() * self.ref.element_size()


def batch_held_bytes(batch: DecodeBatch) -> int:
    """GPU bytes a cached batch keeps: its paged K/V cache (whole pages), queries, an output and
    the float64 reference (what the cache's cap counts for a batch about to be added)."""
    s = batch.shape
    lens = np.asarray(batch.kv_lens, dtype=np.int64)
    pages = int((-(-lens // s.page_size)).sum())
    cache = pages * s.page_size * s.num_kv_heads * s.kv_bytes_per_token_per_head
    return int(cache + 3 * batch.batch_size * s.num_qo_heads * s.head_dim * 8)


def batch_need_bytes(batch: DecodeBatch) -> int:
    """Peak GPU bytes one batch takes here: what it keeps (batch_held_bytes) plus, while the
    float64 reference is computed, its longest request's K and V in float64 and the scores;
    MEMORY_MARGIN_BYTES on top."""
    s = batch.shape
    lens = np.asarray(batch.kv_lens, dtype=np.int64)
    longest = int(lens.max()) if lens.size else 0
    reference = longest * s.num_kv_heads * s.head_dim * 8 * 2 + longest * s.num_qo_heads * 8 * 2
    return int(batch_held_bytes(batch) + reference + MEMORY_MARGIN_BYTES)


def check_fit(label: str, need_bytes: int, free_bytes: int) -> None:
    """ValueError, one line, when `need_bytes` exceeds `free_bytes`."""
    if need_bytes > free_bytes:
        raise ValueError(f"{label}: needs {need_bytes / 1e9:.1f} GB of GPU memory, "
                         f"{free_bytes / 1e9:.1f} GB free; allowed: a batch that fits (fewer or "
                         "shorter requests, or a GPU with more free memory)")


def _batch_label(batch: DecodeBatch) -> str:
    return (f"batch of {batch.batch_size} requests ({batch.total_tokens} tokens, "
            f"seed {batch.seed})")


def _is_hybrid(plan) -> bool:
    """A HybridPlan (kernels/hybrid_plan.py) goes to harness/backends/triton_hybrid.py."""
    from kvtune.kernels.hybrid_plan import HybridPlan

    return isinstance(plan, HybridPlan)


def _batch_key(batch: DecodeBatch) -> tuple:
    """Identity of a batch's tensors: same lengths, shape and seed give the same data."""
    return (batch.seed, batch.shape, batch.kv_lens.tobytes())


def _measurement(samples: np.ndarray, bytes_moved: int, check: Verification, timer,
                 extra: dict) -> Measurement:
    """A Measurement from a callable timer's raw per-run samples (us)."""
    if samples.size == 0 or not np.all(np.isfinite(samples)) or (samples <= 0).any():
        return Measurement(status="failed", checked=True, rel_error=check.rel_error,
                           message="timer returned no valid samples")
    median = float(np.median(samples))
    mean = float(samples.mean())
    std = float(samples.std(ddof=1)) if samples.size > 1 else 0.0
    p10, p90 = (float(x) for x in np.percentile(samples, [10, 90]))
    noise = std / math.sqrt(samples.size) / mean if samples.size > 1 else float("inf")
    return Measurement(
        status="ok",
        latency_us=median,
        p10_us=p10,
        p90_us=p90,
        mean_us=mean,
        std_us=std,
        samples=int(samples.size),
        rel_spread=(p90 - p10) / median,
        noise_met=bool(noise <= NOISE_TARGET),
        timer=getattr(timer, "name", type(timer).__name__),
        cold_l2=bool(getattr(timer, "cold_l2", False)),
        bytes_moved=int(bytes_moved),
        achieved_bytes_per_s=bytes_moved / (median * 1e-6),
        checked=True,
        rel_error=check.rel_error,
        message=check.message,
        extra=dict(extra),
    )


def _default_device(torch_device: str) -> DeviceSpec:
    if torch_device == "cuda":
        from kvtune.harness.device import live_device

        return live_device()
    return DeviceSpec(name="triton-interpreter (cpu)", sm_count=4, l2_bytes=0,
                      hbm_bytes_per_s=1e9, live=False)


# Read by harness/backends/triton_hybrid.py, which must not import this module (no cycle).
TritonBackend.batch_inputs_type = _BatchInputs
TritonBackend.samples_measurement = staticmethod(_measurement)

BACKEND = TritonBackend

__all__ = ["BACKEND", "ERROR_BOUNDS", "NO_GPU_MESSAGE", "TritonBackend", "WallClockTimer",
           "batch_held_bytes", "batch_need_bytes", "check_fit"]

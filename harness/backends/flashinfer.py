"""The `flashinfer` backend: runs a Plan with FlashInfer's batch decode on a CUDA GPU.

FlashInfer (flashinfer-python 0.5.x, the optional extra `kvtune[flashinfer]`) is the decode
kernel many serving stacks already run; this backend shows, on that kernel, what a split costs.
It reads the same pages as the `triton` backend: the batch's `kernels.paged.PagedKVCache`
(NHD layout, filled once from the batch seed) is handed to `BatchDecodeWithPagedKVCacheWrapper`
as it is, with its page table as kv_indptr / kv_indices / kv_last_page_len. An fp8 cache
(shape.kv_dtype "fp8_e4m3") runs FlashInfer's fp8 decode: plan() with
kv_data_type=torch.float8_e4m3fn, run() with the cache's per-tensor k_scale / v_scale.

How a plan becomes a FlashInfer call (harness/backends/flashinfer_plan.py holds the rules):
  - a plan identical to kvtune's model of a FlashInfer planner (policies flashinfer-tensor-core
    and flashinfer-cuda-core with default parameters) runs that planner, nothing passed, on its
    own path (use_tensor_cores True or False);
  - any other plan with one chunk size for the whole batch runs on the tensor-core path with
    fixed_split_size (pages), or disable_split_kv when nothing is split;
  - anything else (per-request chunk sizes, persistent or heaviest-first schedules) is
    unsupported, with a one-line reason; nothing is approximated.
After each plan() the backend reads back FlashInfer's decision (split on or off, chunk, pieces)
and records it; under a fixed split a decision that differs from the plan fails verification.
The float workspace is sized from the plan (FlashInfer fails when it is too small) and reported.

Every row carries in `extra`: fi_path (tensor-core | cuda-core), fi_planner (flashinfer |
fixed-split | no-split), fi_fixed_split_pages, fi_disable_split_kv, fi_workspace_bytes (float
workspace the plan needs), fi_workspace_allocated_bytes, fi_split_kv / fi_chunk_tokens /
fi_items (FlashInfer's decision), fi_plan_agrees, flashinfer_version.

verify: output poisoned with NaN, one run, ||out - ref|| / ||ref|| against the float64
reference (2e-2 for bf16 / fp16). measure: verifies first, then times one run with the shared
timers (harness.timing.measure_callable: cupti, events or graph, cold or hot L2, nvbench's
stopping rule, NVML telemetry).

Without flashinfer-python, importing this module raises BackendUnavailable with one line, so
`kvtune bench --backend flashinfer` exits 2 saying how to install it.
"""

from __future__ import annotations


import numpy as np

from kvtune.harness.backends import BackendUnavailable, Measurement, Verification
from kvtune.harness.backends import flashinfer_plan as fip
from kvtune.kernels.plan import DeviceSpec, Plan, SplitParams
from kvtune.workloads.batch import DecodeBatch

NOT_INSTALLED_MESSAGE = ("backend flashinfer: flashinfer-python is not installed; "
                         "pip install -e .[flashinfer] (needs a CUDA GPU)")
NO_GPU_MESSAGE = "backend flashinfer: no CUDA GPU (torch.cuda.is_available() is False)"

try:
    import flashinfer
except ImportError as _exc:
    raise BackendUnavailable(NOT_INSTALLED_MESSAGE) from _exc
except Exception as _exc:
    _first = (str(_exc).strip().splitlines() or [""])[0]
    raise BackendUnavailable(
        f"backend flashinfer: flashinfer-python failed to import ({type(_exc).__name__}: {_first})"
    ) from _exc

ERROR_BOUNDS = {"bfloat16": 2e-2, "float16": 2e-2}
KV_LAYOUT = "NHD"  # kernels.paged.PagedKVCache's page layout
MIN_WORKSPACE_BYTES = 1 << 20
WORKSPACE_GRANULE_BYTES = 1 << 20


class FlashInferBackend:
    """Backend "flashinfer" (see the module docstring).

    device: the DeviceSpec policies plan for (default: the live GPU). timer: "auto", "cupti",
    "events" or "graph" (harness.timing). cold_l2: flush L2 before every timed run (graph:
    rotate copies of the pages). stopping / warmup: harness.stopping rules (default nvbench's);
    both stay settable attributes. path: "auto", "tensor-core" or "cuda-core"
    (flashinfer_plan.choose_setting). telemetry: read NVML around each measurement.
    Raises BackendUnavailable (one line) without a CUDA GPU or when the timer cannot run.
    """

    name = "flashinfer"
    # The study hooks of studies/space.py and studies/rules.py: FlashInfer takes one chunk per
    # batch in request order, so a tuned table here is the fixed-chunk rule of its buckets.
    supported_schedules = fip.SUPPORTED_SCHEDULES
    split_rule = "fixed-chunk"

    def __init__(self, device: DeviceSpec | None = None, timer: str = "auto", cold_l2: bool = True,
                 *, stopping=None, warmup=None, path: str = "auto", telemetry: bool = True) -> None:
        import torch

        from kvtune.harness.stopping import StoppingRule, WarmupRule
        from kvtune.harness.timing import TimerUnavailable, resolve_timer

        fip.check_path(path)
        if not torch.cuda.is_available():
            raise BackendUnavailable(NO_GPU_MESSAGE)
        try:
            choice = resolve_timer(timer)
        except TimerUnavailable as exc:
            raise BackendUnavailable(f"backend flashinfer: {exc}") from exc
        if device is None:
            from kvtune.harness.device import live_device

            device = live_device()
        self.device = device
        self.timer = timer
        self.timer_name = choice.name
        self.cold_l2 = bool(cold_l2)
        self.stopping = stopping if stopping is not None else StoppingRule()
        self.warmup = warmup if warmup is not None else WarmupRule()
        self.path = path
        self.telemetry = bool(telemetry)
        self.fixed_split_params = fip.fixed_split_params(device)
        self.version = getattr(flashinfer, "__version__", "unknown")
        self._inputs: _BatchInputs | None = None
        self._workspace = None
        self._wrappers: dict[str, object] = {}
        self._planned: dict[str, tuple] = {}  # path -> (_PlanRun, workspace) its wrapper holds
        self._runs: dict[int, _PlanRun] = {}  # by id(plan); each entry keeps its plan alive

    # -- the Backend protocol --------------------------------------------------------------

    def unsupported_reason(self, plan: Plan) -> str | None:
        if _is_hybrid(plan):
            return None  # harness/backends/flashinfer_hybrid.py runs it (pod or serial)
        return fip.unsupported_reason(plan, self.path)

    def split_policy(self, params: SplitParams):
        """The plan rule a tuning study must use on this backend for `params` (study hook):
        one chunk of params.min_tokens_per_cta tokens for the whole batch."""
        return fip.chunk_policy(params)

    def verify(self, batch: DecodeBatch, plan: Plan) -> Verification:
        import torch

        if _is_hybrid(plan):
            from kvtune.harness.backends import flashinfer_hybrid

            return flashinfer_hybrid.verify(self, batch, plan)

        from kvtune.kernels.reference import judge_output

        inputs = self._batch_inputs(batch)
        bound = ERROR_BOUNDS.get(str(inputs.q.dtype).removeprefix("torch."), 2e-2)
        try:
            run = self._prepare(batch, plan, inputs)
        except fip.NotExpressible as exc:
            result = Verification(ok=False, checked=False, bound=bound, message=str(exc))
            self._runs.pop(id(plan), None)
            return result
        if run.disagreement and run.setting.planner != "flashinfer":
            # The call was meant to reproduce the plan exactly; it did not, so the row would lie.
            return self._remember(run, Verification(
                ok=False, checked=False, bound=bound,
                message=f"FlashInfer did not run the plan: {run.disagreement}"))
        out = torch.full_like(inputs.q, float("nan"))
        try:
            wrapper = self._wrapper(run.setting.path)
            wrapper.run(inputs.q, (inputs.cache.k_pages, inputs.cache.v_pages), out=out,
                        **kv_scales(inputs.cache))
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a kernel error is a failed verification
            first = (str(exc).strip().splitlines() or [""])[0]
            return self._remember(run, Verification(
                ok=False, checked=True, bound=bound,
                message=f"flashinfer run raised {type(exc).__name__}: {first}"))
        ok, err, msg = judge_output(out, inputs.ref, bound)
        if run.disagreement:
            msg += f"; {run.disagreement}"
        return self._remember(run, Verification(ok=ok, checked=True, rel_error=err, bound=bound,
                                                message=msg))

    def measure(self, batch: DecodeBatch, plan: Plan) -> Measurement:
        from kvtune.harness.timing import measure_callable

        if _is_hybrid(plan):
            from kvtune.harness.backends import flashinfer_hybrid

            return flashinfer_hybrid.measure(self, batch, plan)

        run = self._runs.get(id(plan))
        if (run is None or run.plan is not plan or run.batch_key != _batch_key(batch)
                or run.verification is None):
            check = self.verify(batch, plan)  # a wrong output is never timed
            run = self._runs.get(id(plan))
        else:
            check = run.verification
        if not check.ok or run is None:
            return Measurement(status="failed", checked=check.checked, rel_error=check.rel_error,
                               message=f"verification failed: {check.message}",
                               extra=run.extra() if run is not None else {})
        inputs = self._batch_inputs(batch)
        wrapper = self._plan_wrapper(run, inputs)  # it may hold another plan since verify
        timer_inputs = self._timer_inputs(inputs) if self.timer_name == "graph" else None

        scales = kv_scales(inputs.cache)
        if timer_inputs is None:
            out = inputs.q.new_empty(inputs.q.shape)

            def launch():
                wrapper.run(inputs.q, (inputs.cache.k_pages, inputs.cache.v_pages), out=out,
                            **scales)
        else:
            def launch(copy):
                wrapper.run(copy["q"], (copy["k"], copy["v"]), out=copy["out"], **scales)

        result = measure_callable(launch, inputs=timer_inputs, timer=self.timer,
                                  cold_l2=self.cold_l2, stopping=self.stopping,
                                  warmup=self.warmup, l2_bytes=self.device.l2_bytes or None,
                                  telemetry=self.telemetry)
        fields = result.measurement_fields()
        extra = {**fields.pop("extra"), **run.extra()}
        bytes_moved = batch.min_bytes
        return Measurement(status="ok", bytes_moved=bytes_moved,
                           achieved_bytes_per_s=bytes_moved / (result.median_us * 1e-6),
                           checked=True, rel_error=check.rel_error, message=check.message,
                           extra=extra, **fields)

    def close(self) -> None:
        self._drop_batch()
        self._wrappers.clear()
        self._workspace = None
        import torch

        torch.cuda.empty_cache()

    # -- internals -------------------------------------------------------------------------

    def _remember(self, run: _PlanRun, verification: Verification) -> Verification:
        run.verification = verification
        return verification

    def _prepare(self, batch: DecodeBatch, plan: Plan, inputs: _BatchInputs) -> _PlanRun:
        """The setting, workspace and planned wrapper of `plan` (raises NotExpressible)."""
        key = _batch_key(batch)
        run = self._runs.get(id(plan))
        if run is not None and run.plan is plan and run.batch_key == key:
            self._plan_wrapper(run, inputs)
            return run
        setting = fip.choose_setting(plan, batch.shape, self.device, self.path)
        need, allocate = fip.workspace_bytes(setting, batch.shape, self.device)
        run = _PlanRun(plan=plan, batch_key=key, setting=setting, workspace_bytes=need)
        self._ensure_workspace(allocate)
        run.workspace_allocated_bytes = int(self._workspace.numel())
        self._runs[id(plan)] = run
        while len(self._runs) > 16:  # keep recent plans only; each holds its plan alive
            self._runs.pop(next(iter(self._runs)))
        self._plan_wrapper(run, inputs)
        return run

    def _ensure_workspace(self, nbytes: int) -> None:
        import torch

        granules = -(-int(nbytes) // WORKSPACE_GRANULE_BYTES)
        want = max(MIN_WORKSPACE_BYTES, granules * WORKSPACE_GRANULE_BYTES)
        if self._workspace is not None and self._workspace.numel() >= want:
            return
        # Wrappers keep a reference to the old buffer: drop them so the memory is returned.
        self._wrappers.clear()
        self._planned.clear()
        self._workspace = None
        torch.cuda.empty_cache()
        # FlashInfer asks for a zeroed float workspace on first use.
        self._workspace = torch.zeros(want, dtype=torch.uint8, device="cuda")

    def _wrapper(self, path: str):
        wrapper = self._wrappers.get(path)
        if wrapper is None:
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                self._workspace, KV_LAYOUT, use_tensor_cores=(path == "tensor-core"))
            self._wrappers[path] = wrapper
        return wrapper

    def _plan_wrapper(self, run: _PlanRun, inputs: _BatchInputs):
        """The path's wrapper, planned for `run` (plan() only when it holds something else)."""
        setting = run.setting
        wrapper = self._wrapper(setting.path)
        held = self._planned.get(setting.path)
        if held is not None and held[0] is run and held[1] is self._workspace:
            return wrapper
        shape = inputs.cache.shape
        dtype = inputs.q.dtype
        wrapper.plan(inputs.kv_indptr, inputs.kv_indices, inputs.kv_last_page_len,
                     shape.num_qo_heads, shape.num_kv_heads, shape.head_dim, shape.page_size,
                     q_data_type=dtype, kv_data_type=inputs.cache.kv_dtype,
                     **setting.plan_kwargs())
        self._planned[setting.path] = (run, self._workspace)
        run.decision, run.readback_error = _read_decision(wrapper, setting.path)
        run.disagreement = (fip.disagreement(setting, run.decision, shape.page_size)
                            if run.decision is not None else None)
        return wrapper

    def _batch_inputs(self, batch: DecodeBatch) -> _BatchInputs:
        key = _batch_key(batch)
        if self._inputs is not None and self._inputs.key == key:
            return self._inputs
        self._drop_batch()  # free the previous batch (up to tens of GB) before the next
        from kvtune.kernels.paged import PagedKVCache, make_queries
        from kvtune.kernels.reference import decode_reference

        cache = PagedKVCache.from_lengths(batch.kv_lens, batch.shape, device="cuda",
                                          seed=batch.seed)
        q = make_queries(batch.batch_size, batch.shape, device="cuda", seed=batch.seed)
        ref = decode_reference(q, cache)
        indptr, indices, last = fip.flashinfer_page_table(cache)
        self._inputs = _BatchInputs(key, cache, q, ref, indptr, indices, last)
        return self._inputs

    def _timer_inputs(self, inputs: _BatchInputs) -> list[dict]:
        """Input copies for the graph timer: with cold L2, clones of the same pages (identical
        data, no new random fill) until together they exceed 3 x L2; hot, the one set."""
        from kvtune.harness.l2_cache import copies_needed, tensor_bytes

        first = {"q": inputs.q, "k": inputs.cache.k_pages, "v": inputs.cache.v_pages,
                 "out": inputs.q.new_empty(inputs.q.shape)}
        if not self.cold_l2:
            return [first]
        if inputs.copies is None:
            n = copies_needed(self.device.l2_bytes, tensor_bytes(first), cold_l2=True)
            clones = [{k: t.clone() for k, t in first.items()} for _ in range(n - 1)]
            inputs.copies = [first] + clones
        return inputs.copies

    def _drop_batch(self) -> None:
        self._inputs = None
        self._runs.clear()
        self._planned.clear()


def _is_hybrid(plan) -> bool:
    from kvtune.kernels.hybrid_plan import HybridPlan

    return isinstance(plan, HybridPlan)


class _BatchInputs:
    """One batch on the GPU: cache, queries, float64 reference, FlashInfer's page table."""

    def __init__(self, key, cache, q, ref, kv_indptr, kv_indices, kv_last_page_len) -> None:
        self.key, self.cache, self.q, self.ref = key, cache, q, ref
        self.kv_indptr, self.kv_indices = kv_indptr, kv_indices
        self.kv_last_page_len = kv_last_page_len
        self.copies: list[dict] | None = None


class _PlanRun:
    """One plan as FlashInfer runs it: setting, workspace, decision read back, verification."""

    def __init__(self, plan: Plan, batch_key: tuple, setting: fip.FlashInferSetting,
                 workspace_bytes: int) -> None:
        self.plan, self.batch_key, self.setting = plan, batch_key, setting
        self.workspace_bytes = int(workspace_bytes)
        self.workspace_allocated_bytes = 0
        self.decision: fip.FlashInferDecision | None = None
        self.readback_error: str | None = None
        self.disagreement: str | None = None
        self.verification: Verification | None = None

    def extra(self) -> dict:
        d = self.decision
        return {
            **self.setting.to_extra(),
            "fi_workspace_bytes": self.workspace_bytes,
            "fi_workspace_allocated_bytes": self.workspace_allocated_bytes,
            "fi_split_kv": d.split_kv if d else None,
            "fi_chunk_tokens": d.chunk_tokens if d else None,
            "fi_items": d.items if d else None,
            "fi_plan_agrees": (self.disagreement is None) if d else None,
            "fi_readback": self.readback_error or ("ok" if d else "none"),
            "flashinfer_version": getattr(flashinfer, "__version__", "unknown"),
        }


def kv_scales(cache) -> dict:
    """run() keyword arguments for the cache's scales: k_scale / v_scale of an fp8 cache, none
    for a 16-bit one (FlashInfer folds k_scale into sm_scale and multiplies the output by
    v_scale)."""
    if not cache.is_fp8:
        return {}
    return {"k_scale": float(cache.k_scale), "v_scale": float(cache.v_scale)}


def _read_decision(wrapper, path: str):
    """(FlashInferDecision, None) from the wrapper after plan(), or (None, why not)."""
    import torch

    try:
        info = list(wrapper._plan_info)
        offset = fip.chunk_size_offset(path, info)
        pinned = wrapper._pin_memory_int_workspace_buffer
        chunk = int(pinned[offset:offset + 4].view(torch.int32).item())
        return fip.decision_from_plan_info(path, info, chunk), None
    except Exception as exc:  # noqa: BLE001 - another FlashInfer version: record, do not fail
        return None, f"unavailable ({type(exc).__name__}: {exc})"


def _batch_key(batch: DecodeBatch) -> tuple:
    """Identity of a batch's tensors: same lengths, shape and seed give the same data."""
    return (batch.seed, batch.shape, np.asarray(batch.kv_lens).tobytes())


BACKEND = FlashInferBackend

__all__ = ["BACKEND", "NOT_INSTALLED_MESSAGE", "NO_GPU_MESSAGE", "FlashInferBackend"]

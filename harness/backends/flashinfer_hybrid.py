"""FlashInfer on hybrid batches (flashinfer 0.5.3), on the same pages as the Triton kernel.

Two ways to run one AttentionBatch:
- "serial": `BatchPrefillWithPagedKVCacheWrapper` (causal) over the requests with q_len > 1
  (prefill chunks and speculative decodes), then `BatchDecodeWithPagedKVCacheWrapper`
  (tensor cores) over the q_len-1 decodes, each with FlashInfer's own planner.
- "pod": `BatchPODWithPagedKVCacheWrapper`: its prefill part (causal_p=True) takes the requests
  with q_len > 1, its decode part the q_len-1 decodes. FlashInfer plans the decode part as a
  non-causal prefill, so speculative decodes (q_len 2..16) must go to the prefill part. POD needs
  both parts non-empty, so a batch with only one kind runs "serial" under an sm-aware plan too,
  which is then that kind's one wrapper (what POD would run with an empty part); the row's
  `flashinfer_mode` says which ran.

`FlashInferHybrid(cache, q, q_lens, mode)` plans once; `run()` launches only the kernels (what a
timer wraps); `output()` scatters both parts back into batch order (for the correctness check).
FlashInferBackend hands a HybridPlan here: sm-aware plans run "pod", the others "serial" (the
plan's own cut is not expressible in FlashInfer's API; the row's notes say so).
"""

from __future__ import annotations

import math

import numpy as np

MODES = ("serial", "pod")
WORKSPACE_BYTES = 256 << 20


class HybridUnsupported(ValueError):
    """The batch cannot run in this mode (one line)."""


class FlashInferHybrid:
    def __init__(self, cache, q, q_lens, mode: str = "serial") -> None:
        import flashinfer
        import torch

        if mode not in MODES:
            raise ValueError(f"mode: {mode!r} not allowed; allowed: {', '.join(MODES)}")
        q_lens = np.asarray(q_lens, dtype=np.int64)
        self.mode, self.cache, self.q_lens = mode, cache, q_lens
        shape = cache.shape
        dev = q.device
        starts = np.concatenate(([0], np.cumsum(q_lens)[:-1]))
        self.pre = np.flatnonzero(q_lens > 1)
        self.dec = np.flatnonzero(q_lens == 1)
        if mode == "pod" and (self.pre.size == 0 or self.dec.size == 0):
            raise HybridUnsupported("flashinfer pod: needs both prefill (q_len > 1) and q_len-1 "
                                    "decode requests in the batch")
        pairs = zip(starts[self.pre], q_lens[self.pre], strict=True)
        rows_p = np.concatenate([np.arange(s, s + n) for s, n in pairs]) if self.pre.size \
            else np.zeros(0, np.int64)
        rows_d = starts[self.dec]
        self.rows_p = torch.from_numpy(rows_p).to(dev)
        self.rows_d = torch.from_numpy(rows_d).to(dev)
        self.q_p = q.index_select(0, self.rows_p).contiguous()
        self.q_d = q.index_select(0, self.rows_d).contiguous()
        self.out_p = torch.empty_like(self.q_p)
        self.out_d = torch.empty_like(self.q_d)
        indptr = cache.page_indptr.cpu().numpy().astype(np.int64)
        indices = cache.page_indices
        last = cache.last_page_lens.astype(np.int32)

        def table(reqs):
            counts = indptr[reqs + 1] - indptr[reqs]
            sub_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
            idx = np.concatenate([np.arange(indptr[b], indptr[b + 1]) for b in reqs]) \
                if reqs.size else np.zeros(0, np.int64)
            sub_idx = indices.index_select(0, torch.from_numpy(idx).to(dev)).to(torch.int32)
            return (torch.from_numpy(sub_ptr).to(dev), sub_idx,
                    torch.from_numpy(last[reqs]).to(dev))

        qo_p = torch.from_numpy(np.concatenate(([0], np.cumsum(q_lens[self.pre])))
                                .astype(np.int32)).to(dev)
        qo_d = torch.arange(self.dec.size + 1, dtype=torch.int32, device=dev)
        tp, td = table(self.pre), table(self.dec)
        self.kv = (cache.k_pages, cache.v_pages)
        common = dict(num_qo_heads=shape.num_qo_heads, num_kv_heads=shape.num_kv_heads)
        dtype, kv_dtype = q.dtype, cache.kv_dtype
        # fp8 pages: the serial wrappers take k_scale / v_scale in run(). POD's run() (0.5.3)
        # applies them to its decode part only, so for POD k_scale goes into the plan's
        # sm_scale (both parts use it) and v_scale multiplies both outputs after the launch.
        self.scales = {"k_scale": float(cache.k_scale), "v_scale": float(cache.v_scale)} \
            if cache.is_fp8 else {}
        pod_sm_scale = self.scales["k_scale"] / math.sqrt(shape.head_dim) if self.scales else None
        self._ws = []

        def workspace():
            self._ws.append(torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev))
            return self._ws[-1]

        if mode == "pod":
            self.pod = flashinfer.BatchPODWithPagedKVCacheWrapper(workspace(), "NHD")
            self.pod.plan(qo_p, *tp, qo_d, *td, head_dim=shape.head_dim,
                          page_size=shape.page_size, q_data_type=dtype, kv_data_type=kv_dtype,
                          sm_scale=pod_sm_scale, **common)
        else:
            self.prefill = self.decode = None
            if self.pre.size:
                self.prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace(), "NHD")
                self.prefill.plan(qo_p, *tp, head_dim_qk=shape.head_dim,
                                  page_size=shape.page_size, causal=True, q_data_type=dtype,
                                  kv_data_type=kv_dtype, **common)
            if self.dec.size:
                self.decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    workspace(), "NHD", use_tensor_cores=True)
                self.decode.plan(*td, head_dim=shape.head_dim, page_size=shape.page_size,
                                 q_data_type=dtype, kv_data_type=kv_dtype, **common)

    def run(self) -> None:
        """The kernels only (prefill then decode, or the one POD launch)."""
        if self.mode == "pod":
            self.out_p, self.out_d = self.pod.run(self.q_p, self.kv, self.q_d, self.kv,
                                                  causal_p=True)
            if self.scales:
                self.out_p.mul_(self.scales["v_scale"])
                self.out_d.mul_(self.scales["v_scale"])
            return
        if self.prefill is not None:
            self.prefill.run(self.q_p, self.kv, out=self.out_p, **self.scales)
        if self.decode is not None:
            self.decode.run(self.q_d, self.kv, out=self.out_d, **self.scales)

    def output(self, like):
        """Both parts in batch order, in a tensor like `like` ([sum(q_lens), H, D])."""
        import torch

        out = torch.full_like(like, float("nan"))
        out.index_copy_(0, self.rows_p, self.out_p)
        out.index_copy_(0, self.rows_d, self.out_d)
        return out


def as_attention_batch(batch):
    from kvtune.workloads.batch import AttentionBatch

    return batch if isinstance(batch, AttentionBatch) else AttentionBatch.decode(batch)


def mode_for(plan, q_lens=None) -> str:
    """FlashInfer's way of running a HybridPlan: sm-aware -> pod, anything else -> serial; and
    serial when `q_lens` (the batch's) holds only one kind (POD's wrapper needs both)."""
    if plan.schedule != "sm-aware":
        return "serial"
    if q_lens is not None:
        q_lens = np.asarray(q_lens)
        if not ((q_lens > 1).any() and (q_lens == 1).any()):
            return "serial"
    return "pod"


def verify(backend, batch, plan):
    import torch

    from kvtune.harness.backends import Verification
    from kvtune.kernels.reference import judge_output

    batch = as_attention_batch(batch)
    cache, q, ref = _inputs(backend, batch)
    bound = 2e-2
    try:
        runner = FlashInferHybrid(cache, q, batch.q_lens, mode_for(plan, batch.q_lens))
        runner.run()
        torch.cuda.synchronize()
    except HybridUnsupported as exc:
        return Verification(ok=False, checked=False, bound=bound, message=str(exc))
    except Exception as exc:  # noqa: BLE001 - a kernel error is a failed verification
        first = (str(exc).strip().splitlines() or [""])[0]
        return Verification(ok=False, checked=True, bound=bound,
                            message=f"flashinfer {mode_for(plan, batch.q_lens)} raised "
                                    f"{type(exc).__name__}: "
                                    f"{first}")
    ok, err, msg = judge_output(runner.output(q), ref, bound)
    backend._hybrid_runner = (plan, runner)
    return Verification(ok=ok, checked=True, rel_error=err, bound=bound, message=msg)


def measure(backend, batch, plan):
    from kvtune.harness.backends import Measurement
    from kvtune.harness.timing import measure_callable

    batch = as_attention_batch(batch)
    held = getattr(backend, "_hybrid_runner", None)
    check = None
    if held is None or held[0] is not plan:
        check = verify(backend, batch, plan)
        if not check.ok:
            return Measurement(status="failed", checked=check.checked, rel_error=check.rel_error,
                               message=f"verification failed: {check.message}")
    runner = backend._hybrid_runner[1]
    result = measure_callable(runner.run, timer=backend.timer, cold_l2=backend.cold_l2,
                              stopping=backend.stopping, warmup=backend.warmup,
                              l2_bytes=backend.device.l2_bytes or None,
                              telemetry=backend.telemetry)
    fields = result.measurement_fields()
    extra = {**fields.pop("extra"), "flashinfer_mode": runner.mode, "flops": batch.causal_flops}
    return Measurement(status="ok", bytes_moved=batch.min_bytes,
                       achieved_bytes_per_s=batch.min_bytes / (result.median_us * 1e-6),
                       checked=True, message=f"flashinfer {runner.mode}", extra=extra, **fields)


def _inputs(backend, batch):
    """(cache, q, float64 reference) of the batch on the GPU, one batch held at a time."""
    key = ("hybrid", batch.seed, batch.shape, batch.q_lens.tobytes(), batch.kv_lens.tobytes())
    held = getattr(backend, "_hybrid_inputs", None)
    if held is not None and held[0] == key:
        return held[1]
    backend._hybrid_inputs = None
    backend._hybrid_runner = None
    backend._drop_batch()
    from kvtune.kernels.hybrid import make_hybrid_queries
    from kvtune.kernels.paged import PagedKVCache
    from kvtune.kernels.reference import attention_reference

    cache = PagedKVCache.from_lengths(batch.kv_lens, batch.shape, device="cuda", seed=batch.seed)
    q = make_hybrid_queries(batch.q_lens, batch.shape, device="cuda", seed=batch.seed)
    ref = attention_reference(q, cache, batch.q_lens)
    backend._hybrid_inputs = (key, (cache, q, ref))
    return cache, q, ref


__all__ = ["MODES", "FlashInferHybrid", "HybridUnsupported", "measure", "mode_for", "verify"]

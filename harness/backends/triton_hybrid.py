"""The triton backend's hybrid path: runs a HybridPlan (kernels/hybrid.py) on an AttentionBatch.

TritonBackend.verify/measure dispatch here for a HybridPlan. Same rules as the decode path: the
batch's cache, queries (sum(q_lens) rows) and float64 causal reference are built once per batch;
the output is poisoned with NaN and checked against the reference before anything is timed; a
timed iteration is only the launches of `run_hybrid` (attention, and the merge when a request or
tile is split).
"""

from __future__ import annotations

import numpy as np

from kvtune.harness.backends import Measurement, Verification
from kvtune.kernels.hybrid_plan import HybridPlan
from kvtune.workloads.batch import AttentionBatch


def as_attention_batch(batch) -> AttentionBatch:
    """An AttentionBatch (a DecodeBatch becomes one with q_len 1 everywhere)."""
    return batch if isinstance(batch, AttentionBatch) else AttentionBatch.decode(batch)


def batch_inputs(backend, batch: AttentionBatch):
    """The backend's cached (cache, q, ref) of a hybrid batch, built on first use (in the
    backend's own batch cache, as its `_BatchInputs` type)."""
    _BatchInputs = backend.batch_inputs_type
    key = ("hybrid", batch.seed, batch.shape, batch.q_lens.tobytes(), batch.kv_lens.tobytes())
    cached = backend._batches.get(key)
    if cached is not None:
        backend._batches.move_to_end(key)
        return cached
    backend._make_room(batch.min_bytes)
    from kvtune.kernels.hybrid import make_hybrid_queries
    from kvtune.kernels.paged import PagedKVCache
    from kvtune.kernels.reference import attention_reference

    cache = PagedKVCache.from_lengths(batch.kv_lens, batch.shape, device=backend.torch_device,
                                      seed=batch.seed)
    q = make_hybrid_queries(batch.q_lens, batch.shape, device=backend.torch_device,
                            seed=batch.seed)
    ref = attention_reference(q, cache, batch.q_lens)
    inputs = _BatchInputs(key=key, cache=cache, q=q, ref=ref)
    backend._batches[key] = inputs
    return inputs


def _launch(backend, plan: HybridPlan, inputs):
    from kvtune.kernels.hybrid import prepare_hybrid

    launch = backend._launches.get(id(plan))
    if launch is None or launch.plan is not plan:
        # The decode part in the product's order unless the backend was given another
        # (kernels/hybrid.py decode_parts).
        launch = prepare_hybrid(plan, inputs.cache, plan.q_lens,
                                decode_launch_order=backend.launch_order)
        backend._remember(backend._launches, plan, launch)
    return launch


def verify(backend, batch, plan: HybridPlan) -> Verification:
    from kvtune.kernels.hybrid import run_hybrid

    batch = as_attention_batch(batch)
    _check_plan_matches(batch, plan)
    inputs = batch_inputs(backend, batch)
    return backend.check_output(
        plan, inputs,
        lambda out: run_hybrid(_launch(backend, plan, inputs), inputs.q, inputs.cache, out=out),
        "hybrid attention")


def measure(backend, batch, plan: HybridPlan) -> Measurement:
    from kvtune.kernels.hybrid import run_hybrid

    batch = as_attention_batch(batch)
    inputs = batch_inputs(backend, batch)
    seen = backend._verified.get(id(plan))
    check = seen[1] if seen is not None and seen[0] is plan else verify(backend, batch, plan)
    if not check.ok:
        return Measurement(status="failed", checked=True, rel_error=check.rel_error,
                           message=f"verification failed: {check.message}")
    launch = _launch(backend, plan, inputs)
    extra = {"kernel_launches": launch.num_launches, "kernel_config": str(launch.config),
             "flops": batch.causal_flops}
    if launch.decode_kernel is not None:  # the decodes' own launch, in this order
        extra["launch_order"] = launch.decode_kernel.launch_order
    if not isinstance(backend.timer, str):
        out = inputs.q.new_empty(inputs.q.shape)
        samples = backend._time(lambda: run_hybrid(launch, inputs.q, inputs.cache, out=out))
        return backend.samples_measurement(np.asarray(samples, dtype=np.float64),
                                           batch.min_bytes, check,
                            backend.timer, extra)
    copies = backend._input_copies(batch, inputs)

    def run(copy=None):
        cache, q, out = copy if copy is not None else copies[0]
        run_hybrid(launch, q, cache, out=out)

    result = backend._time(run, copies if len(copies) > 1 else None)
    fields = result.measurement_fields()
    fields["extra"].update(extra)
    median = result.median_us
    return Measurement(status="ok", bytes_moved=int(batch.min_bytes),
                       achieved_bytes_per_s=batch.min_bytes / (median * 1e-6), checked=True,
                       rel_error=check.rel_error, message=check.message, **fields)


def _check_plan_matches(batch: AttentionBatch, plan: HybridPlan) -> None:
    if not (np.array_equal(batch.q_lens, plan.q_lens) and np.array_equal(batch.kv_lens,
                                                                         plan.kv_lens)):
        raise ValueError("plan: q_lens/kv_lens differ from the batch's (a plan of another batch)")


__all__ = ["as_attention_batch", "batch_inputs", "measure", "verify"]

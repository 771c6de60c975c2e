"""harness/backends/triton.py on the CPU: the no-GPU error, and verify/measure through Triton's
interpreter (torch_device="cpu", a callable timer) so the logic runs without a GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kvtune.harness.backends import BackendUnavailable, backend_class
from kvtune.harness.backends.triton import BACKEND, NO_GPU_MESSAGE, TritonBackend
from kvtune.kernels import decode as decode_module
from kvtune.kernels.plan import AttentionShape, build_plan
from kvtune.workloads.batch import DecodeBatch

SHAPE = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4)
# small blocks: quick to interpret
SMALL_BLOCKS = decode_module.KernelConfig(block_n=32, num_warps=4, num_stages=2)

needs_interpreter = pytest.mark.skipif(
    not decode_module.INTERPRETED, reason="kvtune.kernels.decode was built for a GPU in this process")


class FixedTimer:
    """Runs the decode `calls` times and reports the given samples (us)."""

    name = "fixed"
    cold_l2 = True

    def __init__(self, samples):
        self.samples = list(samples)
        self.calls = 0

    def __call__(self, run):
        for _ in self.samples:
            run()
            self.calls += 1
        return self.samples


def _batch(seed=0, kv=(3, 17, 9)):
    return DecodeBatch(np.array(kv), SHAPE, seed=seed)


def test_registered_under_its_name():
    assert BACKEND is TritonBackend
    assert backend_class("triton") is TritonBackend
    assert TritonBackend.name == "triton"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_without_gpu_raises_one_line():
    with pytest.raises(BackendUnavailable) as info:
        TritonBackend()
    assert str(info.value) == NO_GPU_MESSAGE
    assert "\n" not in str(info.value)


@needs_interpreter
def test_verify_then_measure_fill_the_measurement():
    timer = FixedTimer([30.0, 10.0, 20.0])
    backend = TritonBackend(timer=timer, torch_device="cpu", config=SMALL_BLOCKS)
    batch = _batch()
    plan = build_plan(batch.kv_lens, 8, num_kv_heads=2, page_size=4)
    assert backend.unsupported_reason(plan) is None
    check = backend.verify(batch, plan)
    assert check.ok and check.checked and check.rel_error <= 2e-2 and check.bound == 2e-2
    m = backend.measure(batch, plan)
    assert m.status == "ok" and m.checked and m.rel_error == check.rel_error
    assert m.latency_us == 20.0 and m.p10_us < 20.0 < m.p90_us and m.samples == 3
    assert m.bytes_moved == batch.min_bytes
    assert m.achieved_bytes_per_s == pytest.approx(batch.min_bytes / 20e-6)
    assert m.timer == "fixed" and m.cold_l2
    assert m.extra["kernel_launches"] == 2  # request 1 is split: stage 2 runs
    assert m.extra["launch_order"] == "longest-first"  # the product's order for a static plan
    assert timer.calls == 3


@needs_interpreter
@pytest.mark.parametrize("merge, hook", [(None, "launch_chunked_merge"),
                                         ("blocks", "launch_merge")])
def test_each_merge_is_verified_like_the_default(monkeypatch, merge, hook):
    """Split requests merge through kernels/merge_chunked.py by default and kernels/merge.py
    with merge="blocks", checked against the reference before timing."""
    calls = []
    real = getattr(decode_module, hook)
    monkeypatch.setattr(decode_module, hook, lambda *a, **k: calls.append(1) or real(*a, **k))
    backend = TritonBackend(timer=FixedTimer([1.0]), torch_device="cpu", config=SMALL_BLOCKS,
                            **({"merge": merge} if merge else {}))
    batch = _batch()
    plan = build_plan(batch.kv_lens, 8, num_kv_heads=2, page_size=4)
    check = backend.verify(batch, plan)
    assert check.ok and check.rel_error <= 2e-2 and calls


@needs_interpreter
def test_inputs_built_once_per_batch():
    backend = TritonBackend(timer=FixedTimer([1.0]), torch_device="cpu", config=SMALL_BLOCKS)
    batch = _batch(seed=1)
    p1 = build_plan(batch.kv_lens, 8, num_kv_heads=2, page_size=4)
    p2 = build_plan(batch.kv_lens, 4, num_kv_heads=2, page_size=4,
                    schedule="persistent-heavy-first", grid_size=3)
    backend.verify(batch, p1)
    cache = backend._batch_inputs(batch).cache
    assert backend.verify(batch, p2).ok
    assert backend._batch_inputs(batch).cache is cache  # same batch: reused
    assert backend.verify(_batch(seed=2), p1).ok
    assert backend._batch_inputs(_batch(seed=2)).cache is not cache  # another seed: its own
    assert len(backend._batches) == 1  # on the CPU the budget keeps one batch only
    backend.close()
    assert not backend._batches


def test_gpu_cache_keeps_batches_within_its_byte_budget(monkeypatch):
    backend = TritonBackend(timer=FixedTimer([1.0]), torch_device="cpu", config=SMALL_BLOCKS)
    batches = [_batch(seed=s) for s in range(4)]
    one = backend._batch_inputs(batches[0]).nbytes
    # room for two and a half batches: the third evicts the least recently used
    monkeypatch.setattr(backend, "_cache_budget_bytes", lambda: int(2.5 * one))
    backend._batch_inputs(batches[1])
    backend._batch_inputs(batches[0])  # touch: now the most recent
    backend._batch_inputs(batches[2])
    keys = list(backend._batches)
    assert len(keys) == 2 and keys[-1][0] == 2 and keys[0][0] == 0  # seed 1 went first
    backend.close()


@needs_interpreter
def test_wrong_output_fails_and_is_never_timed(monkeypatch):
    timer = FixedTimer([5.0])
    backend = TritonBackend(timer=timer, torch_device="cpu", config=SMALL_BLOCKS)
    batch = _batch(seed=3)
    plan = build_plan(batch.kv_lens, 8, num_kv_heads=2, page_size=4)

    def half_written(launch, q, cache, *, sm_scale=None, out=None):
        out[: q.shape[0] // 2] = 0.0  # the rest stays NaN
        return out

    monkeypatch.setattr(decode_module, "run_decode", half_written)
    check = backend.verify(batch, plan)
    assert not check.ok and check.checked and "NaN" in check.message
    m = backend.measure(batch, plan)
    assert m.status == "failed" and timer.calls == 0


@needs_interpreter
def test_inaccurate_output_fails(monkeypatch):
    backend = TritonBackend(timer=FixedTimer([5.0]), torch_device="cpu", config=SMALL_BLOCKS)
    batch = _batch(seed=4)
    plan = build_plan(batch.kv_lens, 8, num_kv_heads=2, page_size=4)
    real = decode_module.run_decode

    def off_by_five_percent(launch, q, cache, *, sm_scale=None, out=None):
        real(launch, q, cache, sm_scale=sm_scale, out=out)
        out.mul_(1.05)
        return out

    monkeypatch.setattr(decode_module, "run_decode", off_by_five_percent)
    check = backend.verify(batch, plan)
    assert not check.ok and check.rel_error > 2e-2 and math.isfinite(check.rel_error)


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="timer"):
        TritonBackend(timer="stopwatch", torch_device="cpu", config=SMALL_BLOCKS)
    with pytest.raises(ValueError, match="torch_device"):
        TritonBackend(torch_device="tpu")
    with pytest.raises(ValueError,
                       match="merge: 'fused' not allowed; allowed: chunked, blocks, tail"):
        TritonBackend(torch_device="cpu", timer=FixedTimer([1.0]), merge="fused")


@needs_interpreter
def test_longest_first_launch_order_is_verified_and_refuses_unknown_orders():
    """launch_order="longest-first" reaches prepare_decode (MODE 3) and its output passes the
    reference check; an unknown order is refused in one line naming the allowed ones."""
    backend = TritonBackend(timer=FixedTimer([1.0]), torch_device="cpu", config=SMALL_BLOCKS,
                            launch_order="longest-first")
    batch = _batch()
    plan = build_plan(batch.kv_lens, 8, num_kv_heads=2, page_size=4)
    assert backend.verify(batch, plan).ok
    assert backend._launch(plan, backend._batch_inputs(batch)).mode == 3
    with pytest.raises(ValueError, match="launch_order: 'lpt' not allowed; allowed: plan, "):
        TritonBackend(timer=FixedTimer([1.0]), torch_device="cpu", launch_order="lpt")

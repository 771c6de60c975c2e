"""GPU memory of the triton backend without a GPU: what a batch needs, the one-line refusal, the
cap counting the allocator's reserve, and the benchmark script's dry run (benchmarks/memory_gpu.sh,
whose GPU half is run on the device machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kvtune.harness.backends import triton as triton_backend
from kvtune.harness.backends.select import check_cases_fit
from kvtune.kernels.plan import AttentionShape
from kvtune.workloads.batch import DecodeBatch

REPO = Path(__file__).resolve().parents[2]


def test_a_batch_needs_its_whole_pages_plus_the_float64_reference():
    shape = AttentionShape()  # llama3-8b: 8 KV heads x 128 x bf16, K and V: 4096 B per token
    batch = DecodeBatch(np.array([1 << 20] * 4 + [17]), shape)
    need = triton_backend.batch_need_bytes(batch)
    cache = (4 * (1 << 20) + 32) * 4096  # 17 tokens take two 16-token pages
    reference = (1 << 20) * 8 * 128 * 8 * 2  # the longest request's K and V in float64
    scores = (1 << 20) * 32 * 8 * 2  # its scores and softmax weights per query head, float64
    margin = triton_backend.MEMORY_MARGIN_BYTES
    assert cache + reference + scores + margin <= need < cache + reference + scores + margin + (1 << 20)


def test_a_batch_that_cannot_fit_is_one_line_with_the_case_and_both_sizes():
    with pytest.raises(ValueError) as err:
        triton_backend.check_fit("case big:B256", 1117.5e9, 80e9)
    text = str(err.value)
    assert "\n" not in text and text.startswith("case big:B256: needs 1117.5 GB")
    assert "80.0 GB free" in text
    triton_backend.check_fit("case small", 1e9, 80e9)


def test_check_cases_fit_asks_the_backend_for_every_case_and_skips_backends_without_it():
    seen = []
    backend = SimpleNamespace(check_fits=lambda batch, label: seen.append(label))
    cases = [SimpleNamespace(case_id=f"c{i}", batch=None) for i in range(3)]
    check_cases_fit(backend, cases)
    assert seen == ["case c0", "case c1", "case c2"]
    check_cases_fit(object(), cases)  # the simulator: nothing to check


def test_the_cache_cap_counts_reserved_memory(monkeypatch):
    """Eviction sees what the caching allocator reserved, not only the tensors' own bytes."""
    backend = triton_backend.TritonBackend.__new__(triton_backend.TritonBackend)
    backend.torch_device = "cuda"
    backend._batches = {"a": SimpleNamespace(nbytes=1 << 30)}
    fake = SimpleNamespace(memory_reserved=lambda *a: 5 << 30)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=fake))
    assert backend._used_bytes() == 5 << 30
    fake.memory_reserved = lambda *a: 0
    assert backend._used_bytes() == 1 << 30


def test_memory_benchmark_dry_run(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "memory_gpu.sh"), str(tmp_path), "--dry-run"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "memory.json").read_text())
    assert report["tune"]["exit"] == 0 and report["tune"]["status"] == "complete"
    assert report["too_large"]["refused_in_one_line"] and "GB free" in report["too_large"]["line"]
    assert (tmp_path / "memory.md").read_text().startswith("# GPU memory")

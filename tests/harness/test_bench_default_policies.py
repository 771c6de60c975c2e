"""harness.bench's default series (BenchSettings.policies None) on a selection that mixes every
kind of batch the hybrid suite holds with a plain decode batch."""

from __future__ import annotations

import numpy as np

from kvtune.harness import bench
from kvtune.harness.bench import (
    DEFAULT_POLICIES,
    HYBRID_DEFAULT_POLICIES,
    BackendSettings,
    BenchSettings,
    default_policies,
    run_bench,
)
from kvtune.harness.store import load_manifest
from kvtune.kernels.plan import AttentionShape
from kvtune.workloads.batch import AttentionBatch
from kvtune.workloads.hybrid import HybridCase
from kvtune.workloads.selection import CaseSettings
from kvtune.workloads.suites import Case, Suite

SHAPE = AttentionShape()


def mixed_suite(*_args) -> Suite:
    """A plain DecodeBatch, a decode-only AttentionBatch, a prefill-only one, a chunk beside
    decodes and a chunked-prefill step with speculative decodes: the hybrid suite's kinds."""
    small = {"context_tokens": 4096, "chunk_tokens": 512}
    return Suite("mixed", (
        Case("uniform", {}, 8, SHAPE),
        HybridCase({**small, "chunk_tokens": 0}, 8, SHAPE),
        HybridCase({**small, "decodes": 0}, 1, SHAPE),
        HybridCase(small, 16, SHAPE),
        HybridCase({"source": "continuous", "step_token_budget": 1024, "draft_tokens": 3,
                    "warmup_steps": 50}, 16, SHAPE),
    ))


def test_default_policies_follow_the_longest_query():
    decodes = [c.batch() for c in mixed_suite().cases[:2]]
    assert max(b.max_q_len for b in decodes if isinstance(b, AttentionBatch)) == 1
    assert default_policies(decodes) == DEFAULT_POLICIES
    assert default_policies([]) == DEFAULT_POLICIES
    spec = AttentionBatch(np.array([1, 2]), np.array([100, 200]), SHAPE)  # one 2-token verify
    assert default_policies([*decodes, spec]) == HYBRID_DEFAULT_POLICIES


def test_default_on_a_mixed_selection_runs_every_case_without_failed_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "resolve_suite", mixed_suite)
    out = run_bench(BenchSettings(cases=CaseSettings(), out=str(tmp_path), progress=False,
                                  measure=BackendSettings(backend="simulator", device_model="h100")))
    names = HYBRID_DEFAULT_POLICIES.split(",")
    assert [r["series"] for r in out.rows[:len(names)]] == names
    assert len(out.rows) == 5 * len(names)
    assert out.failed_rows == 0, [r["message"] for r in out.rows if r["status"] != "ok"]
    assert {r["max_q_len"] for r in out.rows if "max_q_len" in r} >= {1, 512}
    manifest = load_manifest(out.root)
    assert [p["series"] for p in manifest["policies"]] == names

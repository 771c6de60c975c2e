"""The vendored planner plans hybrid batches (issue 15): kernels.tuned_planner.plan_hybrid gives
the decode splits and prefill kv splits that kvtune's `hybrid-tuned` policy plans, from the
hybrid heuristic file alone, and defers outside its buckets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kvtune.kernels import tuned_planner
from kvtune.kernels.hybrid_policies import HYBRID_SCHEMA, HybridTunedPolicy
from kvtune.kernels.plan import AttentionShape, DeviceSpec

SHAPE = AttentionShape(num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16)
H200 = DeviceSpec(name="h200", sm_count=132, l2_bytes=60 << 20, hbm_bytes_per_s=4.8e12,
                  max_ctas_per_sm=4)
BUCKETS = [
    {"min_decodes": 0, "max_decodes": 64, "min_prefill_tokens": 1, "max_prefill_tokens": 4096,
     "params": {"schedule": "sm-aware", "ctas_per_sm": 2, "sm_policy": "proportional",
                "prefill_split_cap_waves": 2, "prefill_block_m": 128, "min_tokens_per_cta": 1024,
                "max_waves": 2, "max_splits": 16, "decode_schedule": "static"}},
    {"min_decodes": 65, "max_decodes": 256, "min_prefill_tokens": 0, "max_prefill_tokens": 4096,
     "params": {"schedule": "fused", "ctas_per_sm": 4, "sm_policy": "50:50",
                "prefill_split_cap_waves": 1, "prefill_block_m": 64, "min_tokens_per_cta": 4096,
                "max_waves": 4, "max_splits": 64, "decode_schedule": "static-heavy-first"}},
    # A serial step whose decodes follow the makespan family (schema 1.4, a serial fallback).
    {"min_decodes": 257, "max_decodes": 512, "min_prefill_tokens": 1, "max_prefill_tokens": 9000,
     "params": {"schedule": "serial", "ctas_per_sm": 2, "sm_policy": "50:50",
                "prefill_split_cap_waves": 1, "prefill_block_m": 128, "min_tokens_per_cta": 512,
                "max_waves": 2, "max_splits": 32, "decode_schedule": "static",
                "decode_family": "makespan", "piece_cost_tokens": 384}},
]


@pytest.fixture()
def heuristic(tmp_path):
    doc = {"schema": HYBRID_SCHEMA, "shape": SHAPE.to_dict(), "device": H200.to_dict(),
           "buckets": BUCKETS}
    path = tmp_path / "hybrid_heuristic.json"
    path.write_text(json.dumps(doc))
    return doc, str(path)


def _batch(rng, decodes: int, chunk: int):
    kv = list(rng.integers(64, 60_000, decodes))
    q = [int(rng.integers(1, 5)) for _ in range(decodes)]
    if chunk:
        q.append(chunk)
        kv.append(chunk + int(rng.integers(0, 20_000)))
    return np.array(q), np.array(kv)


def test_vendored_hybrid_plan_matches_the_tuned_policy(heuristic):
    doc, path = heuristic
    policy = HybridTunedPolicy(path=path)
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(60):
        decodes = int(rng.choice([0, 5, 40, 100, 300]))
        chunk = int(rng.choice([0, 512, 2048, 8192]))
        if decodes == 0 and chunk == 0:
            continue
        q, kv = _batch(rng, decodes, chunk)
        plan = policy.plan_hybrid(q, kv, SHAPE, H200)
        got = tuned_planner.plan_hybrid(doc, q, kv, H200.sm_count)
        if got.deferred:
            seen.add("deferred")
            # kvtune plans the engine's own step there: serial, decodes under FlashInfer's rule
            assert plan.notes.get("policy") == "hybrid-serial" and plan.schedule == "serial"
            continue
        seen.add(got.bucket_index)
        assert got.knobs == BUCKETS[got.bucket_index]["params"]
        assert plan.notes["policy"] == "hybrid-parametric"
        assert np.array_equal(got.decode_requests, plan.decode_requests)
        want = plan.decode_plan.splits if plan.decode_plan is not None else np.ones(0)
        assert np.array_equal(got.decode_splits, want)
        assert got.prefill_kv_splits == plan.notes["prefill_kv_splits"]
        if got.bucket_index == 2:
            assert plan.decode_plan.notes["family"] == "makespan"
    assert seen == {0, 1, 2, "deferred"}


def test_a_deferred_bucket_plans_as_the_engine(tmp_path, heuristic):
    """A bucket whose winner failed its held-out check sits under deferred_buckets (schema
    1.2): both planners treat its batches as outside every bucket, and the export names it."""
    from kvtune.studies import export

    from tests.studies.test_export import FIXED_NOW, sample_result

    doc, _ = heuristic
    moved = dict(BUCKETS[1], reason="tuned is 1.040x the default's latency on one case")
    moved["tuned_params"] = moved.pop("params")
    doc = dict(doc, buckets=BUCKETS[:1], deferred_buckets=[moved])
    path = tmp_path / "deferred.json"
    path.write_text(json.dumps(doc))
    q, kv = _batch(np.random.default_rng(7), 100, 2048)  # bucket 1's batch
    assert tuned_planner.plan_hybrid(doc, q, kv, 132).deferred
    plan = HybridTunedPolicy(path=str(path)).plan_hybrid(q, kv, SHAPE, H200)
    assert plan.notes.get("policy") == "hybrid-serial"
    q, kv = _batch(np.random.default_rng(8), 5, 512)  # bucket 0 still ships
    assert tuned_planner.plan_hybrid(doc, q, kv, 132).bucket_index == 0
    section = export.build_heuristic(sample_result(shape=SHAPE), now=FIXED_NOW,
                                     hybrid_path=str(path))["hybrid"]
    assert len(section["buckets"]) == 1
    assert section["deferred_buckets"] == [{"min_decodes": 65, "max_decodes": 256,
                                            "min_prefill_tokens": 0, "max_prefill_tokens": 4096,
                                            "reason": moved["reason"]}]
    # Every bucket deferred: still a file the export takes (the engine plans everything).
    path.write_text(json.dumps(dict(doc, buckets=[], deferred_buckets=[moved])))
    section = export.build_heuristic(sample_result(shape=SHAPE), now=FIXED_NOW,
                                     hybrid_path=str(path))["hybrid"]
    assert section["buckets"] == [] and len(section["deferred_buckets"]) == 1


def test_vendored_hybrid_plan_refuses_what_it_cannot_plan(heuristic):
    doc, _ = heuristic
    with pytest.raises(ValueError, match="q_lens"):
        tuned_planner.plan_hybrid(doc, [5], [4], 132)
    with pytest.raises(ValueError, match="q_lens"):
        tuned_planner.plan_hybrid(doc, [1, 1], [4], 132)
    with pytest.raises(ValueError, match="schema"):
        tuned_planner.plan_hybrid({"schema": "kvtune-heuristic"}, [1], [4], 132)
    with pytest.raises(ValueError, match="num_sms"):
        tuned_planner.plan_hybrid(doc, [1], [4], 0)


def test_export_writes_the_hybrid_section_and_the_planner_reads_it(tmp_path, heuristic):
    from kvtune.studies import export

    from tests.studies.test_export import FIXED_NOW, sample_result

    doc, path = heuristic
    result = sample_result(shape=SHAPE)
    out = export.build_heuristic(result, now=FIXED_NOW, hybrid_path=path)
    assert out["schema_version"] == "1.4"
    assert [b["params"] for b in out["hybrid"]["buckets"]] == [b["params"] for b in BUCKETS]
    written = tmp_path / "tuned.json"
    export.write_heuristic(out, written)
    loaded = json.loads(written.read_text())
    tuned_planner.check_document(loaded)  # the decode part still reads as before
    rng = np.random.default_rng(5)
    for decodes, chunk in ((5, 512), (100, 2048), (300, 8192)):
        q, kv = _batch(rng, decodes, chunk)
        a = tuned_planner.plan_hybrid(loaded, q, kv, 132)
        b = tuned_planner.plan_hybrid(doc, q, kv, 132)
        assert a.deferred == b.deferred and a.bucket_index == b.bucket_index
        if not a.deferred:
            assert np.array_equal(a.decode_splits, b.decode_splits)
            assert a.prefill_kv_splits == b.prefill_kv_splits
    # Another shape, or not a hybrid file: one line naming the field.
    other = dict(doc, shape={**doc["shape"], "num_kv_heads": 4})
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps(other))
    with pytest.raises(ValueError, match="hybrid: .*tuned for shape"):
        export.build_heuristic(result, now=FIXED_NOW, hybrid_path=str(bad))
    bad.write_text(json.dumps({"schema": "something-else"}))
    with pytest.raises(ValueError, match="hybrid: .* is not a"):
        export.build_heuristic(result, now=FIXED_NOW, hybrid_path=str(bad))
    broken = dict(doc, buckets=[dict(BUCKETS[0], params={**BUCKETS[0]["params"], "ctas_per_sm": 99})])
    bad.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"hybrid: buckets\[0\]"):
        export.build_heuristic(result, now=FIXED_NOW, hybrid_path=str(bad))


def test_a_prefill_only_batch_defers_even_inside_a_zero_decode_bucket(heuristic):
    # BUCKETS[0] spans 0-64 decodes (files written before the tenth session started their first
    # bucket at 0): a batch of prefill chunks alone still runs the engine's prefill launch in
    # both planners, since there is nothing to co-locate it with.
    doc, path = heuristic
    q, kv = np.array([512, 1024]), np.array([4096, 9000])
    assert tuned_planner.plan_hybrid(doc, q, kv, 132).deferred
    plan = HybridTunedPolicy(path=path).plan_hybrid(q, kv, SHAPE, H200)
    assert plan.notes.get("policy") == "hybrid-serial" and plan.schedule == "serial"
    # One decode beside the same chunks: bucket 0's knobs again.
    q1, kv1 = np.array([1, 512, 1024]), np.array([3000, 4096, 9000])
    assert tuned_planner.plan_hybrid(doc, q1, kv1, 132).bucket_index == 0
    assert HybridTunedPolicy(path=path).plan_hybrid(q1, kv1, SHAPE, H200).notes["policy"] == \
        "hybrid-parametric"


def test_the_vendored_planner_plans_the_h100_files_serial_fallback_buckets():
    """The README's H100 file ships two buckets as serial steps with their own decode split
    (kvtune tune --revalidate --serial-fallback): the vendored planner gives the splits kvtune's
    hybrid-tuned policy plans there, as in its co-located buckets."""
    from pathlib import Path

    path = (Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_calls"
            / "s21_hybrid_heuristic_h100_fallback.json")
    doc = json.loads(path.read_text())
    h100 = DeviceSpec(name="h100", sm_count=132, l2_bytes=50 << 20, hbm_bytes_per_s=3.35e12,
                      max_ctas_per_sm=8)
    policy = HybridTunedPolicy(path=str(path))
    shape = AttentionShape(**doc["shape"])
    rng = np.random.default_rng(5)
    seen = set()
    for decodes, chunk in ((40, 3000), (100, 700), (40, 1500), (100, 2000), (8, 700)):
        kv = rng.integers(64, 34_000, decodes)
        q = np.ones(decodes, dtype=np.int64)
        q, kv = np.append(q, chunk), np.append(kv, chunk + 4096)
        plan = policy.plan_hybrid(q, kv, shape, h100)
        got = tuned_planner.plan_hybrid(doc, q, kv, h100.sm_count)
        if got.deferred:
            seen.add("deferred")
            assert plan.notes.get("policy") == "hybrid-serial"
            continue
        knobs = doc["buckets"][got.bucket_index]["params"]
        seen.add(knobs["schedule"])
        assert got.knobs == knobs and plan.schedule == knobs["schedule"]
        assert np.array_equal(got.decode_splits, plan.decode_plan.splits)
        assert got.prefill_kv_splits == plan.notes["prefill_kv_splits"]
    assert seen == {"serial", "colocated", "deferred"}


def test_makespan_decodes_keep_the_engines_chunk_and_split_a_long_decode(heuristic):
    """A bucket with decode_family "makespan": on uniform steps (8 and 32 decodes at 4K, where
    the parametric fallback lost on an H200; 64 at 16K; 40 at 10K, which the rule cut in three
    before UNIFORM_SPREAD) it cuts the decodes as the engine's planner does (hybrid-serial);
    beside a 200K-token decode among 300
    short ones it splits that one where the engine and the parametric rule of the same knobs
    leave it whole; the vendored planner plans the same splits. An unknown family is refused."""
    from kvtune.kernels.hybrid_policies import HybridParametricPolicy, HybridSerialPolicy

    doc, _ = heuristic
    knobs = BUCKETS[2]["params"]
    parametric = {k: v for k, v in knobs.items() if k not in ("decode_family",
                                                               "piece_cost_tokens")}
    for decodes, ctx in ((8, 4096), (32, 4096), (64, 16384), (40, 10240)):
        q, kv = np.array([1] * decodes + [512]), np.array([ctx] * (decodes + 1))
        want = HybridSerialPolicy().plan_hybrid(q, kv, SHAPE, H200).decode_plan.splits
        got = HybridParametricPolicy(**knobs).plan_hybrid(q, kv, SHAPE, H200).decode_plan
        assert np.array_equal(got.splits, want)
    q = np.array([1] * 300 + [2048])
    kv = np.array([1000] * 299 + [200_000, 3000])
    plans = {name: pol.plan_hybrid(q, kv, SHAPE, H200).decode_plan.splits
             for name, pol in (("makespan", HybridParametricPolicy(**knobs)),
                               ("parametric", HybridParametricPolicy(**parametric)),
                               ("engine", HybridSerialPolicy()))}
    assert plans["makespan"][-1] > 1 == plans["engine"][-1] == plans["parametric"][-1]
    got = tuned_planner.plan_hybrid(doc, q, kv, H200.sm_count)
    assert got.bucket_index == 2 and np.array_equal(got.decode_splits, plans["makespan"])
    bad = {**doc, "buckets": [{**BUCKETS[2], "params": {**knobs, "decode_family": "lpt"}}]}
    with pytest.raises(ValueError, match="decode_family"):
        tuned_planner.plan_hybrid(bad, q, kv, H200.sm_count)
    with pytest.raises(ValueError, match="decode_family"):
        HybridParametricPolicy(**{**knobs, "decode_family": "lpt"})

"""kvtune.studies.export: TuningResult -> heuristic JSON -> load_heuristic, the golden format, credentials,
engine targets, and the refusal of malformed files.

The golden file tests/studies/data/golden_tuned.json pins the format. After an intended format
change, regenerate it with `KVTUNE_UPDATE_GOLDEN=1 pytest tests/harness/test_export.py` and
review the diff.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from kvtune.studies import export
from kvtune.harness.device import device_model
from kvtune.studies.export_targets import ENV_MAX_SPLITS, ENV_MAX_WAVES, ENV_MIN_TOKENS, bucket_facts
from kvtune.kernels.baselines import FixedSplitPolicy
from kvtune.kernels.baselines_flashinfer import FlashInferTensorCorePolicy, TrtllmOversubPolicy
from kvtune.kernels.parametric import BucketedPolicy, ParametricPolicy
from kvtune.kernels.plan import AttentionShape, SplitParams
from kvtune.studies.result import BucketResult, CaseEvidence, Finalist, TuningResult, save_tuning_result
from kvtune.workloads.shapes import get_shape

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden_tuned.json"
FIXED_NOW = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
SHAPE = get_shape("llama3-8b")
H200 = device_model("h200")

# A study whose buckets start above 1 and leave a gap (9..12 untuned), with every schedule.
STUDY_BUCKETS = [
    ("2-8", 2, 8, SplitParams(2048, 4, 32, 2, "static")),
    ("13-32", 13, 32, SplitParams(4096, 8, 32, 2, "static-heavy-first")),
    ("33-128", 33, 128, SplitParams(8192, 2, 8, 4, "persistent-heavy-first")),
    ("129-512", 129, 512, SplitParams(16384, 1, 4, 1, "persistent-round-robin")),
]


def bucket_result(name, lo, hi, params, study="demo", oracle=True) -> BucketResult:
    cases = tuple(
        CaseEvidence(f"prod-mix/b{batch}/s{seed}", batch, 100.0 + 10 * seed + batch,
                     {"flashinfer-tensor-core": 180.0 + batch, "fa3": 120.0 + seed + batch,
                      "trtllm-oversub": 130.0 + 2 * batch},
                     (95.0 + 10 * seed + batch) if oracle else None)
        for batch in (lo, hi) for seed in (0, 1)
    )
    finalists = (
        Finalist(params, 0.81, 0.80, 0.83, 528, chosen=True),
        Finalist(SplitParams(1024, 2, 16, 2, "static"), 0.82, 0.79, 0.86, 600),
    )
    return BucketResult(name, lo, hi, f"{study}/{name}", params, 0.81, 0.95, 40, cases, finalists,
                        1.05 if oracle else None)


def sample_result(buckets=STUDY_BUCKETS, study="demo", shape=SHAPE, device=H200,
                  rule="parametric") -> TuningResult:
    return TuningResult(
        study=study,
        buckets=tuple(bucket_result(n, lo, hi, p, study) for n, lo, hi, p in buckets),
        device=device.to_dict(), shape=shape.to_dict(), kernel=f"simulated:{device.name}",
        backend="simulator", simulated=True,
        provenance={
            "storage": "postgresql://tuner:hunter2@db.example:5432/optuna?password=hunter2",
            "suite": "prod-mix", "seeds": [0, 1], "sampler": "tpe", "timer": "model",
            "cold_l2": True, "run_id": "20250102-030405-tune-abcd",
            "environment": {"torch_version": "2.13.0", "triton_version": "3.9.0",
                            "driver_version": None, "git_commit": "0123456789abcdef"},
        },
        rule=rule,
    )


def sample_doc(**kwargs) -> dict:
    return export.build_heuristic(sample_result(**kwargs), now=FIXED_NOW)


def write_doc(tmp_path, doc, name="tuned.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=1))
    return path


def random_batches(count, max_batch, seed):
    """Batch sizes over 1..max_batch+64 (past the last bucket too), lengths from 1 to 600k tokens."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        batch = int(rng.integers(1, max_batch + 65)) if rng.random() < 0.5 else int(rng.integers(1, 40))
        kind = rng.integers(0, 3)
        if kind == 0:
            lens = rng.integers(1, 600_000, batch)
        elif kind == 1:
            lens = np.exp(rng.normal(8.5, 1.8, batch)).astype(np.int64).clip(1, 600_000)
        else:
            lens = rng.choice([4096, 8192, 16384, 32768, 65536, 131072], batch)
        yield np.asarray(lens, dtype=np.int64)


# --------------------------------------------------------------------------- round trip


def test_round_trip_plans_like_the_studys_best_configs_on_1000_batches(tmp_path):
    result = sample_result()
    path = export.write_heuristic(export.build_heuristic(result), tmp_path / "tuned.json")
    policy = export.load_heuristic(path, shape=SHAPE)
    study_table = BucketedPolicy(tuple(result.bucket_table()))
    document = export.tuned_planner.load_document(path)
    by_range = {(b.min_batch, b.max_batch): b.params for b in result.buckets}
    for kv_lens in random_batches(1000, 512, seed=7):
        ours = policy.plan(kv_lens, SHAPE, H200)
        theirs = study_table.plan(kv_lens, SHAPE, H200)
        for name in ("splits", "work_request", "work_split", "work_kv_start", "work_kv_end"):
            assert np.array_equal(getattr(ours, name), getattr(theirs, name)), name
        assert (ours.grid_size, ours.schedule, ours.ctas_per_sm) == (theirs.grid_size, theirs.schedule,
                                                                     theirs.ctas_per_sm)
        # Inside a tuned range it is that bucket's best config itself.
        batch = len(kv_lens)
        tuned = [p for (lo, hi), p in by_range.items() if lo <= batch <= hi]
        if tuned:
            best = ParametricPolicy(tuned[0]).plan(kv_lens, SHAPE, H200)
            assert np.array_equal(best.splits, ours.splits)
            assert np.array_equal(best.work_kv_end, ours.work_kv_end)
        assert np.array_equal(export.plan_splits(document, kv_lens, H200.sm_count), ours.splits)
        assert np.array_equal(export.plan_splits(policy, kv_lens, H200.sm_count), ours.splits)


def test_buckets_are_extended_to_cover_and_say_so():
    doc = sample_doc()
    ranges = [(b["min_batch"], b["max_batch"]) for b in doc["buckets"]]
    # 2..8 goes down to 1; the gap 9..12 is split at its middle (10 to the smaller batches).
    assert ranges == [(1, 10), (11, 32), (33, 128), (129, 512)]
    notes = [e["notes"] for e in doc["evidence"]]
    assert "down to 1" in notes[0][0] and "9..12" in notes[0][1]
    assert "9..12" in notes[1][0] and notes[2] == [] and notes[3] == []
    assert [(e["tuned_min_batch"], e["tuned_max_batch"]) for e in doc["evidence"]] == [
        (2, 8), (13, 32), (33, 128), (129, 512)]


def test_overlapping_study_buckets_are_refused():
    overlapping = [("1-8", 1, 8, SplitParams()), ("8-32", 8, 32, SplitParams())]
    with pytest.raises(ValueError, match="overlap"):
        sample_doc(buckets=overlapping)


def test_evidence_holds_latencies_speedups_finalists_and_regret():
    doc = sample_doc()
    ev = doc["evidence"][0]
    assert len(ev["cases"]) == 4 and ev["n_trials"] == 40 and ev["study_name"] == "demo/2-8"
    case = ev["cases"][0]
    assert case["tuned_us"] == 102.0 and case["baselines_us"]["fa3"] == 122.0 and case["oracle_us"] == 97.0
    ratios = [c["baselines_us"]["fa3"] / c["tuned_us"] for c in ev["cases"]]
    assert ev["speedup"]["fa3"]["geomean"] == pytest.approx(math.exp(np.mean(np.log(ratios))))
    assert ev["speedup"]["fa3"]["worst"] == pytest.approx(min(ratios))
    best = [min(c["baselines_us"].values()) / c["tuned_us"] for c in ev["cases"]]
    assert ev["speedup_over_best_baseline"]["worst"] == pytest.approx(min(best))
    assert ev["finalists"][1]["spread"] == pytest.approx((0.86 - 0.79) / 0.82)
    assert ev["regret"]["geomean"] == 1.05
    assert ev["regret"]["worst"] == pytest.approx(max(c["tuned_us"] / c["oracle_us"] for c in ev["cases"]))


def test_a_non_positive_latency_is_refused_at_export():
    result = sample_result()
    bad = result.buckets[0]
    cases = (CaseEvidence("x", 2, float("nan"), {"fa3": 1.0}),)
    broken = BucketResult(bad.name, bad.min_batch, bad.max_batch, bad.study_name, bad.params, 1.0, 1.0, 1, cases)
    result = TuningResult(result.study, (broken, *result.buckets[1:]), result.device, result.shape,
                          result.kernel, result.backend, result.simulated, result.provenance)
    with pytest.raises(ValueError, match="tuned_us"):
        export.build_heuristic(result)


def test_credentials_never_reach_the_file(tmp_path):
    doc = sample_doc()
    text = export.heuristic_text(doc)
    assert "hunter2" not in text and "tuner" not in text
    assert doc["provenance"]["storage"] == "postgresql://***@db.example:5432/optuna?password=***"
    assert doc["provenance"]["git_commit"] == "0123456789abcdef"
    assert doc["provenance"]["torch_version"] == "2.13.0"


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:p@h:5432/db", "postgresql://***@h:5432/db"),
    ("mysql+pymysql://user@host/db", "mysql+pymysql://***@host/db"),
    ("sqlite:///results/optuna.db", "sqlite:///results/optuna.db"),
    ("postgresql://h/db?user=a&password=s3cret", "postgresql://h/db?user=a&password=***"),
])
def test_redact_url(url, shown):
    assert export.redact_url(url) == shown


def test_device_section_says_simulated_or_measured():
    doc = sample_doc()
    assert doc["device"]["simulated"] == "h200" and doc["device"]["hbm_bytes_per_s_source"] == "simulated"
    live = sample_result()
    live = TuningResult(live.study, live.buckets, {**live.device, "live": True, "name": "NVIDIA H200"},
                        live.shape, "triton-splitkv", "triton", False,
                        {**live.provenance, "copy_bandwidth_bytes_per_s": 4.2e12})
    device = export.build_heuristic(live)["device"]
    assert device["simulated"] is None and device["hbm_bytes_per_s"] == 4.2e12
    assert device["hbm_bytes_per_s_source"] == "measured"


# --------------------------------------------------------------------------- golden format


def _masked(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    doc["generated_at"] = "<masked>"
    doc["kvtune_version"] = "<masked>"
    for key in ("git_commit", "torch_version", "triton_version", "driver_version"):
        doc["provenance"][key] = "<masked>"
    doc["provenance"]["run"].pop("environment", None)
    return doc


def _assert_same(a, b, where="$"):
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), where
        assert a == pytest.approx(b, rel=1e-12), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_golden_file_pins_the_format():
    doc = _masked(json.loads(export.heuristic_text(sample_doc())))
    if os.environ.get("KVTUNE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(doc, indent=2) + "\n")
    golden = json.loads(GOLDEN.read_text())
    _assert_same(doc, golden)
    assert doc["schema_version"] == "1.4" and doc["rule"] == "parametric"


def test_golden_file_itself_loads_and_plans():
    golden = json.loads(GOLDEN.read_text())
    golden["generated_at"], golden["kvtune_version"] = "2025-01-02T03:04:05Z", "0.1.0"
    for key in ("git_commit", "torch_version", "triton_version", "driver_version"):
        golden["provenance"][key] = None
    export.validate_document(golden)
    splits = export.plan_splits(golden, [131072, 2048, 2048], 132)
    assert splits.tolist() == [32, 1, 1]


# --------------------------------------------------------------------------- engine targets


def _domain_batches(lo, hi, max_kv, count, seed):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        batch = int(rng.integers(lo, hi + 1))
        lens = rng.integers(1, max_kv + 1, batch)
        if rng.random() < 0.3:
            lens[:] = max_kv  # the worst case the target reasons about
        yield lens


@pytest.mark.parametrize("params, lo, hi, max_kv", [
    (SplitParams(2048, 16, 64, 2, "static"), 1, 8, 131072),     # fixed split, budget never binds
    (SplitParams(4096, 8, 32, 2, "static"), 1, 8, 131072),      # 8 x 8 x 32 tasks = 8 waves
    (SplitParams(8192, 1, 1, 2, "static"), 1, 64, 131072),      # never splits: disable_split_kv
    (SplitParams(2048, 1, 32, 1, "static"), 200, 512, 131072),  # budget leaves no second piece
    (SplitParams(65536, 1, 8, 2, "static"), 1, 512, 32768),     # nothing above the chunk
])
def test_expressible_flashinfer_settings_split_exactly_like_kvtune(params, lo, hi, max_kv):
    below = [("a", 1, lo - 1, SplitParams())] if lo > 1 else []  # else the bucket extends down to 1
    doc = export.build_heuristic(sample_result(buckets=[*below, ("b", lo, hi, params)]),
                                 max_kv_len_tokens=max_kv)
    entry = doc["targets"]["flashinfer"]["buckets"][-1]
    assert (entry["min_batch"], entry["max_batch"]) == (lo, hi)
    assert entry["expressible"], entry
    flashinfer = FlashInferTensorCorePolicy(fixed_split_size=entry["fixed_split_size_pages"],
                                            disable_split_kv=entry["disable_split_kv"])
    for kv_lens in _domain_batches(max(lo, 1), hi, max_kv, 60, seed=3):
        assert np.array_equal(flashinfer.plan(kv_lens, SHAPE, H200).splits,
                              ParametricPolicy(params).plan(kv_lens, SHAPE, H200).splits)


def test_flashinfer_expressibility_is_exact_on_random_buckets():
    """Expressible: equal splits on domain batches. Not (schedule aside): a worst-case batch differs."""
    rng = np.random.default_rng(21)
    for _ in range(40):
        params = SplitParams(int(rng.choice([128, 1024, 2048, 8192, 32768])), int(rng.integers(1, 17)),
                             int(rng.choice([1, 2, 8, 32, 128])), int(rng.choice([1, 2, 4])), "static")
        lo = int(rng.choice([1, 2, 9, 33]))
        hi = lo + int(rng.integers(0, 64))
        max_kv = int(rng.choice([4096, 65536, 131072]))
        below = [("a", 1, lo - 1, SplitParams())] if lo > 1 else []
        doc = export.build_heuristic(sample_result(buckets=[*below, ("b", lo, hi, params)]),
                                     max_kv_len_tokens=max_kv)
        entry = doc["targets"]["flashinfer"]["buckets"][-1]
        kvtune = ParametricPolicy(params)
        if entry["expressible"]:
            flashinfer = FlashInferTensorCorePolicy(fixed_split_size=entry["fixed_split_size_pages"],
                                                    disable_split_kv=entry["disable_split_kv"])
            batches = [np.full(hi, max_kv), np.array([max_kv] + [1] * (lo - 1)),
                       *_domain_batches(lo, hi, max_kv, 10, seed=int(rng.integers(1 << 30)))]
            for kv in batches:
                assert np.array_equal(flashinfer.plan(kv, SHAPE, H200).splits, kvtune.plan(kv, SHAPE, H200).splits)
        else:
            pages = -(-max(params.min_tokens_per_cta, 16) // 16)
            flashinfer = FlashInferTensorCorePolicy(fixed_split_size=pages)
            batches = [np.full(hi, max_kv), np.array([max_kv] + [1] * (lo - 1))]
            assert any(not np.array_equal(flashinfer.plan(kv, SHAPE, H200).splits,
                                          kvtune.plan(kv, SHAPE, H200).splits) for kv in batches), entry


def test_flashinfer_workspace_matches_the_planners_piece_count():
    params = SplitParams(2048, 16, 64, 2, "static")
    doc = export.build_heuristic(sample_result(buckets=[("b", 1, 8, params)]), max_kv_len_tokens=131072)
    entry = doc["targets"]["flashinfer"]["buckets"][0]
    ws = entry["workspace"]
    worst = np.full(8, 131072)
    plan = FlashInferTensorCorePolicy(fixed_split_size=entry["fixed_split_size_pages"]).plan(worst, SHAPE, H200)
    assert ws["pieces"] == plan.notes["new_batch_size"] == 8 * 64
    # tmp_v: num_qo_heads x pieces x cta_tile_q (16 for G = 4) x head_dim x 4 bytes.
    assert ws["tmp_v_bytes"] == 32 * 512 * 16 * 128 * 4
    assert ws["float_workspace_bytes"] >= ws["tmp_v_bytes"] + ws["tmp_s_bytes"]


def test_flashinfer_says_why_when_not_expressible_and_where_it_would_be():
    cap = SplitParams(2048, 16, 8, 2, "static")
    entry = export.build_heuristic(sample_result(buckets=[("b", 1, 8, cap)]))["targets"]["flashinfer"]["buckets"][0]
    assert not entry["expressible"] and "max_splits 8 binds" in entry["reason"]
    assert "does not bind for kv_len up to 16384" in entry["reason"]
    order = SplitParams(2048, 16, 64, 2, "static-heavy-first")
    entry = export.build_heuristic(sample_result(buckets=[("b", 1, 8, order)]))["targets"]["flashinfer"]["buckets"][0]
    assert not entry["expressible"] and "schedule" in entry["reason"]
    budget = SplitParams(2048, 2, 64, 2, "static")  # 8 heads x 32 x 64 pieces >> 2 x 264 slots
    entry = export.build_heuristic(sample_result(buckets=[("b", 1, 32, budget)]))["targets"]["flashinfer"]["buckets"][0]
    assert not entry["expressible"] and "budget binds" in entry["reason"]
    # Its claim: it does not bind for batches up to 528 // (8 x 64) = 1 at this max_kv_len.
    assert "does not bind for batches of at most 1 requests" in entry["reason"]
    fixed = FlashInferTensorCorePolicy(fixed_split_size=128)
    for batch, same in ((1, True), (2, False)):
        kv = np.full(batch, 131072)
        equal = np.array_equal(fixed.plan(kv, SHAPE, H200).splits, ParametricPolicy(budget).plan(kv, SHAPE, H200).splits)
        assert equal is same


def test_trtllm_env_only_where_exact_and_process_wide_only_if_every_bucket_is():
    never = SplitParams(2048, 1, 1, 2, "static")
    # Extended down to 1, the bucket holds batches of at most 132 // (2 x 8) = 8 requests, which
    # trtllm-gen's base rule splits whatever the env vars say.
    doc = export.build_heuristic(sample_result(buckets=[("b", 9, 64, never)]))
    entry = doc["targets"]["trtllm_gen"]["buckets"][0]
    assert (entry["min_batch"], entry["max_batch"]) == (1, 64)
    assert not entry["expressible"] and "base rule" in entry["reason"] and entry["env"] is None
    splitting = SplitParams(2048, 4, 32, 2, "static")
    doc = export.build_heuristic(sample_result(buckets=[("a", 1, 8, splitting), ("b", 9, 64, never)]))
    trtllm = doc["targets"]["trtllm_gen"]
    entry = trtllm["buckets"][1]
    assert entry["min_batch"] == 9 and entry["expressible"] and entry["reason"] is None
    env = entry["env"]
    policy = TrtllmOversubPolicy(min_tokens_per_cta=env[ENV_MIN_TOKENS], max_waves=env[ENV_MAX_WAVES],
                                 max_splits=env[ENV_MAX_SPLITS])
    for kv_lens in _domain_batches(9, 64, 131072, 40, seed=5):
        assert (policy.plan(kv_lens, SHAPE, H200).splits == 1).all()
        assert (ParametricPolicy(never).plan(kv_lens, SHAPE, H200).splits == 1).all()
    assert not trtllm["process_wide"]["expressible"] and "1..8" in trtllm["process_wide"]["reason"]
    doc = export.build_heuristic(sample_result(buckets=[("b", 9, 64, never), ("c", 65, 512, never)]),
                                 max_kv_len_tokens=256)  # nothing is ever split by either rule
    assert doc["targets"]["trtllm_gen"]["process_wide"]["expressible"]
    assert doc["targets"]["trtllm_gen"]["process_wide"]["env"][ENV_MAX_SPLITS] == 1


def test_trtllm_reason_for_a_splitting_bucket_holds_a_real_counterexample():
    params = SplitParams(4096, 4, 16, 2, "static")
    entry = export.build_heuristic(sample_result(buckets=[("b", 1, 32, params)]))["targets"]["trtllm_gen"]["buckets"][0]
    assert not entry["expressible"] and entry["env"] is None and "e.g." in entry["reason"]
    assert entry["knob_for_knob_env"] == {ENV_MIN_TOKENS: 4096, ENV_MAX_WAVES: 8, ENV_MAX_SPLITS: 16}


def test_bucket_facts_never_split_condition_is_exact():
    # kvtune splits some request of the domain iff max_waves x slots >= H_kv x (min_batch + 1).
    params = SplitParams(2048, 1, 32, 1, "static")  # 132 slots: splits possible up to B = 15
    for lo, splits_somewhere in ((15, True), (16, False)):
        facts = bucket_facts(lo, lo, params, SHAPE, H200, 131072)
        assert (facts.never_split_reason() is None) is splits_somewhere
        kv = np.array([131072] + [1] * (lo - 1))
        assert bool(ParametricPolicy(params).plan(kv, SHAPE, H200).splits.max() > 1) is splits_somewhere


# --------------------------------------------------------------------------- the fixed-chunk rule

# Buckets a one-chunk backend (flashinfer) would tune: only the chunk varies; the other knobs are
# pinned, or (the last two) left at values the parametric rule would let bind.
FIXED_CHUNK_BUCKETS = [
    ("1-8", 1, 8, SplitParams(1024, 16, 128, 2, "static")),
    ("9-32", 9, 32, SplitParams(4096, 16, 128, 2, "static")),
    ("33-128", 33, 128, SplitParams(2000, 1, 2, 1, "persistent-heavy-first")),
    ("129-512", 129, 512, SplitParams(16384, 1, 1, 1, "static")),
]


def test_fixed_chunk_result_exports_its_rule_and_plans_fixed_splits(tmp_path):
    result = sample_result(buckets=FIXED_CHUNK_BUCKETS, rule="fixed-chunk")
    doc = export.build_heuristic(result, now=FIXED_NOW)
    assert doc["rule"] == "fixed-chunk" and doc["schema_version"] == "1.4"
    path = export.write_heuristic(doc, tmp_path / "tuned.json")
    policy = export.load_heuristic(path, shape=SHAPE)
    assert policy.params()["rule"] == "fixed-chunk"
    document = export.tuned_planner.load_document(path)
    by_index = [b[3] for b in FIXED_CHUNK_BUCKETS]
    for kv_lens in random_batches(300, 512, seed=9):
        ours = policy.plan(kv_lens, SHAPE, H200)
        params = by_index[policy.policy.select(len(kv_lens))]
        chunk = -(-params.min_tokens_per_cta // SHAPE.page_size) * SHAPE.page_size
        want = FixedSplitPolicy(chunk_tokens=chunk).plan(kv_lens, SHAPE, H200)
        for name in ("splits", "work_request", "work_split", "work_kv_start", "work_kv_end"):
            assert np.array_equal(getattr(ours, name), getattr(want, name)), name
        assert ours.schedule == "static" and ours.notes["rule"] == "fixed-chunk"
        assert np.array_equal(export.plan_splits(document, kv_lens, H200.sm_count), ours.splits)


def test_fixed_chunk_flashinfer_target_maps_every_bucket_to_its_chunk():
    doc = export.build_heuristic(sample_result(buckets=FIXED_CHUNK_BUCKETS, rule="fixed-chunk"))
    entries = doc["targets"]["flashinfer"]["buckets"]
    policy = BucketedPolicy(tuple((b["min_batch"], b["max_batch"], SplitParams(**b["params"]))
                                  for b in doc["buckets"]), rule="fixed-chunk")
    # The same params under the parametric rule: the budget or max_splits binds, or the schedule is
    # not static, so FlashInfer could not take them.
    parametric = export.build_heuristic(sample_result(buckets=FIXED_CHUNK_BUCKETS))
    assert not all(e["expressible"] for e in parametric["targets"]["flashinfer"]["buckets"])
    for entry, bucket in zip(entries, doc["buckets"]):
        assert entry["expressible"] and entry["disable_split_kv"] is False
        assert entry["fixed_split_size_pages"] == -(-bucket["params"]["min_tokens_per_cta"] // 16)
        flashinfer = FlashInferTensorCorePolicy(fixed_split_size=entry["fixed_split_size_pages"])
        for kv_lens in _domain_batches(entry["min_batch"], entry["max_batch"], 131072, 20, seed=8):
            ours = policy.plan(kv_lens, SHAPE, H200)
            theirs = flashinfer.plan(kv_lens, SHAPE, H200)
            assert np.array_equal(ours.splits, theirs.splits)
            assert np.array_equal(ours.work_kv_end, theirs.work_kv_end)
        # The worst-case workspace is stated as for a parametric bucket: max_batch x ceil(K / c).
        pieces = entry["max_batch"] * -(-131072 // (entry["fixed_split_size_pages"] * 16))
        assert entry["workspace"]["pieces"] == pieces
        assert entry["workspace"]["float_workspace_bytes"] >= entry["workspace"]["tmp_v_bytes"] > 0


def test_fixed_chunk_trtllm_target_is_not_expressible_where_it_splits():
    doc = export.build_heuristic(sample_result(buckets=FIXED_CHUNK_BUCKETS[:2], rule="fixed-chunk"))
    for entry in doc["targets"]["trtllm_gen"]["buckets"]:
        assert not entry["expressible"] and entry["env"] is None
        assert "fixed-chunk" in entry["reason"] and "e.g." in entry["reason"]
    first = doc["targets"]["trtllm_gen"]["buckets"][0]
    # No split cap in the rule: the knob-for-knob MAX_SPLITS is the most pieces in the domain.
    assert first["knob_for_knob_env"] == {ENV_MIN_TOKENS: 1024, ENV_MAX_WAVES: 32, ENV_MAX_SPLITS: 128}
    # Where nothing is longer than the chunk and trtllm-gen's base rule cannot split either, it maps.
    never = export.build_heuristic(sample_result(buckets=[("b", 9, 64, SplitParams(16384))], rule="fixed-chunk"),
                                   max_kv_len_tokens=256)
    assert all(e["expressible"] for e in never["targets"]["trtllm_gen"]["buckets"])
    assert all(e["expressible"] for e in never["targets"]["flashinfer"]["buckets"])


def _as_1_0(doc: dict) -> dict:
    """A document as kvtune wrote it before schema 1.1: no `rule`."""
    doc = copy.deepcopy(doc)
    doc["schema_version"] = "1.0"
    del doc["rule"]
    return doc


def test_a_1_0_file_without_rule_still_loads_and_plans_parametric(tmp_path):
    result = sample_result()
    path = write_doc(tmp_path, _as_1_0(sample_doc()))
    policy = export.load_heuristic(path, shape=SHAPE)
    assert policy.policy.rule == "parametric"
    document = export.tuned_planner.load_document(path)
    table = BucketedPolicy(tuple(result.bucket_table()))  # what the 1.0 loader built
    for kv_lens in random_batches(100, 512, seed=3):
        ours = policy.plan(kv_lens, SHAPE, H200)
        assert np.array_equal(ours.work_kv_end, table.plan(kv_lens, SHAPE, H200).work_kv_end)
        assert np.array_equal(export.plan_splits(document, kv_lens, H200.sm_count), ours.splits)
    # The 1.0 golden content (what this repository pinned before 1.1) loads too.
    golden = _as_1_0(json.loads(GOLDEN.read_text()))
    golden["generated_at"], golden["kvtune_version"] = "2025-01-02T03:04:05Z", "0.1.0"
    for key in ("git_commit", "torch_version", "triton_version", "driver_version"):
        golden["provenance"][key] = None
    assert export.load_heuristic(write_doc(tmp_path, golden, "golden-1.0.json")).policy.rule == "parametric"


def test_an_old_tuning_result_without_rule_is_parametric(tmp_path):
    old = sample_result().to_dict()
    del old["rule"]
    loaded = TuningResult.from_dict(old)
    assert loaded.rule == "parametric"
    assert export.build_heuristic(loaded)["rule"] == "parametric"
    with pytest.raises(ValueError, match="rule: 'equal' not allowed"):
        TuningResult.from_dict({**old, "rule": "equal"})


def test_bucket_studies_of_different_rules_are_not_mixed(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    _store_in_optuna(sample_result(buckets=STUDY_BUCKETS[:1]), url)
    _store_in_optuna(sample_result(buckets=STUDY_BUCKETS[1:2], rule="fixed-chunk"), url)
    with pytest.raises(ValueError, match="another split rule"):
        export.tuning_result_from_study("demo", storage=url)


# --------------------------------------------------------------------------- malformed files


def _set(path, value):
    def mutate(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return doc
    return mutate


def _delete(path):
    def mutate(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        return doc
    return mutate


def _raw(text_of_doc):
    """A mutation that replaces the file's text (for what JSON objects cannot hold)."""
    return ("raw", text_of_doc)


def _overlap(doc):
    doc["buckets"][1]["min_batch"] = doc["buckets"][0]["max_batch"]
    doc["evidence"][1]["min_batch"] = doc["buckets"][1]["min_batch"]
    return doc


def _gap(doc):
    doc["buckets"][1]["min_batch"] += 2
    doc["evidence"][1]["min_batch"] = doc["buckets"][1]["min_batch"]
    return doc


def _nan_text(doc):
    return json.dumps(doc).replace('"max_waves": 4', '"max_waves": NaN', 1)


def _infinity_text(doc):
    return json.dumps(doc).replace('"score": 0.81', '"score": Infinity', 1)


def _huge_number_text(doc):
    return json.dumps(doc).replace('"score": 0.81', '"score": 1e999', 1)


def _deep_text(doc):
    return json.dumps(doc)[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}"


def _duplicate_text(doc):
    return json.dumps(doc).replace('"kernel":', '"kernel": "x", "kernel":', 1)


# (id, field the one-line message must name, mutation of the document or raw text)
MALFORMED = [
    ("wrong-type-int-as-string", "buckets[0].params.max_waves", _set(["buckets", 0, "params", "max_waves"], "4")),
    ("wrong-type-float-int", "buckets[0].params.max_splits", _set(["buckets", 0, "params", "max_splits"], 32.0)),
    ("wrong-type-bool-int", "buckets[1].min_batch", _set(["buckets", 1, "min_batch"], True)),
    ("wrong-type-buckets", "buckets", _set(["buckets"], {"min_batch": 1})),
    ("wrong-type-shape", "shape.num_kv_heads", _set(["shape", "num_kv_heads"], [8])),
    ("missing-buckets", "buckets", _delete(["buckets"])),
    ("missing-params", "buckets[2].params", _delete(["buckets", 2, "params"])),
    ("missing-schedule", "buckets[0].params.schedule", _delete(["buckets", 0, "params", "schedule"])),
    ("missing-shape-field", "shape.page_size", _delete(["shape", "page_size"])),
    ("missing-provenance", "provenance", _delete(["provenance"])),
    ("unknown-param", "buckets[0].params.max_wave", _set(["buckets", 0, "params", "max_wave"], 3)),
    ("zero-min-tokens", "buckets[0].params.min_tokens_per_cta", _set(["buckets", 0, "params", "min_tokens_per_cta"], 0)),
    ("negative-max-splits", "buckets[3].params.max_splits", _set(["buckets", 3, "params", "max_splits"], -4)),
    ("zero-min-batch", "buckets[0].min_batch", _set(["buckets", 0, "min_batch"], 0)),
    ("negative-sm-count", "device.sm_count", _set(["device", "sm_count"], -132)),
    ("too-many-waves", "buckets[0].params.max_waves", _set(["buckets", 0, "params", "max_waves"], 65)),
    ("unknown-schedule", "buckets[0].params.schedule", _set(["buckets", 0, "params", "schedule"], "dynamic")),
    ("bad-page-size", "shape.page_size", _set(["shape", "page_size"], 12)),
    ("inverted-bucket", "buckets[0].max_batch", _set(["buckets", 0, "max_batch"], 0)),
    ("overlapping-buckets", "buckets[1].min_batch", _overlap),
    ("gapped-buckets", "buckets[1].min_batch", _gap),
    ("not-from-1", "buckets[0].min_batch", _set(["buckets", 0, "min_batch"], 2)),
    ("evidence-misaligned", "evidence[2].max_batch", _set(["evidence", 2, "max_batch"], 127)),
    ("unknown-major-version", "schema_version", _set(["schema_version"], "2.0")),
    ("unreadable-version", "schema_version", _set(["schema_version"], "one")),
    ("unknown-rule", "rule", _set(["rule"], "equal-pieces")),
    ("rule-not-a-string", "rule", _set(["rule"], ["fixed-chunk"])),
    ("credentials-in-storage", "provenance.storage", _set(["provenance", "storage"], "postgresql://u:pw@h/db")),
    ("nan", "buckets[0].params.max_waves", _raw(_nan_text)),
    ("infinity", "evidence[0].score", _raw(_infinity_text)),
    ("overflowing-number", "evidence[0].score", _raw(_huge_number_text)),
    ("deeply-nested", "nested deeper", _raw(_deep_text)),
    ("duplicate-key", "kernel", _raw(_duplicate_text)),
    ("not-json", "not valid JSON", _raw(lambda doc: json.dumps(doc)[:-20])),
    ("top-level-array", "top level", _raw(lambda doc: json.dumps([doc]))),
    ("not-utf8", "UTF-8", ("bytes", lambda doc: b"\xff\xfe" + json.dumps(doc).encode())),
]


def write_malformed(tmp_path, mutation) -> Path:
    doc = sample_doc()
    path = tmp_path / "bad.json"
    if isinstance(mutation, tuple) and mutation[0] == "raw":
        path.write_text(mutation[1](doc))
    elif isinstance(mutation, tuple) and mutation[0] == "bytes":
        path.write_bytes(mutation[1](doc))
    else:
        path.write_text(json.dumps(mutation(doc)))
    return path


@pytest.mark.parametrize("case_id, field, mutation", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_files_are_refused_with_one_line_naming_the_field(tmp_path, case_id, field, mutation):
    path = write_malformed(tmp_path, mutation)
    with pytest.raises(ValueError) as info:
        export.load_heuristic(path)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    assert field in message, message


def test_the_untouched_sample_loads(tmp_path):
    """The malformed cases fail because of their one change: the document they start from is fine."""
    assert export.load_heuristic(write_doc(tmp_path, sample_doc()), shape=SHAPE, dtype="bf16").name == "tuned"


def test_a_50_mb_file_is_refused_quickly_without_parsing(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as fh:
        fh.write(b'{"pad": "')
        fh.seek(50 * 1000 * 1000)
        fh.write(b'"}')
    start = time.perf_counter()
    with pytest.raises(ValueError, match="bytes; allowed: at most 1000000"):
        export.load_heuristic(path)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize("kwargs, field", [
    ({"shape": AttentionShape(32, 4, 128, 16, "bf16")}, "shape.num_kv_heads"),
    ({"shape": AttentionShape(32, 8, 128, 32, "bf16")}, "shape.page_size"),
    ({"dtype": "fp16"}, "shape.dtype"),
    ({"shape": get_shape("llama3-8b", dtype="fp16")}, "shape.dtype"),
])
def test_a_shape_or_dtype_other_than_the_files_is_refused(tmp_path, kwargs, field):
    path = write_doc(tmp_path, sample_doc())
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        export.load_heuristic(path, **kwargs)


def test_the_file_says_its_kv_type_and_another_kv_type_is_refused(tmp_path):
    fp8 = get_shape("llama3-8b", kv_dtype="fp8_e4m3")
    doc = sample_doc(shape=fp8)
    assert doc["shape"]["kv_dtype"] == "fp8_e4m3"
    path = write_doc(tmp_path, doc, "fp8.json")
    assert export.load_heuristic(path, shape=fp8).shape == fp8
    with pytest.raises(ValueError, match=r"shape\.kv_dtype: the heuristic was tuned for 'fp8_e4m3'"):
        export.load_heuristic(path, shape=SHAPE)
    # A file written before kv_dtype existed was tuned on a cache of its query type.
    old = sample_doc()
    old["shape"].pop("kv_dtype", None)
    old_path = write_doc(tmp_path, old, "old.json")
    assert export.load_heuristic(old_path, shape=SHAPE).shape == SHAPE
    with pytest.raises(ValueError, match=r"shape\.kv_dtype"):
        export.load_heuristic(old_path).plan([1000, 2000], fp8, H200)


def test_planning_for_another_shape_is_refused_by_the_loaded_policy(tmp_path):
    policy = export.load_heuristic(write_doc(tmp_path, sample_doc()))
    with pytest.raises(ValueError, match="shape.num_kv_heads"):
        policy.plan([1000, 2000], get_shape("yi-6b"), H200)


def test_a_minor_version_adding_fields_is_read(tmp_path):
    doc = sample_doc()
    doc["schema_version"] = "1.7"
    doc["future_information"] = {"anything": [1, 2]}
    policy = export.load_heuristic(write_doc(tmp_path, doc))
    assert policy.plan([4096] * 3, SHAPE, H200).batch_size == 3


# --------------------------------------------------------------------------- reading a tuning run


def _store_in_optuna(result: TuningResult, storage, finished=True):
    import optuna

    from kvtune.studies.result import RESULT_ATTR, RUN_ATTR

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for bucket in result.buckets:
        study = optuna.create_study(study_name=bucket.study_name, storage=storage)
        study.optimize(lambda t: t.suggest_float("x", 0, 2), n_trials=2)
        if finished:
            study.set_user_attr(RESULT_ATTR, bucket.to_dict())
            study.set_user_attr(RUN_ATTR, result.run_fields())


def test_tuning_result_from_an_optuna_storage(tmp_path):
    result = sample_result()
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    _store_in_optuna(result, url)
    _store_in_optuna(sample_result(buckets=STUDY_BUCKETS[:1], study="other"), url)
    loaded, source = export.tuning_result_from_study("demo", storage=url)
    assert loaded.to_dict() == result.to_dict()
    assert source["kind"] == "optuna-storage" and source["storage_trials"]["demo/2-8"] == 2
    doc = export.build_heuristic(loaded, source=source)
    assert doc["provenance"]["storage"] == url and doc["provenance"]["exported_from"] == "optuna-storage"


def test_tuning_result_from_a_journal_and_from_a_run_dir(tmp_path):
    import optuna
    from optuna.storages.journal import JournalFileBackend

    result = sample_result()
    journal = tmp_path / "journal.log"
    _store_in_optuna(result, optuna.storages.JournalStorage(JournalFileBackend(str(journal))))
    loaded, _ = export.tuning_result_from_study("demo", journal=str(journal))
    assert loaded.to_dict() == result.to_dict()
    run = tmp_path / "run"
    run.mkdir()
    save_tuning_result(run, result)
    loaded, source = export.tuning_result_from_run(run)
    # tuning.json never holds a credential: the sample's storage password is redacted on writing.
    from kvtune.harness.redact import redact_tree

    assert loaded.to_dict() == redact_tree(result.to_dict()) and source == {"kind": "run-dir", "run_dir": str(run)}
    assert "hunter2" not in (run / "tuning.json").read_text()


@pytest.mark.parametrize("setup, kwargs, match", [
    ("none", {"study": "demo"}, "does not exist"),
    ("finished", {"study": "nope"}, "no study named nope/<bucket>"),
    ("unfinished", {"study": "demo"}, "did not finish"),
    ("finished", {"study": "demo/2-8"}, "not a study name"),
])
def test_reading_a_study_that_is_not_there_or_not_finished(tmp_path, setup, kwargs, match):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    if setup != "none":
        _store_in_optuna(sample_result(buckets=STUDY_BUCKETS[:2]), url, finished=setup == "finished")
    with pytest.raises(ValueError, match=match):
        export.tuning_result_from_study(storage=url, **kwargs)
    if setup == "none":
        assert not (tmp_path / "optuna.db").exists()  # a wrong path does not create a database


def test_bucket_studies_of_different_shapes_are_not_mixed(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    _store_in_optuna(sample_result(buckets=STUDY_BUCKETS[:1]), url)
    _store_in_optuna(sample_result(buckets=STUDY_BUCKETS[1:2], shape=get_shape("yi-6b")), url)
    with pytest.raises(ValueError, match="another shape"):
        export.tuning_result_from_study("demo", storage=url)


def test_written_file_is_atomic_and_refuses_a_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="output"):
        export.write_heuristic(sample_doc(), tmp_path / "missing" / "t.json")
    path = export.write_heuristic(sample_doc(), tmp_path / "t.json")
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]
    assert json.loads(path.read_text())["schema_version"] == "1.4"


def test_same_card_by_name_or_preset():
    assert export.same_card("NVIDIA H200", "h200") and export.same_card("h100", "H100")
    assert export.same_card("NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL")
    assert not export.same_card("NVIDIA H200", "h100")
    assert not export.same_card("NVIDIA H20", "h200")  # h20 is not h200
    assert not export.same_card("Some GPU", "Other GPU")


def test_the_plan_notes_a_file_tuned_on_another_card():
    from kvtune.studies.export import load_heuristic

    path = Path(__file__).resolve().parents[2] / "benchmarks/gpu_calls/s12_fp8_heuristic.json"
    shape = get_shape("llama3-8b", kv_dtype="fp8_e4m3")
    policy = load_heuristic(path, shape=shape)
    assert policy.document["device"]["name"] == "NVIDIA H200"
    kv = [4096, 2048, 300] * 16
    assert policy.plan(kv, shape, device_model("h200")).notes["tuned_on"] == "NVIDIA H200"
    assert policy.plan(kv, shape, device_model("h100")).notes["tuned_on"] == \
        "NVIDIA H200 (planning for h100)"

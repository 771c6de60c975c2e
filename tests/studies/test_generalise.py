"""Issue 12: held-out validation, defer to the engine's own planner, rule families, auto buckets,
the regression gate of export, and `bench --heuristic` on a trace file (simulator, small)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from kvtune.harness.device import device_model
from kvtune.kernels import tuned_planner
from kvtune.kernels.baselines_flashinfer import FlashInferTensorCorePolicy
from kvtune.kernels.parametric import AdaptiveChunkPolicy, BucketedPolicy, MakespanChunkPolicy
from kvtune.studies.finalists import ADAPTIVE_CTAS_PER_SM, ADAPTIVE_MAX_CHUNKS_TOKENS, ADAPTIVE_WAVES
from kvtune.kernels.plan import SplitParams
from kvtune.studies import export
from kvtune.studies import study as study_module
from kvtune.studies.buckets_auto import choose_boundaries, search_buckets
from kvtune.studies.config import TuneConfig
from kvtune.studies.result import load_tuning_result
from kvtune.studies.tune import run_tune
from kvtune.workloads.shapes import get_shape

from kvtune.cli import main

from .conftest import sim_cases, sim_runner

H200 = device_model("h200")
SHAPE = get_shape("llama3-8b")
PLAN_FIELDS = ("splits", "work_request", "work_split", "work_kv_start", "work_kv_end")


def _doc(table: BucketedPolicy) -> dict:
    return {"schema_version": "1.2", "rule": table.rule, "shape": SHAPE.to_dict(),
            "device": {"max_ctas_per_sm": H200.max_ctas_per_sm},
            "buckets": [b.to_dict() for b in table.buckets]}


def test_deferred_bucket_plans_exactly_like_the_engine_default():
    rng = np.random.default_rng(12)
    for _ in range(150):
        p = SplitParams(min_tokens_per_cta=int(2 ** rng.integers(7, 14)),
                        max_waves=int(rng.integers(1, 8)), max_splits=int(rng.integers(1, 64)))
        cut = int(rng.integers(1, 64))
        rule = str(rng.choice(["parametric", "fixed-chunk"]))
        table = BucketedPolicy(((1, cut, p, "defer"), (cut + 1, 512, p, "adaptive", 8192)), rule=rule)
        doc = tuned_planner.check_document(_doc(table))
        kv = rng.integers(1, 200_000, int(rng.integers(1, 2 * cut + 2)))
        got = table.plan(kv, SHAPE, H200)
        pieces = tuned_planner.plan_pieces(doc, kv, H200.sm_count)
        if len(kv) <= cut:
            own = FlashInferTensorCorePolicy().plan(kv, SHAPE, H200)
            for f in PLAN_FIELDS:
                assert np.array_equal(getattr(got, f), getattr(own, f)), f
            assert got.grid_size == own.grid_size and got.schedule == own.schedule
            assert pieces.deferred and pieces.splits is None
            assert tuned_planner.plan_splits(doc, kv, H200.sm_count) is None
            assert tuned_planner.fixed_split_size(doc, kv, H200.sm_count) is None
        else:
            want = AdaptiveChunkPolicy(p, 8192).plan(kv, SHAPE, H200)
            assert np.array_equal(got.splits, want.splits)
            assert not pieces.deferred and np.array_equal(pieces.splits, got.splits)
            chunk = pieces.chunk_tokens
            assert chunk % SHAPE.page_size == 0
            # A batch spread evenly over the slots stays unsplit (chunk = its longest request);
            # otherwise the chunk keeps within the min and max chunk.
            assert (chunk <= 8192 and chunk >= min(8192, p.min_tokens_per_cta)) or (
                got.splits.max() == 1 and chunk >= kv.max())
            assert tuned_planner.fixed_split_size(doc, kv, H200.sm_count) == chunk // SHAPE.page_size


def test_adaptive_chunk_grows_with_the_batch_and_respects_max_splits():
    p = SplitParams(min_tokens_per_cta=256, max_waves=2, max_splits=8)
    small = AdaptiveChunkPolicy(p, 1 << 20).plan([100_000, 1000], SHAPE, H200)
    assert small.splits.max() <= 8  # max_splits holds when the max chunk does not bind
    big = AdaptiveChunkPolicy(p, 1 << 20).plan([4000] * 256, SHAPE, H200)
    assert big.notes["chunk_tokens"] >= small.notes["chunk_tokens"] or big.splits.max() == 1


@pytest.mark.parametrize("max_buckets", [1, 2, 3])
def test_choose_boundaries_gives_ordered_covering_groups(max_buckets):
    sizes = [4, 8, 16, 64, 128]
    rng = np.random.default_rng(max_buckets)
    logs = {s: np.abs(rng.normal(size=(2, 6))) for s in sizes}
    ends = choose_boundaries(sizes, logs, max_buckets)
    assert ends == sorted(ends) and ends[-1] == len(sizes) - 1 and len(ends) <= max_buckets


def test_auto_buckets_on_the_simulator_are_ordered_and_cover_every_case():
    cases = sim_cases("skew80", "2,4,16,64", total_tokens=65536)
    buckets = search_buckets(sim_runner(), cases, 3)
    assert 1 <= len(buckets) <= 3 and buckets[0].min_batch == 1
    for prev, cur in zip(buckets, buckets[1:]):
        assert cur.min_batch == prev.max_batch + 1
    assert buckets[-1].max_batch == 64
    assert all(any(b.holds(c.batch.batch_size) for b in buckets) for c in cases)


def _config(tmp_path, **kw) -> TuneConfig:
    values = dict(study="g", distribution="prod-mix", batch_sizes="4,16", seeds="0", backend="simulator",
                  device_model="h200", trials=4, sampler="random", finalists=2, finalist_rounds=1,
                  out=str(tmp_path / "results"), no_progress=True)
    values.update(kw)
    return TuneConfig(**values)


def test_validate_cases_never_reach_the_search(tmp_path, monkeypatch):
    seen = []

    class Spy(study_module.BucketObjective):
        def __call__(self, trial):
            seen.extend(c.case_id for c in self.cases)
            return super().__call__(trial)

    monkeypatch.setattr(study_module, "BucketObjective", Spy)
    root = run_tune(_config(tmp_path, validate=("distribution:lognormal",)))
    manifest = json.loads((root / "manifest.json").read_text())
    held = set(manifest["validation"]["cases"])
    assert held and all(c.startswith("lognormal:") for c in held)
    assert seen and not held & set(seen)
    rows = pd.read_parquet(root / "measurements.parquet")
    searched = rows[rows["phase"].isin(["trial", "finalist", "baseline"])]
    assert not held & set(searched["case_id"])
    assert held == set(rows[rows["phase"] == "validation"]["case_id"])
    assert set(rows[rows["phase"] == "validation"]["series"]) >= {"tuned", "default", "fa3"}
    summary = json.loads((root / "summary.json").read_text())
    for b in summary["buckets"]:
        v = b["validation"]
        assert v["cases"] >= 1 and v["score_geomean"] > 0 and v["worst"] >= v["score_geomean"] * 0.999
        assert set(v["speedup"]) >= {"fa3"} and {"geomean", "worst"} <= set(v["speedup"]["fa3"])
        # Never ship a regression: what the bucket ships is never slower than the default.
        assert v["vs_default"]["worst"] >= 1 / 1.02


def test_a_runner_up_ships_where_the_winner_defers_on_held_out_cases(tmp_path, monkeypatch):
    """The plumbing of validate_with_runners_up through the tune, the result and the export:
    the verdicts are forced (the winner defers, the first runner-up passes); defer_decision's
    own rules are tested in test_validation."""
    from kvtune.studies import validation_step
    from kvtune.studies.report import format_report

    real = validation_step.validate_bucket
    calls = {}

    def forced(ctx, bucket, train_cases, tuned_policy, recorder, study_name, attempt=0):
        calls[bucket.name] = calls.get(bucket.name, 0) + 1
        assert attempt == calls[bucket.name] - 1
        _, v = real(ctx, bucket, train_cases, tuned_policy, recorder, study_name,
                    attempt=attempt)
        if calls[bucket.name] == 1:
            return "defer", {**v, "deferred": True, "reason": "forced: winner"}
        return "", {**v, "deferred": False, "reason": "forced: runner-up"}

    monkeypatch.setattr(validation_step, "validate_bucket", forced)
    root = run_tune(_config(tmp_path, study="ru", validate=("distribution:lognormal",),
                            finalists=3))
    result = load_tuning_result(root)
    tried = [b for b in result.buckets if calls.get(b.name, 0) > 1]
    kept = [b for b in result.buckets if calls.get(b.name, 0) == 1]
    assert tried, "no bucket had a runner-up that was safe on its training cases"
    doc = export.build_heuristic(result, allow_regression=True)
    report = format_report(result, json.loads((root / "summary.json").read_text()))
    for b in tried:
        runner = b.validation["runner_up"]
        assert calls[b.name] == 2 and runner["position"] == 1
        assert runner["winner_reason"] == "forced: winner" and not b.validation["deferred"]
        assert b.family != "defer"
        chosen = [f for f in b.finalists if f.chosen]
        assert len(chosen) == 1 and chosen[0].params == b.params
        assert chosen[0].family == b.family
        entry = next(e for e in doc["evidence"] if e["name"] == b.name)
        assert entry["validation"]["runner_up"]["label"] == runner["label"]
        assert f"runner-up 1 ships ({runner['label']})" in report
    for b in kept:  # no finalist was safe on the training cases: the winner's verdict stands
        assert b.family == "defer" and "runner_up" not in b.validation
    # The stored validation rows keep each tried finalist apart.
    rows = pd.read_parquet(root / "measurements.parquet")
    validation = rows[rows["phase"] == "validation"]
    for b in tried:
        attempts = validation[validation["bucket"] == b.name]["validation_attempt"]
        assert sorted(attempts.unique()) == [0, 1]


def test_default_validation_holds_out_seeds_and_none_turns_it_off(tmp_path):
    root = run_tune(_config(tmp_path, seeds="0,1,2", study="h"))
    manifest = json.loads((root / "manifest.json").read_text())
    assert "held out seeds 2" in manifest["validation"]["how"]
    assert all(":seed2" in c for c in manifest["validation"]["cases"])
    root = run_tune(_config(tmp_path, validate=("none",), study="n"))
    summary = json.loads((root / "summary.json").read_text())
    assert all(b["validation"]["source"] == "training" for b in summary["buckets"])


def test_export_refuses_a_regressing_bucket_unless_allowed(tmp_path, capsys):
    root = run_tune(_config(tmp_path))
    result = load_tuning_result(root)
    b = result.buckets[0]
    v = dict(b.validation)
    v["case_list"] = [dict(c, chosen_us=c["default_us"] * 1.05, tuned_us=c["default_us"] * 1.05)
                      for c in v["case_list"]]
    bad = replace(result, buckets=(replace(b, family="", validation=v), *result.buckets[1:]))
    with pytest.raises(ValueError, match=f"bucket {b.name}: .*1.050x the engine default"):
        export.build_heuristic(bad)
    doc = export.build_heuristic(bad, allow_regression=True)
    assert doc["allow_regression"] is True and doc["evidence"][0]["regression"]["worst_ratio"] > 1.02
    (root / "tuning.json").write_text(json.dumps(bad.to_dict()))
    capsys.readouterr()
    out = tmp_path / "t.json"
    assert main(["export", "--run", str(root), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "regression" in err and not out.exists()
    assert main(["export", "--run", str(root), "-o", str(out), "--allow-regression"]) == 0


def test_tune_validate_export_then_bench_the_heuristic_on_a_trace_file(tmp_path, capsys):
    trace = tmp_path / "my,trace.csv"  # a comma in the path: tuned:path= must keep it
    rng = np.random.default_rng(3)
    lines = ["context_tokens,output_tokens"] + [f"{int(c)},{int(o)}" for c, o in
                                                zip(rng.integers(100, 60_000, 200), rng.integers(1, 500, 200))]
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results"
    assert main(["tune", "--study", "e2e", "--distribution", "prod-mix", "--batch-sizes", "4,16",
                 "--backend", "simulator", "--device-model", "h200", "--trials", "4",
                 "--sampler", "random", "--finalists", "2", "--finalist-rounds", "1",
                 "--validate", f"trace:{trace}", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "validation on" in text and "trace:" in text
    heuristic = tmp_path / "tuned:a.json"
    assert main(["export", "--study", "e2e", "--storage", f"sqlite:///{out}/optuna.db",
                 "-o", str(heuristic)]) == 0
    doc = json.loads(heuristic.read_text())
    assert doc["schema_version"] == "1.4"
    assert all(e["validation"]["cases"] >= 1 for e in doc["evidence"])
    bench_out = tmp_path / "bench"
    assert main(["bench", "--distribution", "trace", "--param", f"path={trace}", "--batch-sizes",
                 "4,16", "--seeds", "5", "--policies",
                 f"fixed-split:chunk_tokens=4096,tuned:path={heuristic},flashinfer-tensor-core",
                 "--heuristic", str(heuristic), "--backend", "simulator", "--device-model", "h200",
                 "--out", str(bench_out), "--no-progress"]) == 2  # the same file twice
    capsys.readouterr()
    assert main(["bench", "--distribution", "trace", "--param", f"path={trace}", "--batch-sizes",
                 "4,16", "--seeds", "5", "--policies",
                 f"fixed-split:chunk_tokens=4096,tuned:path={heuristic},flashinfer-tensor-core",
                 "--backend", "simulator", "--device-model", "h200", "--out", str(bench_out),
                 "--no-progress"]) == 0
    (run,) = [p for p in bench_out.iterdir() if p.is_dir()]
    rows = pd.read_parquet(run / "measurements.parquet")
    assert list(dict.fromkeys(rows["series"])) == ["fixed-split:chunk_tokens=4096", "tuned:tuned:a",
                                                   "flashinfer-tensor-core"]
    tuned = rows[rows["series"] == "tuned:tuned:a"]
    assert (tuned["heuristic_path"] == str(heuristic)).all()
    import hashlib

    assert (tuned["heuristic_sha256"] == hashlib.sha256(heuristic.read_bytes()).hexdigest()).all()
    assert (rows["status"] == "ok").all()
    assert "tuned:tuned:a" in capsys.readouterr().out


def test_makespan_finalists_run_and_per_batch_buckets_export_their_family_and_knobs(tmp_path):
    from kvtune.studies.finalists import (MAKESPAN_CTAS_PER_SM, MAKESPAN_PIECE_COSTS_TOKENS,
                                          adaptive_candidates)
    from kvtune.studies.space import space_for

    root = run_tune(_config(tmp_path, study="ad", validate=("none",)))
    result = load_tuning_result(root)
    # The grid's candidates, less those that plan the same chunks as an earlier one on the
    # bucket's cases: at least one, never more than the grid; no adaptive one is measured.
    grid = len(MAKESPAN_PIECE_COSTS_TOKENS) * len(MAKESPAN_CTAS_PER_SM)
    assert all(1 <= sum(f.family == "makespan" for f in b.finalists) <= grid
               for b in result.buckets)
    assert not any(f.family == "adaptive" for b in result.buckets for f in b.finalists)
    b = result.buckets[-1]
    makespan = next(f for f in b.finalists if f.family == "makespan")
    adaptive = adaptive_candidates(space_for(H200, SHAPE))[0]  # still a family files may name
    for family, fin, want_policy in (
            ("makespan", makespan, MakespanChunkPolicy(makespan.params, makespan.max_chunk_tokens,
                                                       makespan.piece_cost_tokens)),
            ("adaptive", adaptive, AdaptiveChunkPolicy(adaptive.params, adaptive.max_chunk_tokens))):
        forced = replace(result, buckets=(*result.buckets[:-1], replace(
            b, family=family, params=fin.params, max_chunk_tokens=fin.max_chunk_tokens,
            piece_cost_tokens=fin.piece_cost_tokens)))
        doc = export.build_heuristic(forced)
        entry = doc["buckets"][-1]
        assert entry["family"] == family and entry["max_chunk_tokens"] == fin.max_chunk_tokens
        assert entry.get("piece_cost_tokens") == fin.piece_cost_tokens
        assert doc["targets"]["flashinfer"]["buckets"][-1]["fixed_split_size_pages"] is None
        path = tmp_path / f"{family}.json"
        export.write_heuristic(doc, path)
        policy = export.load_heuristic(path)
        rng = np.random.default_rng(1)
        for _ in range(30):
            kv = rng.integers(1, 150_000, int(rng.integers(b.min_batch, b.max_batch + 1)))
            got = policy.plan(kv, SHAPE, H200)
            want = want_policy.plan(kv, SHAPE, H200)
            assert np.array_equal(got.splits, want.splits)
            assert np.array_equal(tuned_planner.plan_splits(doc, kv, H200.sm_count), got.splits)
            chunk = tuned_planner.fixed_split_size(doc, kv, H200.sm_count)
            assert chunk * SHAPE.page_size == want.notes["chunk_tokens"]


def test_tuned_path_specs_keep_commas_and_colons_of_the_path():
    from kvtune.kernels.policies import names
    from kvtune.kernels.specs import split_policy_specs, tuned_path

    known = set(names())
    text = "fa3,tuned:path=/a:b/c,d.json,fixed-split:chunk_tokens=4096,tuned:path=x.json,no-split"
    specs = split_policy_specs(text, lambda n: n in known)
    assert specs == ["fa3", "tuned:path=/a:b/c,d.json", "fixed-split:chunk_tokens=4096",
                     "tuned:path=x.json", "no-split"]
    assert tuned_path(specs[1]) == "/a:b/c,d.json" and tuned_path("fa3") is None
    with pytest.raises(ValueError, match="tuned:path=FILE"):
        tuned_path("tuned:file=x.json")
    with pytest.raises(ValueError, match="needs a file"):
        tuned_path("tuned:path=")


def test_bench_series_keep_two_variants_of_one_policy_apart(tmp_path, capsys):
    assert main(["bench", "--suite", "smoke", "--policies",
                 "fixed-split:chunk_tokens=512,fixed-split:chunk_tokens=4096", "--backend", "simulator",
                 "--device-model", "h200", "--out", str(tmp_path), "--no-progress"]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rows = pd.read_parquet(run / "measurements.parquet")
    assert set(rows["series"]) == {"fixed-split:chunk_tokens=512", "fixed-split:chunk_tokens=4096"}
    assert set(rows["policy"]) == {"fixed-split"}
    out = capsys.readouterr().out
    assert "fixed-split:chunk_tokens=512" in out and "fixed-split:chunk_tokens=4096" in out
    manifest = json.loads((run / "manifest.json").read_text())
    assert [p["series"] for p in manifest["policies"]] == ["fixed-split:chunk_tokens=512",
                                                           "fixed-split:chunk_tokens=4096"]


def test_tune_with_auto_buckets_stores_the_grid_and_covers_the_suite(tmp_path):
    root = run_tune(_config(tmp_path, study="auto", distribution="skew80", param=("total_tokens=65536",),
                            batch_sizes="2,16,128", buckets="auto", max_buckets=2, adaptive=False,
                            validate=("none",)))
    manifest = json.loads((root / "manifest.json").read_text())
    buckets = manifest["buckets"]
    assert 1 <= len(buckets) <= 2 and buckets[0]["min_batch"] == 1 and buckets[-1]["max_batch"] == 128
    for prev, cur in zip(buckets, buckets[1:]):
        assert cur["min_batch"] == prev["max_batch"] + 1
    rows = pd.read_parquet(root / "measurements.parquet")
    assert len(rows[rows["phase"] == "buckets"]) == 12 * 7  # (3 cases + 3 x 3 stress cases) x (6 chunks + the engine's planner)


def test_families_adaptive_measures_adaptive_finalists_beside_makespan(tmp_path):
    root = run_tune(_config(tmp_path, study="fam", validate=("none",), families="adaptive,makespan"))
    result = load_tuning_result(root)
    measured = {f.family for b in result.buckets for f in b.finalists}
    assert {"adaptive", "makespan"} <= measured
    assert all(f.max_chunk_tokens for b in result.buckets for f in b.finalists
               if f.family == "adaptive")
    none = load_tuning_result(run_tune(_config(tmp_path, study="none", validate=("none",),
                                               families="adaptive", adaptive=False)))
    assert not any(f.family for b in none.buckets for f in b.finalists)


def test_adaptive_candidates_drop_those_that_plan_the_same_chunks():
    from kvtune.studies.finalists import adaptive_candidates
    from kvtune.studies.space import space_for

    space = space_for(H200, SHAPE)
    cases = [SimpleNamespace(batch=SimpleNamespace(kv_lens=np.full(256, 1024), shape=SHAPE))]
    # 256 equal requests spread evenly over every slot count: no candidate splits, one is kept.
    assert len(adaptive_candidates(space, H200, cases)) == 1
    skewed = [SimpleNamespace(batch=SimpleNamespace(kv_lens=np.array([200_000] + [1000] * 15),
                                                    shape=SHAPE))]
    kept = adaptive_candidates(space, H200, skewed)
    chunks = [c.policy().plan(skewed[0].batch.kv_lens, SHAPE, H200).notes["chunk_tokens"]
              for c in kept]
    assert len(kept) > 1 and len(set(chunks)) == len(chunks)
    assert len(adaptive_candidates(space)) == (len(ADAPTIVE_WAVES) * len(ADAPTIVE_CTAS_PER_SM)
                                               * len(ADAPTIVE_MAX_CHUNKS_TOKENS))


def test_adaptive_chunk_keeps_a_balanced_batch_whole_and_fits_a_small_one_in_its_waves():
    from kvtune.kernels.tuned_planner import adaptive_chunk_pages

    slots = 132 * 2
    # 64 equal requests, 8 KV heads: 512 pieces over 264 slots is already even; no split.
    assert adaptive_chunk_pages(np.full(64, 4096), 8, 16, slots, 4, 256, 16384, 256) == 256
    # 34 equal requests: 272 pieces spill 8 into a second wave; split to fill W waves.
    # W = 4 asks for about four pieces per slot: no piece above 1.2 x the even share / 4.
    c = adaptive_chunk_pages(np.full(34, 7712), 8, 16, slots, 4, 256, 16384, 256)
    fair = 34 * 7712 * 8 / slots
    assert c < 7712 // 16 and c * 16 <= np.ceil(1.2 * fair / 4) + 15
    # A small batch of mixed lengths: with W = 1 the chunk is FlashInfer's own (its search with
    # two CTAs per SM and a 128-token minimum), the smallest whose pieces fit one wave.
    kv = np.array([9000, 7000, 12000, 3000, 5000, 8000, 6000, 11000])
    own = FlashInferTensorCorePolicy().plan(kv, SHAPE, H200)
    c1 = adaptive_chunk_pages(kv, 8, 16, slots, 1, 128, 1 << 20, 1024)
    assert c1 == own.notes["chunk_pages"]
    pages = -(-kv // 16)
    assert 8 * int((-(-pages // c1)).sum()) <= slots < 8 * int((-(-pages // (c1 - 1))).sum())
    # One long request beside short ones: FlashInfer's one-wave fit leaves pieces of ~11k
    # tokens where the even share is ~7.9k. With W = 1, pieces of 1.2 x the share would spill 32
    # pieces into a second wave, whose in-order makespan (~12.7k) is longer than the fit's: the
    # fit (FlashInfer's own chunk) stays. With W = 2, 4 no piece is above 1.2 x the share / W.
    kv = np.array([200_000] + [3500] * 15)
    fair = kv.sum() * 8 / slots
    fit = FlashInferTensorCorePolicy().plan(kv, SHAPE, H200).notes["chunk_pages"]
    assert adaptive_chunk_pages(kv, 8, 16, slots, 1, 128, 1 << 20, 1024) == fit
    for waves in (2, 4):
        c = adaptive_chunk_pages(kv, 8, 16, slots, waves, 128, 1 << 20, 1024)
        spread = -(-max(2048, int(np.ceil(1.2 * fair / waves))) // 16)
        assert c <= spread


def test_in_order_makespan_counts_the_second_wave_in_launch_order():
    from kvtune.kernels.tuned_planner import in_order_makespan_tokens

    # 2 slots, 1 head, chunk 4 tokens: pieces in order 4, 4, 2 (request 0), 3 (request 1).
    # The first wave is 4 | 4; the 2 then the 3 take the slot that frees first: 4+2, then 4+3.
    assert in_order_makespan_tokens([10, 3], 1, 1, 4, 2) == 7.0
    # One wave: the longest piece. Two heads repeat the order: 4 4 2 3 4 4 2 3 over 8 slots.
    assert in_order_makespan_tokens([10, 3], 2, 1, 4, 8) == 4.0
    # Pages round the chunk: chunk 1 page of 4 tokens = the first case.
    assert in_order_makespan_tokens([10, 3], 1, 4, 1, 2) == 7.0


def test_adaptive_spreads_a_one_wave_fit_only_when_that_shortens_the_launch():
    """The H200 cases (Triton kernel, graph replays, 2026-11-26) where spreading FlashInfer's
    one-wave fit ran slower (2x40, skew40, skew80 at B=16) keep the fit; at B=32, where the
    fit leaves most of one long request in one piece, the batch is spread (3-8x faster there)."""
    from kvtune.kernels.tuned_planner import adaptive_chunk_pages
    from kvtune.workloads.distributions import sample_kv_lens

    slots = 132 * 2
    for name in ("2x40", "skew40", "skew80"):
        kv = sample_kv_lens(name, 16)
        own = FlashInferTensorCorePolicy().plan(kv, SHAPE, H200).notes["chunk_pages"]
        assert adaptive_chunk_pages(kv, 8, 16, slots, 1, 128, 1 << 20, 256) == own, name
        kv = sample_kv_lens(name, 32)
        own = FlashInferTensorCorePolicy().plan(kv, SHAPE, H200)
        c = adaptive_chunk_pages(kv, 8, 16, slots, 1, 128, 1 << 20, 256)
        assert c * 16 <= 1.2 * kv.sum() * 8 / slots + 16, name
        assert not own.notes.get("split_kv", True) or c < own.notes["chunk_pages"], name


def test_identical_launches_of_tuned_and_default_are_pooled():
    """A tuned rule that launches exactly what the default launches is judged equal to it there:
    the two measurements of one kernel differ by the GPU's noise alone."""
    from kvtune.studies.validation import DEFAULT_LABEL, pool_identical_launches

    lat = {"tuned": {"a": [285.0, 286.0], "b": [300.0, 302.0]},
           DEFAULT_LABEL: {"a": [256.0, 255.0], "b": [250.0, 251.0]}, "fa3": {"a": [280.0]}}
    keys = {"tuned": {"a": {("k", 1)}, "b": {("k", 2)}},
            DEFAULT_LABEL: {"a": {("k", 1)}, "b": {("k", 3)}}}
    pool_identical_launches(lat, keys)
    assert sorted(lat["tuned"]["a"]) == sorted(lat[DEFAULT_LABEL]["a"]) == [255.0, 256.0, 285.0, 286.0]
    assert lat["tuned"]["b"] == [300.0, 302.0] and lat[DEFAULT_LABEL]["b"] == [250.0, 251.0]
    assert lat["fa3"]["a"] == [280.0]
    # A launch that changed between rounds, or an unknown one, is not pooled.
    lat = {"tuned": {"a": [1.0, 2.0]}, DEFAULT_LABEL: {"a": [3.0, 4.0]}}
    pool_identical_launches(lat, {"tuned": {"a": {("k", 1), ("k", 2)}},
                                  DEFAULT_LABEL: {"a": {("k", 1), ("k", 2)}}})
    pool_identical_launches(lat, {"tuned": {"a": {None}}, DEFAULT_LABEL: {"a": {None}}})
    assert lat["tuned"]["a"] == [1.0, 2.0]


def test_launch_key_tells_kernel_configurations_apart():
    from kvtune.harness.fidelity import launch_key

    row = {"splits": [1, 2], "schedule": "static", "grid_size": 24, "page_size": 16,
           "plan_notes": json.dumps({"chunk_tokens": 2048}), "kernel_config": "bn64-w4-s4-pa"}
    assert launch_key(row) == launch_key(dict(row))
    assert launch_key(row) != launch_key({**row, "kernel_config": "bn128-w8-s3-pa"})
    # The same pieces launched longest first are another launch; no order recorded: the plan's.
    assert launch_key(row) != launch_key({**row, "launch_order": "longest-first"})
    assert launch_key(row) == launch_key({**row, "launch_order": "plan"})
    assert launch_key({**row, "splits": None}) is None


def test_launch_key_ignores_the_chunk_of_a_batch_nothing_is_cut_in():
    from kvtune.harness.fidelity import launch_key

    row = {"splits": [1, 1], "schedule": "static", "grid_size": 16, "page_size": 16,
           "plan_notes": json.dumps({"chunk_tokens": 2048}), "kernel_config": "c"}
    default = {**row, "plan_notes": json.dumps({"split_kv": False})}
    assert launch_key(row) == launch_key(default)
    # FlashInfer with split-KV on writes partials and merges even unsplit requests.
    on = {**row, "plan_notes": json.dumps({"chunk_pages": 128, "split_kv": True})}
    assert launch_key(on) != launch_key(default)
    # Once a request is cut, the chunk says where.
    cut = {**row, "splits": [2, 1]}
    assert launch_key(cut) != launch_key({**cut, "plan_notes": json.dumps({"chunk_tokens": 4096})})


def test_makespan_candidates_drop_those_that_plan_the_same_chunks():
    from kvtune.studies.finalists import (MAKESPAN_CTAS_PER_SM, MAKESPAN_PIECE_COSTS_TOKENS,
                                          makespan_candidates)
    from kvtune.studies.space import space_for

    space = space_for(H200, SHAPE)
    even = [SimpleNamespace(batch=SimpleNamespace(kv_lens=np.full(256, 1024), shape=SHAPE))]
    # Short equal requests: every piece cost and slot count keeps them whole: one candidate.
    assert len(makespan_candidates(space, H200, even)) == 1
    every = makespan_candidates(space)
    assert len(every) == len(MAKESPAN_PIECE_COSTS_TOKENS) * len(MAKESPAN_CTAS_PER_SM)
    assert {c.params.ctas_per_sm for c in every} == set(MAKESPAN_CTAS_PER_SM) == {2, 3}
    # A device that runs two programs per SM at most is not modelled with three.
    two = dataclasses.replace(H200, max_ctas_per_sm=2)
    assert {c.params.ctas_per_sm for c in makespan_candidates(space, two, even)} == {2}
    skewed = [SimpleNamespace(batch=SimpleNamespace(
        kv_lens=np.array([190_000, 60_000] + [3000] * 14), shape=SHAPE))]
    kept = makespan_candidates(space, H200, skewed)
    chunks = [c.policy().plan(skewed[0].batch.kv_lens, SHAPE, H200).notes["chunk_tokens"]
              for c in kept]
    assert len(set(chunks)) == len(chunks) >= 1
    assert all(c.family == "makespan" and c.params.ctas_per_sm in (2, 3) for c in kept)


def test_makespan_counting_three_slots_keeps_whole_a_batch_that_fits_one_wave_of_three():
    # 48 requests of 2,000-3,900 tokens x 8 KV heads = 384 tasks whole: the twin's three programs
    # per SM give 396 slots on 132 SMs (one wave), two give 264 (two waves: the rule cuts them).
    # (Requests of one length keep the engine's cut under either count: UNIFORM_SPREAD.)
    from kvtune.studies.finalists import makespan_candidates
    from kvtune.studies.space import space_for

    kv = np.array([3900] * 40 + [2000] * 8)
    case = [SimpleNamespace(batch=SimpleNamespace(kv_lens=kv, shape=SHAPE))]
    by_slots = {}
    for c in makespan_candidates(space_for(H200, SHAPE)):
        if c.piece_cost_tokens == 384:
            chunk = c.policy().plan(kv, SHAPE, H200).notes["chunk_tokens"]
            by_slots[c.params.ctas_per_sm] = chunk
    assert by_slots[3] >= int(kv.max()) > by_slots[2]
    assert len(makespan_candidates(space_for(H200, SHAPE), H200, case)) >= 2


def test_every_per_batch_family_the_config_allows_has_candidates():
    from kvtune.studies.config import PER_BATCH_FAMILIES
    from kvtune.studies.finalists import PER_BATCH_CANDIDATES

    assert set(PER_BATCH_FAMILIES) == set(PER_BATCH_CANDIDATES)

"""kvtune tune --suite hybrid (studies/hybrid_tune.py) on the simulator, and hybrid-tuned."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvtune.harness.bench import BackendSettings
from kvtune.harness.device import device_model
from kvtune.kernels import policies
from kvtune.kernels.hybrid_policies import bucket_key
from kvtune.kernels.plan import AttentionShape
from kvtune.studies.hybrid_tune import HybridTuneSettings, run_hybrid_tune
from kvtune.workloads.selection import CaseSettings


@pytest.fixture(autouse=True)
def _ship_on_any_case_count(monkeypatch):
    """These tests run the search, the check and the split on suites of one or two cases per
    bucket (the simulator, in seconds); the fewest cases a bucket ships on is tested on its own
    (test_a_bucket_ships_on_no_fewer_than_min_ship_cases)."""
    from kvtune.studies import hybrid_validation

    monkeypatch.setattr(hybrid_validation, "MIN_SHIP_CASES", 1)


def _settings(tmp_path, **kw):
    cases = CaseSettings(distribution="hybrid", batch_sizes="8,128",
                         params=("chunk_tokens=512", "context_tokens=4096"))
    return HybridTuneSettings(cases=cases, measure=BackendSettings(backend="simulator",
                                                                   device_model="h100"),
                              trials=kw.pop("trials", 4), out=str(tmp_path), progress=False, **kw)


def test_tune_writes_heuristic_never_worse_than_pod(tmp_path):
    doc = run_hybrid_tune(_settings(tmp_path, validate=("hybrid-holdout",)))
    assert len(doc["buckets"]) == 2  # 8 and 128 decodes fall in different buckets
    assert doc["deferred_buckets"] == []  # the simulator's winners beat serial held out
    for b in doc["buckets"]:
        assert b["score_vs_serial"] <= b["pod_score_vs_serial"]
        assert b["min_prefill_tokens"] <= 512 <= b["max_prefill_tokens"]
        # Checked on held-out cases of its bucket, never on its training cases.
        v = b["validation"]
        assert v["source"] == "validation" and not v["deferred"]
        assert v["cases"] and not {r["case_id"] for r in v["cases"]} & set(b["cases"])
        assert all(r["serial_us"] / r["tuned_us"] >= 1.0 for r in v["cases"])
        assert v["tuned_vs_serial"]["worst"] == min(r["serial_us"] / r["tuned_us"]
                                                    for r in v["cases"])
    overall = doc["validation"]
    assert overall["cases"] == 43  # every hybrid-holdout case, planned serial outside the buckets
    assert overall["shipped_cases"] == sum(len(b["validation"]["cases"]) for b in doc["buckets"])
    s, m = overall["speedup_vs_serial"], overall["shipped_speedup_vs_serial"]
    assert s["worst"] == 1.0 and m["geomean"] > s["geomean"] > 1 and m["worst"] >= 1
    # hybrid-holdout cases in buckets this run did not tune (decode-only ones, among others).
    assert any("chunk_tokens=0" in c for c in overall["outside_tuned_buckets"])
    stored = json.loads(open(doc["path"]).read())
    assert stored["buckets"] == json.loads(json.dumps(doc["buckets"]))
    # Every validation row is stored with the run, interleaved with serial.
    import pandas as pd
    rows = pd.read_parquet(tmp_path / doc["run_id"] / "measurements.parquet")
    val = rows[rows["phase"] == "validation"]
    assert set(val["series"]) == {"tuned", "default"} and set(val["round"]) == {0, 1, 2}
    assert set(rows["phase"]) == {"baseline", "trial", "validation"}
    # The tuned policy plans each bucket's batch with that bucket's params.
    tuned = policies.get("hybrid-tuned", path=doc["path"])
    h100 = device_model("h100")
    shape = AttentionShape()
    q, kv = np.array([1] * 8 + [512]), np.array([4096] * 8 + [4608])
    plan = tuned.plan_hybrid(q, kv, shape, h100)
    b = next(b for b in doc["buckets"] if b["min_decodes"] <= 8 <= b["max_decodes"])
    assert plan.schedule == b["params"]["schedule"]
    assert plan.ctas_per_sm == b["params"]["ctas_per_sm"]
    # Outside every bucket: the engine's own step (serial, FlashInfer's decode rule).
    far = tuned.plan_hybrid(np.array([1] * 300), np.array([100] * 300), shape, h100)
    assert far.schedule == "serial" and far.notes["policy"] == "hybrid-serial"


def test_default_validation_holds_the_hybrid_cases_not_trained_on(tmp_path):
    """By default a winner also faces the hybrid suite's cases it was not tuned on (here the 20K
    contexts beside 8 decodes that hybrid-holdout lacks). Prefill-only held-out cases belong to
    no bucket: they run serial (x1.0 by construction) and are listed as outside the buckets.
    (Before the tenth session they fell in the 0-16 decode bucket, whose 64-row co-location
    tiles lost > 2% on them and deferred the whole bucket.)"""
    doc = run_hybrid_tune(_settings(tmp_path))
    assert doc["validation"]["cases"] == 43 + 124 - 2
    small = next(b for b in doc["buckets"] + doc["deferred_buckets"] if b["min_decodes"] == 1)
    held = {r["case_id"] for r in small["validation"]["cases"]}
    assert any(":B8:" in c and "context_tokens=20480" in c for c in held)
    assert not any("decodes=0" in c for b in doc["buckets"] + doc["deferred_buckets"]
                   for c in (r["case_id"] for r in (b["validation"] or {}).get("cases", [])))
    outside = set(doc["validation"]["outside_tuned_buckets"])
    prefill_only = {c for c in doc_cases(doc) if "decodes=0" in c}
    assert prefill_only and prefill_only <= outside
    assert all(b["validation"]["tuned_vs_serial"]["worst"] >= 1 / 1.02 for b in doc["buckets"])


def doc_cases(doc) -> list:
    """The held-out case ids of a hybrid heuristic's tune (its run's manifest)."""
    manifest = json.loads((Path(doc["path"]).parent / "manifest.json").read_text())
    return [c["case_id"] for c in manifest["validation_cases"]]


def test_a_winner_that_fails_held_out_defers_to_serial(tmp_path, monkeypatch):
    """The search's winner is not shipped where the held-out check says it loses: the bucket
    moves to deferred_buckets with the reason, and hybrid-tuned plans serial there."""
    from kvtune.studies import hybrid_validation

    real = hybrid_validation.validate_bucket

    def slower_on_one_case(runner, cases, tuned, serial, recorder, **kw):
        out = real(runner, cases, tuned, serial, recorder, **kw)
        out["cases"][0]["tuned_us"] = out["cases"][0]["serial_us"] * 1.05
        return {**out, "deferred": True, "reason": "tuned is 1.050x the default's latency"}

    monkeypatch.setattr(hybrid_validation, "validate_bucket", slower_on_one_case)
    doc = run_hybrid_tune(_settings(tmp_path, trials=3, validate=("hybrid-holdout",)))
    assert doc["buckets"] == [] and len(doc["deferred_buckets"]) == 2
    for b in doc["deferred_buckets"]:
        assert "params" not in b and b["tuned_params"]["schedule"]
        assert b["reason"].startswith("tuned is 1.050x")
    # What the file plans on the held-out cases is serial: x1.000 everywhere.
    assert doc["validation"]["speedup_vs_serial"]["geomean"] == pytest.approx(1.0)
    assert doc["validation"]["shipped_cases"] == 0
    tuned = policies.get("hybrid-tuned", path=doc["path"])
    plan = tuned.plan_hybrid(np.array([1] * 8 + [512]), np.array([4096] * 8 + [4608]),
                             AttentionShape(), device_model("h100"))
    assert plan.schedule == "serial"


def test_the_next_best_setting_ships_when_the_winner_fails(tmp_path, monkeypatch):
    """The winner fails its held-out check; the second-best distinct setting of the training
    passes it and ships (finalist_rank 1); every candidate tried is listed under `checked`."""
    from kvtune.studies import hybrid_validation

    real = hybrid_validation.validate_bucket
    seen = []

    def first_fails(runner, cases, tuned, serial, recorder, **kw):
        out = real(runner, cases, tuned, serial, recorder, **kw)
        first = kw["bucket"] not in seen  # the first candidate checked in this bucket
        seen.append(kw["bucket"])
        if first:
            return {**out, "deferred": True, "reason": "tuned is 1.030x the default's latency"}
        return out

    monkeypatch.setattr(hybrid_validation, "validate_bucket", first_fails)
    doc = run_hybrid_tune(_settings(tmp_path, trials=6, validate=("hybrid-holdout",)))
    assert doc["buckets"] and not doc["deferred_buckets"]
    for b in doc["buckets"]:
        assert b["finalist_rank"] == 1 and len(b["checked"]) == 2
        first, second = b["checked"]
        assert first["deferred"] and not second["deferred"]
        assert first["params"] != second["params"] == b["params"]
        assert first["score_vs_serial"] <= second["score_vs_serial"] == b["score_vs_serial"] < 1
    # --finalists 1: the winner alone is checked, so every bucket defers.
    seen.clear()
    doc = run_hybrid_tune(_settings(tmp_path / "one", trials=6, validate=("hybrid-holdout",),
                                    finalists=1))
    assert not doc["buckets"] and all(len(b["checked"]) == 1 for b in doc["deferred_buckets"])


def test_validation_cases_and_the_defer_rule():
    from kvtune.studies.hybrid_validation import validate_bucket, validation_cases
    from kvtune.workloads.suites import get_suite

    shape = AttentionShape()
    quick = {c.case_id for c in get_suite("hybrid-quick").cases}
    held, how = validation_cases((), shape, quick)
    assert len(held) == 43 + 124 - 20 and "hybrid-holdout hybrid" in how
    assert not {c.case_id for c in held} & quick
    # Naming a training suite drops the training cases from it.
    held, _ = validation_cases(("hybrid", "hybrid-holdout"), shape, quick)
    assert len(held) == 124 - 20 + 43
    assert validation_cases(("none",), shape, quick)[0] == []
    for bad in (("prod-mix",), ("none", "hybrid"), ("trace:x",)):
        with pytest.raises(ValueError, match="validate"):
            validation_cases(bad, shape, quick)

    class Row(dict):
        pass

    class FakeRunner:
        """Serial 100 us; the tuned rule 90 us except on `slow`, where it takes `slow_us`."""

        def __init__(self, slow, slow_us):
            self.slow, self.slow_us = slow, slow_us

        def measure_one(self, case, policy, series=None):
            us = 100.0 if series == "default" else (
                self.slow_us if case.case_id == self.slow else 90.0)
            return Row(status="ok", latency_us=us, series=series), None

    class Sink:
        def add(self, row, **kw):
            pass

    class C:
        def __init__(self, cid):
            self.case_id = cid

    cases = [C("a"), C("b"), C("c")]
    ok = validate_bucket(FakeRunner("c", 90.0), cases, None, None, Sink(), study="s",
                         bucket="b", rounds=2, source="validation")
    assert not ok["deferred"] and ok["tuned_vs_serial"]["geomean"] == pytest.approx(100 / 90)
    # 3% slower than serial on one case (allowed: 2% + noise 0): deferred, though the geomean
    # gains.
    bad = validate_bucket(FakeRunner("c", 103.0), cases, None, None, Sink(), study="s",
                          bucket="b", rounds=2, source="validation")
    assert bad["deferred"] and "1.030x" in bad["reason"]
    assert bad["tuned_vs_serial"]["worst"] == pytest.approx(100 / 103)


def test_bucket_key_and_bad_inputs(tmp_path):
    assert bucket_key(8, 512) == (1, 16, 1, 1024)
    assert bucket_key(1, 0) == (1, 16, 0, 0)
    assert bucket_key(0, 512) is None  # prefill only: no bucket, the engine's prefill launch
    assert bucket_key(300, 0) == (257, 1 << 16, 0, 0)
    with pytest.raises(ValueError, match="trials"):
        _settings(tmp_path, trials=0)
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "other"}')
    with pytest.raises(ValueError, match="path"):
        policies.get("hybrid-tuned", path=str(bad))


def test_cli_refuses_split_study_options(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kvtune", "tune", "--study", "s", "--suite",
                           "hybrid", "--oracle", "--backend", "simulator"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--oracle" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kvtune", "tune", "--study", "s", "--suite",
                           "hybrid-quick", "--validate", "prod-mix", "--backend", "simulator",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "validate" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_a_stopped_tune_keeps_its_decided_buckets_and_resume_searches_only_the_rest(
        tmp_path, monkeypatch):
    """After each bucket the tune writes hybrid_heuristic.partial.json; a run that dies in its
    second bucket leaves the first decided, and --resume reuses it (no trial of it measured
    again) and searches the second."""
    import pandas as pd

    from kvtune.studies import hybrid_tune

    real = hybrid_tune._search_bucket
    calls = []

    def dies_in_the_second(key, *a, **kw):
        calls.append(key)
        if len(calls) == 2:
            raise RuntimeError("stopped")
        return real(key, *a, **kw)

    monkeypatch.setattr(hybrid_tune, "_search_bucket", dies_in_the_second)
    settings = _settings(tmp_path, validate=("hybrid-holdout",))
    with pytest.raises(RuntimeError, match="stopped"):
        run_hybrid_tune(settings)
    partial = next(tmp_path.glob("*/hybrid_heuristic.partial.json"))
    first = json.loads(partial.read_text())
    decided = first["buckets"] + first["deferred_buckets"]
    assert len(decided) == 1 and len(first["unfinished_buckets"]) == 1
    monkeypatch.setattr(hybrid_tune, "_search_bucket", real)
    doc = run_hybrid_tune(_settings(tmp_path, validate=("hybrid-holdout",), resume=True))
    assert doc["resumed_from"] == str(partial)
    assert len(doc["buckets"] + doc["deferred_buckets"]) == 2
    kept = decided[0]
    assert kept in doc["buckets"] + doc["deferred_buckets"]
    rows = pd.read_parquet(Path(doc["path"]).parent / "measurements.parquet")
    kept_name = (f"decodes {kept['min_decodes']}-{kept['max_decodes']}, prefill "
                 f"{kept['min_prefill_tokens']}-{kept['max_prefill_tokens']}")
    assert kept_name not in set(rows["bucket"])  # nothing of the kept bucket measured again
    assert not list(Path(doc["path"]).parent.glob("hybrid_heuristic.partial.json"))


def test_resume_keeps_only_decisions_made_on_the_same_device_and_backend(tmp_path):
    """A bucket decided on one card is no decision for another: earlier_decisions skips files of
    another device name or backend (a resumed GPU tune that got an H200 after an H100 once mixed
    both in one file)."""
    from kvtune.kernels.plan import AttentionShape
    from kvtune.studies.hybrid_tune import HYBRID_SCHEMA, earlier_decisions

    shape = AttentionShape()
    bucket = {"min_decodes": 1, "max_decodes": 16, "min_prefill_tokens": 1,
              "max_prefill_tokens": 1024}
    for run, device, backend in (("20261127-1", "NVIDIA H100 80GB HBM3", "triton"),
                                 ("20261127-2", "NVIDIA H200", "triton")):
        (tmp_path / run).mkdir()
        (tmp_path / run / "hybrid_heuristic.partial.json").write_text(json.dumps(
            {"schema": HYBRID_SCHEMA, "study": "s", "run_id": run, "shape": shape.to_dict(),
             "device": {"name": device}, "backend": backend, "buckets": [bucket],
             "deferred_buckets": []}))
    newest = earlier_decisions(str(tmp_path), "s", shape)[1]
    assert newest.endswith("20261127-2/hybrid_heuristic.partial.json")
    h100 = earlier_decisions(str(tmp_path), "s", shape, "NVIDIA H100 80GB HBM3", "triton")
    assert h100[1].endswith("20261127-1/hybrid_heuristic.partial.json") and len(h100[0]) == 1
    assert earlier_decisions(str(tmp_path), "s", shape, "NVIDIA H100 80GB HBM3",
                             "simulator") == ({}, None)
    assert earlier_decisions(str(tmp_path), "s", shape, "NVIDIA A100", "triton") == ({}, None)


def test_split_failing_replaces_a_failed_bucket_by_its_decided_halves(tmp_path, monkeypatch):
    """--split-failing: every finalist fails its held-out check (here: 5% slower up to the split
    edge, 20% faster past it), so each bucket is split once by prefill tokens and each half
    decided on its own held-out rows; a resumed run keeps the halves."""
    from kvtune.studies import hybrid_validation

    def long_chunks_lose(runner, cases, tuned, serial, recorder, **kw):
        edge = 512  # hybrid_validation.split_edge of the 1-1024-token buckets
        rows = [{"case_id": c.case_id, "serial_us": 100.0,
                 "tuned_us": 105.0 if c.batch.prefill_tokens <= edge else 80.0} for c in cases]
        return {"deferred": True, "reason": "tuned is 1.050x the default's latency on one case",
                "source": kw["source"], "noise": 0.001, "cases": rows,
                "tuned_vs_serial": {"geomean": 1.0, "worst": 100 / 105}}

    monkeypatch.setattr(hybrid_validation, "validate_bucket", long_chunks_lose)
    doc = run_hybrid_tune(_settings(tmp_path, trials=3, validate=("hybrid-holdout",),
                                    split_failing=True, finalists=1))
    entries = doc["buckets"] + doc["deferred_buckets"]
    assert entries and all(e["split_from"] == [1, 1024] for e in entries)
    assert doc["buckets"] and doc["deferred_buckets"]  # both outcomes occur
    assert sorted((e["min_decodes"], e["min_prefill_tokens"]) for e in entries) == [
        (1, 1), (1, 513), (65, 1), (65, 513)]
    for e in entries:
        speeds = {r["tuned_us"] for r in e["validation"]["cases"]}
        if e in doc["buckets"]:  # ships only where every held-out case of the half won
            assert speeds == {80.0} and e["params"]["schedule"]
        else:
            assert not speeds or 105.0 in speeds
            assert "params" not in e and e["tuned_params"]["schedule"]
    # --resume keeps the halves of each searched bucket, searching nothing again.
    again = run_hybrid_tune(_settings(tmp_path, trials=3, validate=("hybrid-holdout",),
                                      split_failing=True, finalists=1, resume=True))
    key = ("min_decodes", "min_prefill_tokens", "max_prefill_tokens")
    assert sorted(tuple(e[k] for k in key) for e in again["buckets"] + again["deferred_buckets"]) \
        == sorted(tuple(e[k] for k in key) for e in entries)


def test_serial_fallback_ships_a_failing_half_as_a_serial_step(tmp_path, monkeypatch):
    """--split-failing --serial-fallback: every co-located finalist fails (5% slower past the
    split edge), so each bucket is split; the half that defers on its own held-out rows is
    measured as a serial step with the finalist's decode knobs, which passes here, and ships
    with `fallback_from`; a half no held-out case falls in defers with nothing measured."""
    from kvtune.studies import hybrid_validation

    calls = []

    def colocated_loses_long_chunks(runner, cases, tuned, serial, recorder, **kw):
        fallback = kw["bucket"].endswith("/serial-fallback")
        calls.append((kw["bucket"], tuned.schedule, len(cases)))
        assert fallback == (tuned.schedule == "serial")
        rows = [{"case_id": c.case_id, "serial_us": 100.0,
                 "tuned_us": 95.0 if fallback else
                 (105.0 if c.batch.prefill_tokens > 512 else 80.0)} for c in cases]
        return {"deferred": not fallback, "reason": "ok" if fallback else "1.050x on one case",
                "source": kw["source"], "noise": 0.001, "cases": rows,
                "tuned_vs_serial": {"geomean": 1.0, "worst": 100 / 105}}

    monkeypatch.setattr(hybrid_validation, "validate_bucket", colocated_loses_long_chunks)
    doc = run_hybrid_tune(_settings(tmp_path, trials=3, validate=("hybrid-holdout",),
                                    split_failing=True, serial_fallback=True, finalists=1))
    shipped = {(e["min_decodes"], e["min_prefill_tokens"]): e for e in doc["buckets"]}
    deferred = {(e["min_decodes"], e["min_prefill_tokens"]): e for e in doc["deferred_buckets"]}
    assert sorted(shipped) == [(1, 513), (65, 513)] and sorted(deferred) == [(1, 1), (65, 1)]
    for e in shipped.values():  # the co-located knobs lost there; the serial fallback ships
        assert e["split_from"] == [1, 1024] and e["params"]["schedule"] == "serial"
        assert e["params"] == hybrid_validation.serial_fallback_knobs(
            e["fallback_from"]["params"])
        assert e["fallback_from"]["params"]["schedule"] != "serial"
        assert {r["tuned_us"] for r in e["validation"]["cases"]} == {95.0}
    for e in deferred.values():  # no held-out case: nothing to measure, no fallback
        assert "serial_fallback" not in e and not e["validation"]["cases"]
    fallback_calls = [c for c in calls if c[0].endswith("/serial-fallback")]
    assert len(fallback_calls) == 2 and all(n > 0 for _, _, n in fallback_calls)
    # The tuned planner runs such a batch as a serial step.
    tuned = policies.get("hybrid-tuned", path=doc["path"])
    plan = tuned.plan_hybrid(np.array([1] * 128 + [900]), np.array([4096] * 128 + [4996]),
                             AttentionShape(), device_model("h100"))
    assert plan.schedule == "serial" and plan.prefill_block_m == 128


def test_a_bucket_ships_on_no_fewer_than_min_ship_cases(monkeypatch):
    """A bucket measured on fewer than MIN_SHIP_CASES cases defers even where it wins on each;
    from MIN_SHIP_CASES on, the rule of studies/validation.py decides (here: it ships); a loss
    beyond the regression limit defers whatever the count."""
    from types import SimpleNamespace

    from kvtune.studies import hybrid_validation as hv
    from kvtune.studies.validation import DEFAULT_LABEL

    monkeypatch.undo()  # the module's own minimum, not the fixture's
    n = hv.MIN_SHIP_CASES
    assert n >= 3

    def decide(tuned_us):
        cases = [SimpleNamespace(case_id=f"c{i}") for i in range(len(tuned_us))]
        case_us = {"tuned": {c.case_id: t for c, t in zip(cases, tuned_us)},
                   DEFAULT_LABEL: {c.case_id: 100.0 for c in cases}}
        return hv.bucket_defer_decision(cases, case_us, 0.001)

    deferred, reason = decide([80.0] * (n - 1))
    assert deferred and f"only {n - 1} measured case(s), at least {n} to ship" in reason
    deferred, reason = decide([80.0] * n)
    assert not deferred and "beats the default" in reason
    assert decide([80.0] * n + [110.0])[0]  # 1.10x serial's latency on one case
    # The halves of a split bucket are held to the same minimum.
    entry = {"min_decodes": 1, "max_decodes": 16, "min_prefill_tokens": 1025,
             "max_prefill_tokens": 4096, "params": {}}
    cases = [SimpleNamespace(case_id=f"lo{i}", batch=SimpleNamespace(num_decodes=8,
                                                                     prefill_tokens=1536))
             for i in range(n)] + [SimpleNamespace(case_id="hi0", batch=SimpleNamespace(
                 num_decodes=8, prefill_tokens=3072))]
    verdict = {"noise": 0.001, "source": "validation",
               "cases": [{"case_id": c.case_id, "tuned_us": 80.0, "serial_us": 100.0}
                         for c in cases]}
    (lo, lo_v), (hi, hi_v) = hv.split_verdicts(entry, verdict, cases)
    assert (lo["max_prefill_tokens"], hi["min_prefill_tokens"]) == (2048, 2049)
    assert not lo_v["deferred"] and hi_v["deferred"] and "only 1 measured" in hi_v["reason"]

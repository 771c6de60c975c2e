"""kvtune tune --revalidate (studies/hybrid_revalidate.py) on the simulator: a finished hybrid
file's shipped buckets measured again against the serial step, without a search."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvtune.harness.bench import BackendSettings
from kvtune.kernels import policies
from kvtune.studies import hybrid_revalidate as rv
from kvtune.studies import hybrid_validation as hv
from kvtune.studies.hybrid_tune import HybridTuneSettings

H100_FILE = (Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_calls"
             / "s13_hybrid_heuristic_h100.json")


def _file(tmp_path, **changes) -> Path:
    """The thirteenth session's H100 file as if tuned on the simulator's h100 model."""
    doc = json.loads(H100_FILE.read_text())
    doc["device"]["name"], doc["backend"] = "h100", "simulator"
    doc.update(changes)
    path = tmp_path / "file.json"
    path.write_text(json.dumps(doc))
    return path


def _settings(tmp_path, **kw):
    return HybridTuneSettings(measure=BackendSettings(backend="simulator", device_model="h100"),
                              out=str(tmp_path / "out"), progress=False, study="reval",
                              finalist_rounds=1, **kw)


def test_revalidation_measures_each_shipped_bucket_on_its_recorded_cases(tmp_path):
    path = _file(tmp_path)
    before = path.read_text()
    doc = rv.run_hybrid_revalidation(str(path), _settings(tmp_path))
    assert path.read_text() == before  # the file given is never changed
    old = json.loads(before)
    assert doc["study"] == "reval" and doc["revalidated_from"]["path"] == str(path)
    assert doc["revalidated_from"]["run_id"] == old["run_id"] != doc["run_id"]
    assert Path(doc["path"]).is_file() and not list(Path(doc["path"]).parent.glob("*.partial*"))
    # The simulator's h100 model: both colocated buckets still beat serial, so both ship.
    assert len(doc["buckets"]) == 2
    for new, was in zip(doc["buckets"], old["buckets"]):
        assert new["params"] == was["params"] and new["revalidated"] is True
        v = new["validation"]
        assert v["source"] == "revalidation" and not v["deferred"]
        assert [r["case_id"] for r in v["cases"]] == [r["case_id"]
                                                     for r in was["validation"]["cases"]]
        assert v["tuned_vs_serial"]["worst"] == min(r["serial_us"] / r["tuned_us"]
                                                    for r in v["cases"])
    # Buckets the file deferred stay deferred, untouched.
    assert doc["deferred_buckets"] == old["deferred_buckets"]
    assert doc["validation"]["shipped_cases"] == sum(len(b["validation"]["cases"])
                                                     for b in old["buckets"])
    # The new file plans like any tuned hybrid file.
    tuned = policies.get("hybrid-tuned", path=doc["path"])
    assert tuned is not None


def test_given_suites_replace_the_recorded_cases(tmp_path):
    doc = rv.run_hybrid_revalidation(str(_file(tmp_path)),
                                     _settings(tmp_path, validate=("hybrid-holdout",)))
    from kvtune.kernels.plan import AttentionShape
    from kvtune.workloads.suites import get_suite

    shape = AttentionShape(**doc["shape"])
    held = get_suite("hybrid-holdout", shape=shape).cases
    for b in doc["buckets"] + [d for d in doc["deferred_buckets"] if d.get("revalidated")]:
        want = [c.case_id for c in held if hv.in_bucket(hv.bucket_key(b), c.batch())]
        assert [r["case_id"] for r in b["validation"]["cases"]] == want
        # The 3072-token chunks reach the upper half of the 1025-4096-token buckets.
        assert any("chunk_tokens=3072" in cid for cid in want)
    assert "possibly" in doc["validation"]["how"]


def test_a_bucket_that_no_longer_beats_serial_defers(tmp_path, monkeypatch):
    def failing(runner, cases, tuned, serial, recorder, **kw):
        assert kw["source"] == "revalidation" and cases
        return {"deferred": True, "reason": "tuned is 1.025x the default's latency on one case",
                "source": "revalidation", "noise": 0.0,
                "cases": [{"case_id": c.case_id, "tuned_us": 1.025, "serial_us": 1.0}
                          for c in cases],
                "tuned_vs_serial": {"geomean": 1 / 1.025, "worst": 1 / 1.025}}

    monkeypatch.setattr(rv, "validate_bucket", failing)
    old = json.loads(_file(tmp_path).read_text())
    doc = rv.run_hybrid_revalidation(str(tmp_path / "file.json"), _settings(tmp_path))
    assert doc["buckets"] == []
    new = doc["deferred_buckets"][len(old["deferred_buckets"]):]
    assert [n["tuned_params"] for n in new] == [b["params"] for b in old["buckets"]]
    assert all("params" not in n and n["reason"].startswith("revalidation: ") for n in new)
    # Every batch now plans as the serial step.
    assert doc["validation"]["speedup_vs_serial"]["geomean"] == 1.0
    tuned = policies.get("hybrid-tuned", path=doc["path"])
    serial = policies.get("hybrid-serial")
    from kvtune.harness.device import device_model
    from kvtune.kernels.plan import AttentionShape
    from kvtune.workloads.hybrid import HybridCase

    shape = AttentionShape(**doc["shape"])
    batch = HybridCase({"context_tokens": 4096, "chunk_tokens": 2048}, 32, shape).batch()
    dev = device_model("h100")
    a = tuned.plan_hybrid(batch.q_lens, batch.kv_lens, shape, dev)
    b = serial.plan_hybrid(batch.q_lens, batch.kv_lens, shape, dev)
    assert a.schedule == b.schedule == "serial"


def test_bad_files_and_another_card_are_refused(tmp_path):
    with pytest.raises(ValueError, match="tuned on h200"):
        rv.run_hybrid_revalidation(str(_file(tmp_path, device={"name": "h200"})),
                                   _settings(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "kvtune-heuristic/1.3"}))
    with pytest.raises(ValueError, match="revalidate: .* is not a kvtune-hybrid-heuristic"):
        rv.run_hybrid_revalidation(str(bad), _settings(tmp_path))
    with pytest.raises(ValueError, match="revalidate: cannot read"):
        rv.run_hybrid_revalidation(str(tmp_path / "missing.json"), _settings(tmp_path))
    doc = json.loads(_file(tmp_path).read_text())
    doc["buckets"][0]["validation"]["cases"][0]["case_id"] = "hybrid:B7:seed9"
    (tmp_path / "foreign.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="hybrid:B7:seed9.*--validate"):
        rv.run_hybrid_revalidation(str(tmp_path / "foreign.json"), _settings(tmp_path))


def test_cli_revalidates_and_refuses_case_options(tmp_path):
    path = _file(tmp_path)
    base = [sys.executable, "-m", "kvtune", "tune", "--study", "reval", "--revalidate",
            str(path), "--backend", "simulator", "--device-model", "h100", "--out",
            str(tmp_path / "cli")]
    bad = subprocess.run(base + ["--suite", "hybrid"], capture_output=True, text=True)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "--suite is not used when re-validating" in lines[0]
    ok = subprocess.run(base + ["--finalist-rounds", "1"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "ships" in ok.stdout and "re-validated (32 cases" in ok.stdout


def test_split_edge_is_fixed_by_the_bucket_alone():
    def b(lo, hi):
        return {"min_prefill_tokens": lo, "max_prefill_tokens": hi}
    assert hv.split_edge(b(1025, 4096)) == 2048
    assert hv.split_edge(b(1, 1024)) == 512
    assert hv.split_edge(b(2049, 4096)) is None  # 2048 is below the bucket: no split
    assert hv.split_edge(b(1, 1)) is None


def test_split_failing_ships_the_half_that_still_wins(tmp_path, monkeypatch):
    """--split-failing: the failing bucket's halves are decided on their own cases' rows of the
    same measurement; a half whose cases all beat serial ships, the other defers."""
    def long_chunks_lose(runner, cases, tuned, serial, recorder, **kw):
        rows = [{"case_id": c.case_id, "serial_us": 100.0,
                 "tuned_us": 105.0 if c.batch.prefill_tokens > 2048 else 80.0} for c in cases]
        return {"deferred": True, "reason": "tuned is 1.050x the default's latency on one case",
                "source": "revalidation", "noise": 0.001, "cases": rows,
                "tuned_vs_serial": {"geomean": 1.1, "worst": 100 / 105}}

    monkeypatch.setattr(rv, "validate_bucket", long_chunks_lose)
    path = _file(tmp_path)
    doc = rv.run_hybrid_revalidation(str(path), _settings(
        tmp_path, validate=("hybrid-holdout", "hybrid"), split_failing=True))
    shipped = {(b["min_decodes"], b["min_prefill_tokens"], b["max_prefill_tokens"])
               for b in doc["buckets"]}
    assert shipped == {(17, 1025, 2048), (65, 1025, 2048)}
    for b in doc["buckets"]:
        assert b["split_from"] == [1025, 4096] and b["revalidated"]
        assert all(r["tuned_us"] == 80.0 for r in b["validation"]["cases"])
        assert b["validation"]["cases"]
    upper = [b for b in doc["deferred_buckets"] if b.get("split_from")]
    assert {(b["min_decodes"], b["min_prefill_tokens"]) for b in upper} == {(17, 2049), (65, 2049)}
    assert all(b["reason"].startswith("revalidation: ") and "tuned_params" in b for b in upper)
    # The tuned planner takes the half that ships and leaves the other to serial.
    from kvtune.kernels.plan import AttentionShape
    from kvtune.kernels.policies import get
    from kvtune.harness.device import device_model
    from kvtune.workloads.hybrid import HybridCase

    shape = AttentionShape(**doc["shape"])
    tuned = get("hybrid-tuned", path=doc["path"])
    for chunk, schedule in ((2048, "colocated"), (3072, "serial")):
        batch = HybridCase({"context_tokens": 6144, "chunk_tokens": chunk}, 48, shape).batch()
        plan = tuned.plan_hybrid(batch.q_lens, batch.kv_lens, shape, device_model("h100"))
        assert plan.schedule == schedule, chunk


def test_split_failing_is_refused_outside_hybrid_knobs(tmp_path):
    res = subprocess.run([sys.executable, "-m", "kvtune", "tune", "--study", "x", "--suite",
                          "smoke", "--split-failing", "--backend", "simulator", "--out",
                          str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--split-failing" in lines[0]


def test_split_revalidated_reproduces_the_h100_split_file(tmp_path):
    """benchmarks/split_revalidated.py on the re-validated H100 file (call 4's measurements in
    it) gives the file timed in the twentieth session's call 6."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "split.json"
    res = subprocess.run([sys.executable, str(root / "benchmarks" / "split_revalidated.py"),
                          str(root / "benchmarks/gpu_calls/s20_hybrid_heuristic_h100.json"),
                          str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    made = json.loads(out.read_text())
    kept = json.loads((root / "benchmarks/gpu_calls/s20_hybrid_heuristic_h100_split.json")
                      .read_text())
    key = ("min_decodes", "max_decodes", "min_prefill_tokens", "max_prefill_tokens")
    for name in ("buckets", "deferred_buckets"):
        assert [[b[k] for k in key] for b in made[name]] == [[b[k] for k in key]
                                                             for b in kept[name]]
    assert [[b[k] for k in key] for b in made["buckets"]] == [[65, 256, 1025, 4096],
                                                            [17, 64, 1025, 2048]]


SPLIT_FILE = H100_FILE.with_name("s20_hybrid_heuristic_h100_split.json")


def test_serial_fallback_knobs_keep_only_the_decode_split():
    doc = json.loads(SPLIT_FILE.read_text())
    knobs = doc["deferred_buckets"][2]["tuned_params"]  # 17-64 decodes, 1-1024 tokens
    assert knobs["schedule"] == "colocated" and knobs["prefill_block_m"] == 64
    fb = hv.serial_fallback_knobs(knobs)
    assert {k: fb[k] for k in hv.SERIAL_PREFILL_KNOBS} == hv.SERIAL_PREFILL_KNOBS
    assert fb["decode_family"] == "makespan" and fb["piece_cost_tokens"] is None
    for k in ("min_tokens_per_cta", "max_waves", "max_splits", "decode_schedule",
              "decode_ahead"):
        assert fb[k] == knobs[k]
    assert hv.serial_fallback_knobs(fb) is None  # already a serial step
    # The fallback's prefill launch is hybrid-serial's: same tiles and splits.
    from kvtune.harness.device import device_model
    from kvtune.kernels.plan import AttentionShape
    from kvtune.workloads.hybrid import HybridCase

    shape = AttentionShape(**doc["shape"])
    batch = HybridCase({"context_tokens": 8192, "chunk_tokens": 768}, 40, shape).batch()
    dev = device_model("h100")
    a = policies.get("hybrid-parametric", **fb).plan_hybrid(batch.q_lens, batch.kv_lens, shape,
                                                            dev)
    b = policies.get("hybrid-serial").plan_hybrid(batch.q_lens, batch.kv_lens, shape, dev)
    assert a.schedule == b.schedule == "serial"
    for field in ("tile_request", "tile_q_start", "tile_q_end", "tile_splits"):
        assert (getattr(a, field) == getattr(b, field)).all(), field


H200_FILE = H100_FILE.with_name("s30_hybrid_heuristic_h200_longest_first.json")
# The thirtieth session's re-validation stopped at its time limit (call 2) and went on from its
# partial file (call 3, --keep-shipped); that partial was written before partial files named
# their source, so it carries the twenty-first file's own "revalidated_from".
H200_PARTIAL = H100_FILE.with_name("s30_hybrid_heuristic_h200_partial.json")


def test_makespan_fallbacks_cut_uniform_decodes_as_the_engine_and_split_skewed_ones():
    """The serial fallbacks the README's H200 file ships (twenty-eighth session: decodes under
    the makespan rule) plan the decodes of each sweep step of the hybrid suite (uniform decodes,
    where fallbacks of other cuts ran 2-4.5% slower than serial on an H200) exactly as
    hybrid-serial, and split a continuous-batching step's long decodes more finely than the
    engine, the steps where they win."""
    from kvtune.harness.device import device_model
    from kvtune.kernels.plan import AttentionShape
    from kvtune.workloads.hybrid import hybrid_cases

    doc = json.loads(H200_FILE.read_text())
    shape, dev = AttentionShape(**doc["shape"]), device_model("h200")
    serial = policies.get("hybrid-serial")
    fallbacks = [policies.get("hybrid-parametric", **b["params"]) for b in doc["buckets"]
                 if "fallback_from" in b]
    assert len(fallbacks) == 6
    finer = 0
    for case in hybrid_cases(shape):
        q, kv = case.lengths()
        want = serial.plan_hybrid(q, kv, shape, dev).decode_plan
        for fb in fallbacks:
            got = fb.plan_hybrid(q, kv, shape, dev).decode_plan
            if want is None:  # a prefill-only step
                assert got is None, case.case_id
            elif case.params["source"] == "sweep":
                assert (got.splits == want.splits).all(), case.case_id
            elif got.num_tasks > want.num_tasks:
                finer += 1
    assert finer >= len(fallbacks) * 8


def _h200_revalidated_buckets(doc: dict) -> list[tuple]:
    """The bucket ranges of an H200 file re-validated from the twenty-first session's (directly
    or through the thirtieth session's partial file of it) on hybrid-holdout and the hybrid
    suite, after checking that every shipped bucket was measured on at least MIN_SHIP_CASES
    cases against the serial step and is never more than 2% slower on one of them."""
    assert doc["device"]["name"] == "NVIDIA H200"
    source = doc["revalidated_from"]["path"]
    if source.endswith(H200_PARTIAL.name):
        partial = json.loads(H200_PARTIAL.read_text())
        assert doc["revalidated_from"]["run_id"] == partial["run_id"]
        assert partial["unfinished_buckets"] == [] and partial["study"] == doc["study"]
    else:
        assert source.endswith("s21_hybrid_heuristic_h200_revalidated.json")
    assert "--validate hybrid-holdout --validate hybrid" in doc["revalidated_from"]["command"]
    for b in doc["buckets"]:
        v = b["validation"]
        assert not v["deferred"] and v["source"] == "revalidation"
        assert len(v["cases"]) >= hv.MIN_SHIP_CASES
        assert min(r["serial_us"] / r["tuned_us"] for r in v["cases"]) >= 1 / 1.02
    return [(b["min_decodes"], b["max_decodes"], b["min_prefill_tokens"], b["max_prefill_tokens"])
            for b in doc["buckets"]]


def test_the_readme_h200_file_ships_makespan_fallbacks_on_four_cases_or_more():
    """The README's H200 file (thirtieth session: the twenty-first's re-validated with
    --serial-fallback on hybrid-holdout and the hybrid suite, fallbacks under the makespan
    rule, every step's decodes launched longest first): every shipped bucket was measured on at
    least MIN_SHIP_CASES cases against the serial step and is never more than 2% slower on one
    of them; each fallback is serial_fallback_knobs of the knobs it replaces. The colocated
    bucket it shipped before defers (2.8% slower than serial on one case)."""
    doc = json.loads(H200_FILE.read_text())
    assert _h200_revalidated_buckets(doc) == [(17, 64, 1, 1024), (65, 256, 1, 1024),
                                              (17, 64, 1025, 2048), (17, 64, 2049, 4096),
                                              (65, 256, 2049, 4096), (65, 256, 1025, 2048)]
    assert all("fallback_from" in b for b in doc["buckets"])
    for b in doc["buckets"]:
        if "fallback_from" in b:
            assert b["params"] == hv.serial_fallback_knobs(b["fallback_from"]["params"])
            assert b["params"]["decode_family"] == "makespan"
    assert policies.get("hybrid-tuned", path=str(H200_FILE)) is not None


def test_serial_fallback_ships_deferred_buckets_that_win_by_their_decode_split(tmp_path,
                                                                               monkeypatch):
    """--serial-fallback --keep-shipped: the file's shipped buckets stay as they are, unmeasured;
    each deferred bucket is measured once as a serial step with its decode knobs and ships where
    that passes (here: every bucket of 17+ decodes), else stays deferred with the verdict."""
    seen = []

    def serial_wins_from_17(runner, cases, tuned, serial, recorder, **kw):
        assert tuned.schedule == "serial" and kw["bucket"].endswith("/serial-fallback")
        seen.append(kw["bucket"])
        win = min(c.batch.num_decodes for c in cases) >= 17
        rows = [{"case_id": c.case_id, "serial_us": 100.0, "tuned_us": 80.0 if win else 101.0}
                for c in cases]
        return {"deferred": not win, "reason": "ok" if win else "not above the noise",
                "source": "revalidation", "noise": 0.001, "cases": rows,
                "tuned_vs_serial": {"geomean": 1.25 if win else 100 / 101,
                                    "worst": 1.25 if win else 100 / 101}}

    monkeypatch.setattr(hv, "validate_bucket", serial_wins_from_17)
    doc = json.loads(SPLIT_FILE.read_text())
    doc["device"]["name"], doc["backend"] = "h100", "simulator"
    path = tmp_path / "split.json"
    path.write_text(json.dumps(doc))
    out = rv.run_hybrid_revalidation(str(path), _settings(tmp_path, serial_fallback=True,
                                                          keep_shipped=True))
    key = ("min_decodes", "max_decodes", "min_prefill_tokens", "max_prefill_tokens")
    names = lambda bs: [tuple(b[k] for k in key) for b in bs]  # noqa: E731
    # The 1-16 / 1025-4096 bucket has no recorded case: not measured, still deferred.
    assert len(seen) == 4
    assert names(out["buckets"][:2]) == names(doc["buckets"])
    assert out["buckets"][:2] == doc["buckets"]  # kept, unmeasured
    fell_back = out["buckets"][2:]
    assert names(fell_back) == [(17, 64, 1, 1024), (65, 256, 1, 1024), (17, 64, 2049, 4096)]
    for b in fell_back:
        assert b["params"]["schedule"] == "serial" and b["fallback_from"]["params"][
            "schedule"] == "colocated" and not b["validation"]["deferred"] and b["revalidated"]
        assert b["params"] == hv.serial_fallback_knobs(b["fallback_from"]["params"])
        assert "score_vs_serial" not in b and "score_vs_serial" in b["fallback_from"]
    assert names(out["deferred_buckets"]) == [(1, 16, 1, 1024), (1, 16, 1025, 4096)]
    small = out["deferred_buckets"][0]
    assert small["serial_fallback"]["validation"]["deferred"] and "tuned_params" in small
    assert "serial_fallback" not in out["deferred_buckets"][1]
    assert not set(names(out["buckets"])) & set(names(out["deferred_buckets"]))
    # The summary counts this run's measurements only: the kept buckets' rows are older.
    fb_ids = {r["case_id"] for b in fell_back for r in b["validation"]["cases"]}
    assert out["validation"]["shipped_cases"] == len(fb_ids)
    assert out["validation"]["cases"] >= len(fb_ids)
    # The tuned planner runs the fallback bucket's batch as a serial step.
    from kvtune.harness.device import device_model
    from kvtune.kernels.plan import AttentionShape
    from kvtune.workloads.hybrid import HybridCase

    shape = AttentionShape(**out["shape"])
    batch = HybridCase({"context_tokens": 6144, "chunk_tokens": 3072}, 48, shape).batch()
    plan = policies.get("hybrid-tuned", path=out["path"]).plan_hybrid(
        batch.q_lens, batch.kv_lens, shape, device_model("h100"))
    assert plan.schedule == "serial" and plan.prefill_block_m == 128


def test_keep_shipped_needs_revalidate_and_serial_fallback_hybrid_knobs(tmp_path):
    for suite, flag in (("hybrid-quick", "--keep-shipped"), ("smoke", "--serial-fallback"),
                        ("smoke", "--keep-shipped")):
        res = subprocess.run([sys.executable, "-m", "kvtune", "tune", "--study", "x", "--suite",
                              suite, flag, "--backend", "simulator", "--out",
                              str(tmp_path)], capture_output=True, text=True)
        assert res.returncode == 2
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and flag in lines[0], res.stderr


def test_cli_serial_fallback_prints_every_decision(tmp_path):
    doc = json.loads(SPLIT_FILE.read_text())
    doc["device"]["name"], doc["backend"] = "h100", "simulator"
    path = tmp_path / "split.json"
    path.write_text(json.dumps(doc))
    res = subprocess.run([sys.executable, "-m", "kvtune", "tune", "--study", "fb",
                          "--revalidate", str(path), "--serial-fallback", "--keep-shipped",
                          "--backend", "simulator", "--device-model", "h100",
                          "--finalist-rounds", "1", "--out", str(tmp_path / "cli")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(Path(res.stdout.split("hybrid heuristic: ")[1].splitlines()[0]).read_text())
    assert len(out["buckets"]) + len(out["deferred_buckets"]) == 7
    assert res.stderr.count("serial fallback: ") == 4  # the buckets with recorded cases
    for b in out["buckets"]:  # one line per bucket, a fallback's says so
        assert (f"prefill tokens {b['min_prefill_tokens']}-{b['max_prefill_tokens']}: ships"
                in res.stdout)
        assert ("serial fallback" in res.stdout) == any("fallback_from" in x
                                                        for x in out["buckets"])


def test_the_h100_fallback_file_ships_serial_steps_of_its_own_decode_knobs():
    """The twenty-first session's H100 file (README): the split file's two shipped buckets as
    they were, and two deferred buckets shipped by their serial fallback, each no more than 2%
    slower than serial on any case of its check."""
    doc = json.loads(H100_FILE.with_name("s21_hybrid_heuristic_h100_fallback.json").read_text())
    split = json.loads(SPLIT_FILE.read_text())
    assert doc["buckets"][:2] == split["buckets"]
    fell_back = doc["buckets"][2:]
    assert [(b["min_decodes"], b["max_prefill_tokens"]) for b in fell_back] == [(65, 1024),
                                                                                 (17, 4096)]
    for b in fell_back:
        # The fallback of that day: hybrid-serial's prefill launch with the bucket's own
        # parametric decode rule (since the twenty-eighth session the makespan rule).
        assert b["params"] == {**b["fallback_from"]["params"], **hv.SERIAL_PREFILL_KNOBS}
        assert "decode_family" not in b["params"]
        assert not b["validation"]["deferred"] and b["validation"]["source"] == "revalidation"
        assert b["validation"]["tuned_vs_serial"]["worst"] >= 1 / 1.02
    assert doc["validation"]["shipped_cases"] == sum(len(b["validation"]["cases"])
                                                     for b in fell_back)
    assert policies.get("hybrid-tuned", path=str(H100_FILE.with_name(
        "s21_hybrid_heuristic_h100_fallback.json"))) is not None


def test_the_h200_file_revalidated_ships_only_what_passed_today():
    """The twenty-first session's H200 file (the eleventh's, re-validated on an H200):
    every shipped bucket was measured against today's serial step and is never more than 2%
    slower on a case of that check; both of the old file's buckets were split, three halves
    defer."""
    doc = json.loads(H100_FILE.with_name("s21_hybrid_heuristic_h200_revalidated.json")
                     .read_text())
    assert doc["device"]["name"] == "NVIDIA H200" and doc["revalidated_from"]["path"].endswith(
        "s11_hybrid_heuristic.json")
    assert [(b["min_decodes"], b["min_prefill_tokens"], b["max_prefill_tokens"])
            for b in doc["buckets"]] == [(65, 1025, 2048)]
    for b in doc["buckets"]:
        v = b["validation"]
        assert b["revalidated"] and v["source"] == "revalidation" and not v["deferred"]
        assert min(r["serial_us"] / r["tuned_us"] for r in v["cases"]) >= 1 / 1.02
    halves = [b for b in doc["deferred_buckets"] if b.get("split_from")]
    assert len(halves) == 3 and all(b["reason"].startswith("revalidation: ") for b in halves)


def test_the_s27_h200_file_ships_on_four_cases_or_more():
    """The twenty-seventh session's H200 file (the twenty-first's re-validated with
    --serial-fallback on hybrid-holdout and the hybrid suite): every shipped bucket was measured
    on at least MIN_SHIP_CASES cases against the serial step and is never more than 2% slower on
    one of them; the fallbacks keep their bucket's own decode knobs behind hybrid-serial's
    prefill launch; the two-case fallback of the same run on hybrid-holdout alone (2.6% slower
    than serial on sweep cases) is not among them."""
    name = "s27_hybrid_heuristic_h200_fallback.json"
    doc = json.loads(H100_FILE.with_name(name).read_text())
    keys = _h200_revalidated_buckets(doc)
    assert keys == [(65, 256, 1025, 2048), (65, 256, 1, 1024), (17, 64, 2049, 4096)]
    for b in doc["buckets"]:
        if "fallback_from" in b:
            # The fallback of that day: the bucket's own parametric decode rule.
            assert b["params"] == {**b["fallback_from"]["params"], **hv.SERIAL_PREFILL_KNOBS}
    assert (1, 16, 1, 1024) not in keys
    assert policies.get("hybrid-tuned", path=str(H100_FILE.with_name(name))) is not None


def test_a_stopped_revalidation_leaves_a_partial_file_that_names_its_source(tmp_path,
                                                                            monkeypatch):
    """A run stopped after its first bucket keeps hybrid_heuristic.partial.json: that bucket
    decided, the rest listed unfinished, and FILE named as the finished file names it, so the
    partial re-validated in turn (--keep-shipped, as the thirtieth session's call 3 went on from
    call 2's) keeps the chain back to the file the search wrote."""
    calls = []
    real = rv.validate_bucket

    def dies_on_the_second(*args, **kw):
        calls.append(kw["bucket"])
        if len(calls) == 2:
            raise KeyboardInterrupt  # a time limit's kill, as the GPU call's `timeout` sends
        return real(*args, **kw)

    monkeypatch.setattr(rv, "validate_bucket", dies_on_the_second)
    path = _file(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        rv.run_hybrid_revalidation(str(path), _settings(tmp_path))
    partial_path = next((tmp_path / "out").glob("*/hybrid_heuristic.partial.json"))
    partial = json.loads(partial_path.read_text())
    old = json.loads(path.read_text())
    assert len(partial["buckets"]) == 1 and len(partial["unfinished_buckets"]) == 1
    assert partial["revalidated_from"]["path"] == str(path)
    assert partial["revalidated_from"]["run_id"] == old["run_id"] != partial["run_id"]
    monkeypatch.setattr(rv, "validate_bucket", real)
    doc = rv.run_hybrid_revalidation(str(partial_path), _settings(tmp_path, keep_shipped=True))
    assert doc["revalidated_from"]["path"] == str(partial_path)
    assert doc["revalidated_from"]["run_id"] == partial["run_id"]
    assert doc["buckets"] == partial["buckets"]  # kept as measured, unmeasured now

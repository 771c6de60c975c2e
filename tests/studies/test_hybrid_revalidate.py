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
        want = [c.case_id for c in held if rv.in_bucket(rv.bucket_key(b), c.batch())]
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

"""kvtune tune --suite hybrid (studies/hybrid_tune.py) on the simulator, and hybrid-tuned."""

import json
import subprocess
import sys

import numpy as np
import pytest

from kvtune.harness.bench import BackendSettings
from kvtune.harness.device import device_model
from kvtune.kernels import policies
from kvtune.kernels.hybrid_policies import bucket_key
from kvtune.kernels.plan import AttentionShape
from kvtune.studies.hybrid_tune import HybridTuneSettings, run_hybrid_tune
from kvtune.workloads.selection import CaseSettings


def _settings(tmp_path, **kw):
    cases = CaseSettings(distribution="hybrid", batch_sizes="8,128",
                         params=("chunk_tokens=512", "context_tokens=4096"))
    return HybridTuneSettings(cases=cases, measure=BackendSettings(backend="simulator",
                                                                   device_model="h100"),
                              trials=kw.pop("trials", 4), out=str(tmp_path), progress=False, **kw)


def test_tune_writes_heuristic_never_worse_than_pod(tmp_path):
    doc = run_hybrid_tune(_settings(tmp_path))
    assert len(doc["buckets"]) == 2  # 8 and 128 decodes fall in different buckets
    for b in doc["buckets"]:
        assert b["score_vs_serial"] <= b["pod_score_vs_serial"]
        assert b["min_prefill_tokens"] <= 512 <= b["max_prefill_tokens"]
    stored = json.loads(open(doc["path"]).read())
    assert stored["buckets"] == json.loads(json.dumps(doc["buckets"]))
    # The tuned policy plans each bucket's batch with that bucket's params.
    tuned = policies.get("hybrid-tuned", path=doc["path"])
    h100 = device_model("h100")
    shape = AttentionShape()
    q, kv = np.array([1] * 8 + [512]), np.array([4096] * 8 + [4608])
    plan = tuned.plan_hybrid(q, kv, shape, h100)
    b = next(b for b in doc["buckets"] if b["min_decodes"] <= 8 <= b["max_decodes"])
    assert plan.schedule == b["params"]["schedule"]
    assert plan.ctas_per_sm == b["params"]["ctas_per_sm"]
    # Outside every bucket: the pod rule.
    far = tuned.plan_hybrid(np.array([1] * 300), np.array([100] * 300), shape, h100)
    assert far.schedule == "sm-aware"


def test_bucket_key_and_bad_inputs(tmp_path):
    assert bucket_key(8, 512) == (0, 16, 1, 1024)
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

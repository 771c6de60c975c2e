"""benchmarks/generalise_gpu.sh in its CPU mode (the simulator, one direction) and the table
helper benchmarks/generalise_table.py on its output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_generalise_script_simulator_mode_writes_the_table(tmp_path):
    env = dict(os.environ, GENERALISE_DIRECTIONS="a",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "generalise_gpu.sh"), str(tmp_path),
                           "simulator"], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    table = json.loads((tmp_path / "table.json").read_text())
    (tune_bucket, *_) = table["tune"]
    assert tune_bucket["study"] == "gen-simulator-traces" and tune_bucket["validation_cases"] >= 1
    assert tune_bucket["train_score"] > 0 and tune_bucket["validation_score"] > 0
    # A chunk computed per batch (the engine's planner where a bucket defers, or the adaptive
    # rule) can beat every chunk of the 512..16384 grid: the simulated B=8 case of bucket 1-20
    # runs 13% faster on FlashInfer's own chunk than on the best grid chunk. So the ratio is
    # only bounded loosely from below.
    assert table["buckets"] and all(0.5 <= b["vs_best_chunk_geomean"] <= 3.0
                                    for b in table["buckets"])
    (verdict,) = table["targets"]
    assert verdict["heuristic"] == "tuned:gen-simulator-traces" and "chunk_geomean" in verdict["checks"]
    text = (tmp_path / "table.md").read_text()
    assert "validation score" in text and "vs best chunk" in text
    assert "failed" not in (tmp_path / "generalise.log").read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_generalise_script_resumes_its_studies_in_a_kept_results_folder(tmp_path):
    """GENERALISE_RESULTS: a second run on the same folder resumes the tune (its decided buckets
    kept, nothing searched again) instead of refusing the existing study."""
    env = dict(os.environ, GENERALISE_DIRECTIONS="a", GENERALISE_RESULTS=str(tmp_path / "res"),
               GENERALISE_ROUNDS="2",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    script = str(REPO / "benchmarks" / "generalise_gpu.sh")
    for out in ("first", "second"):
        done = subprocess.run(["bash", script, str(tmp_path / out), "simulator"], env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    first = (tmp_path / "first" / "generalise.log").read_text()
    second = (tmp_path / "second" / "generalise.log").read_text()
    assert "resuming" not in first and "failed" not in first
    assert "== gen-simulator-traces: resuming the study" in second and "failed" not in second
    assert "kept the result an earlier run" in second
    assert json.loads((tmp_path / "second" / "table.json").read_text())["tune"]
    # GENERALISE_ROUNDS reaches the validation benches (kvtune bench --rounds)
    manifests = list((tmp_path / "res").glob("bench-*/*/manifest.json"))
    assert manifests and all(json.loads(m.read_text())["rounds"] == 2 for m in manifests)

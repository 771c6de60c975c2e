"""benchmarks/calibrate_gpu.sh in its --dry-run mode: the simulator stands in for both kernels, so
the policy lists, the bench calls, the packing and the calibrate/fidelity commands it documents
are checked on the CPU before the script runs on a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_calibrate_gpu_script_dry_run(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "calibrate_gpu.sh"), str(tmp_path),
                           "--dry-run"], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (tmp_path / "calibrate.log").read_text()
    assert "stopped" not in log and "Traceback" not in log, log[-3000:]
    assert "held out:" in log and "median Spearman" in log
    with tarfile.open(tmp_path / "calibrate.tgz") as tar:
        names = tar.getnames()
    for folder in ("fit/triton/", "fit/flashinfer/", "held-out/triton/", "held-out/flashinfer/"):
        assert any(folder in n and n.endswith("measurements.parquet") for n in names), folder
    assert (tmp_path / "dry-triton.json").is_file()

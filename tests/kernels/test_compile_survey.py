"""benchmarks/compile_survey.py compiles the stage-1 kernel for sm_90 without a GPU: the fp8 path
widens e4m3 straight to fp16 (one cvt.rn.f16x2.e4m3x2 per two elements, no cvt.bf16.f16), and
the script keeps working for the next survey. Runs in a subprocess: the compiler needs a process
where Triton was not imported in interpreter mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compile_survey.py"


def test_fp8_kernel_compiles_for_sm90_with_one_conversion_per_two_elements(tmp_path):
    env = {**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"}
    env.pop("TRITON_INTERPRET", None)
    subprocess.run([sys.executable, str(SCRIPT), "--head-dim", "64", "--group", "4", "--kv", "fp8",
                    "--configs", "bn64-w4-s2", "--out", str(tmp_path)], check=True, env=env,
                   capture_output=True, timeout=300)
    (row,) = json.loads((tmp_path / "survey.json").read_text())
    assert "error" not in row, row
    assert row["spill_bytes"] == 0 and 0 < row["regs"] <= 255 and row["smem_bytes"] > 0
    kinds = row["cvt_kinds"]
    assert "cvt.bf16.f16" not in kinds  # the old bf16 widening: e4m3 -> f16 -> bf16
    # K and V of one step: 2 x 64 tokens x 64 dims over 128 threads = 64 elements per thread,
    # 32 packed conversions.
    assert kinds["cvt.rn.f16x2.e4m3x2"] == 2 * 64 * 64 // 128 // 2
    assert row["ptx_mma"] > 0

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


def survey_fp8_hd64_g4(tmp_path, labels: str) -> list[dict]:
    """compile_survey.py's rows for head_dim 64, G = 4, an fp8 cache and the comma-separated
    configuration labels, each checked to have compiled (no "error")."""
    env = {**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"}
    env.pop("TRITON_INTERPRET", None)
    subprocess.run([sys.executable, str(SCRIPT), "--head-dim", "64", "--group", "4", "--kv", "fp8",
                    "--configs", labels, "--out", str(tmp_path)], check=True, env=env,
                   capture_output=True, timeout=300)
    rows = json.loads((tmp_path / "survey.json").read_text())
    assert all("error" not in r for r in rows), rows
    return rows


def test_fp8_kernel_compiles_for_sm90_with_one_conversion_per_two_elements(tmp_path):
    (row,) = survey_fp8_hd64_g4(tmp_path, "bn64-w4-s2")
    assert row["spill_bytes"] == 0 and 0 < row["regs"] <= 255 and row["smem_bytes"] > 0
    kinds = row["cvt_kinds"]
    assert "cvt.bf16.f16" not in kinds  # the old bf16 widening: e4m3 -> f16 -> bf16
    # K and V of one step: 2 x 64 tokens x 64 dims over 128 threads = 64 elements per thread,
    # 32 packed conversions.
    assert kinds["cvt.rn.f16x2.e4m3x2"] == 2 * 64 * 64 // 128 // 2
    assert row["ptx_mma"] > 0


def test_widened_fp8_v_reads_no_byte_wide_shared_memory_and_leaves_16_bit_configs_alone(tmp_path):
    # The plain fp8 path reads V from shared memory one byte per element (ld.shared.b8: the
    # P.V product reduces over tokens, head_dim bytes apart); -vw widens V where it was loaded
    # and sends an fp16 tile through ldmatrix.trans. Same conversion count either way.
    plain, wide = survey_fp8_hd64_g4(tmp_path, "bn64-w4-s3-pa,bn64-w4-s3-pa-vw")
    assert wide["config"] == "bn64-w4-s3-pa-vw" and wide["spill_bytes"] == 0
    assert plain["shared_kinds"].get("ld.shared.b8", 0) > 0
    assert "ld.shared.b8" not in wide["shared_kinds"]
    assert wide["ptx_ld.shared"] < plain["ptx_ld.shared"]
    assert (wide["cvt_kinds"]["cvt.rn.f16x2.e4m3x2"]
            == plain["cvt_kinds"]["cvt.rn.f16x2.e4m3x2"] == 2 * 64 * 64 // 128 // 2)
    assert wide["ptx_ldmatrix"] > plain["ptx_ldmatrix"]  # the fp16 V tile (ldmatrix.trans)


def test_parse_label_round_trips_every_candidate():
    # In a subprocess: importing the script switches Triton to compiling (TRITON_INTERPRET=0),
    # which must not leak into this test process.
    code = ("import compile_survey as cs\n"
            "from kvtune.kernels.decode_config import CANDIDATES\n"
            "bad = [c.label() for cs_ in CANDIDATES.values() for c in cs_ "
            "if cs.parse_label(c.label()) != c]\n"
            "assert not bad, bad\n")
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True,
                   timeout=120)


def test_fp8_v_pairs_go_through_the_transposing_16_bit_load(tmp_path):
    # -vp reads V as int16 pairs: the P.V operand comes from ldmatrix.trans on 16-bit data, then
    # one prmt per two pairs splits even and odd columns; no byte-wide shared-memory load is
    # left, the e4m3 conversion count is the plain path's, and the mma count too (two products
    # of half the columns).
    plain, pairs = survey_fp8_hd64_g4(tmp_path, "bn64-w4-s3-pa,bn64-w4-s3-pa-vp")
    assert pairs["config"] == "bn64-w4-s3-pa-vp" and pairs["spill_bytes"] == 0
    assert plain["shared_kinds"].get("ld.shared.b8", 0) > 0
    assert "ld.shared.b8" not in pairs["shared_kinds"]
    assert pairs["ptx_prmt"] > 0 and pairs["ptx_ldmatrix"] > plain["ptx_ldmatrix"]
    assert pairs["ptx_mma"] == plain["ptx_mma"]
    assert (pairs["cvt_kinds"]["cvt.rn.f16x2.e4m3x2"]
            == plain["cvt_kinds"]["cvt.rn.f16x2.e4m3x2"] == 2 * 64 * 64 // 128 // 2)
    assert pairs["ptx_all"] < plain["ptx_all"]


def test_the_tail_merge_variant_compiles_for_sm90_with_the_main_loop_unchanged(tmp_path):
    # kernels/merge_tail.py runs only in stage 1's compiled tail on a GPU; the interpreter
    # accepts what the compiler refuses (a plain int global, for one), so compile it here.
    env = {**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"}
    env.pop("TRITON_INTERPRET", None)
    rows = {}
    for flag in ([], ["--tail-merge"]):
        out = tmp_path / ("tail" if flag else "plain")
        subprocess.run([sys.executable, str(SCRIPT), "--head-dim", "128", "--group", "8", "--kv",
                        "bf16", "--configs", "bn128-w8-s2-pa", "--out", str(out), *flag],
                       check=True, env=env, capture_output=True, timeout=300)
        (row,) = json.loads((out / "survey.json").read_text())
        assert "error" not in row, row
        rows[bool(flag)] = row
    tail, plain = rows[True], rows[False]
    assert tail["tail_merge"] and not plain["tail_merge"]
    assert tail["spill_bytes"] == 0 and 0 < tail["regs"] <= 255
    # The main loop's products and async copies are the same; the tail adds a ticket atomic.
    assert tail["ptx_mma"] == plain["ptx_mma"] and tail["ptx_cp.async"] == plain["ptx_cp.async"]
    assert tail["ptx_all"] > plain["ptx_all"]


def test_flattened_stage1_keeps_the_pipelined_k_v_copies(tmp_path):
    # kernels/decode_flat.py walks several tasks as one loop: the pipeliner must still issue the
    # K/V tiles as asynchronous copies into the same shared-memory buffers as the per-task
    # page-ahead loop (cp.async count and shared memory equal), without spills.
    env = {**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"}
    env.pop("TRITON_INTERPRET", None)
    subprocess.run([sys.executable, str(SCRIPT), "--head-dim", "64", "--group", "4", "--kv", "bf16",
                    "--configs", "bn64-w4-s3-pa,bn64-w4-s3-pa-fl2", "--out", str(tmp_path)],
                   check=True, env=env, capture_output=True, timeout=300)
    plain, flat = json.loads((tmp_path / "survey.json").read_text())
    assert "error" not in plain and "error" not in flat, (plain, flat)
    assert flat["config"] == "bn64-w4-s3-pa-fl2" and flat["spill_bytes"] == 0
    assert flat["ptx_cp.async"] == plain["ptx_cp.async"] > 0
    assert flat["smem_bytes"] == plain["smem_bytes"]


def test_a_register_cap_in_the_label_reaches_the_compile(tmp_path):
    # -rN is the `.maxnreg` kernels/decode.py launches with; the survey used to compile without
    # it and report the uncapped count (twenty-third session).
    plain, capped = survey_fp8_hd64_g4(tmp_path, "bn64-w4-s3-pa-vp,bn64-w4-s3-pa-vp-r80")
    assert capped["config"] == "bn64-w4-s3-pa-vp-r80"
    assert capped["regs"] <= 80 < plain["regs"]
    assert capped["smem_bytes"] == plain["smem_bytes"]


def test_page_ids_l2_adds_the_l2_prefetch_and_leaves_the_loop_alone(tmp_path):
    # -l2 prefetches each task's page ids into L2 before the loop (KernelConfig.page_ids_l2):
    # the compiled kernel has the prefetch, the one without it has none, and the loop's
    # asynchronous K/V copies and products are the same.
    plain, l2 = survey_fp8_hd64_g4(tmp_path, "bn64-w4-s3-pa-vp,bn64-w4-s3-pa-vp-l2")
    assert l2["config"] == "bn64-w4-s3-pa-vp-l2"
    assert l2.get("ptx_prefetch", 0) >= 1 and "ptx_prefetch" not in plain
    for key in ("ptx_cp.async", "ptx_mma", "ptx_ldmatrix", "smem_bytes"):
        assert l2[key] == plain[key], key

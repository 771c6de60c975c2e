"""benchmarks/bench_hybrid.py in its CPU dry-run mode (interpreter): the script must not break
before it reaches the GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(script: str, out, *args: str, rc: int = 0) -> subprocess.CompletedProcess:
    """benchmarks/<script> --dry-run under the interpreter; fails the test on another exit."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--dry-run",
                           "--out", str(out), *args], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == rc, proc.stderr[-2000:]
    return proc


def test_dry_run_writes_checked_table(tmp_path):
    _dry_run("bench_hybrid.py", tmp_path)
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["dry_run"] and len(res["cases"]) == 2
    for case in res["cases"]:
        assert "error" not in case
        for name in ("serial", "streams", "fused", "pod", "partitioned", "colocated",
                     "prefill-alone", "decode-alone"):
            assert case["variants"][name]["ok"], (name, case["variants"][name])
            assert case["variants"][name]["rel_error"] < 2e-2
        assert case["variants"]["tuned1"]["params"]["schedule"] == "partitioned"
        assert case["variants"]["tuned1"]["ok"]
    assert res["parity"][0]["hybrid"]["ok"] and res["parity"][0]["base"]["ok"]
    assert "targets" in res["summary"]
    assert res["check"] and all(c["ok"] for c in res["check"])
    assert "| case |" in (tmp_path / "results.md").read_text()


def test_variant_and_case_selection(tmp_path):
    _dry_run("bench_hybrid.py", tmp_path, "--variants", "colocated", "--no-tuned",
             "--case-ids", "decode_q_len;no-such-case", "--no-flashinfer")
    res = json.loads((tmp_path / "results.json").read_text())
    assert [c["case_id"] for c in res["cases"]] == [
        "hybrid:B2:seed0:chunk_tokens=20,context_tokens=48,decode_q_len=3"]
    assert set(res["cases"][0]["variants"]) == {"serial", "colocated", "prefill-alone",
                                                "decode-alone"}
    assert all(r["ok"] for r in res["cases"][0]["variants"].values())
    bad = _dry_run("bench_hybrid.py", tmp_path, "--variants", "colocated,pods", rc=2)
    assert bad.stderr.strip().splitlines() == [
        "bench_hybrid: error: --variants: pods unknown; allowed: serial, streams, fused, pod, "
        "partitioned, colocated"]


def test_skip_cases_spreads_a_suite_over_calls(tmp_path):
    """--skip-cases drops the first cases before --max-cases keeps the next ones; a negative
    count is one line, exit 2."""
    _dry_run("bench_hybrid.py", tmp_path, "--variants", "serial", "--no-tuned", "--no-checks",
             "--no-flashinfer", "--skip-cases", "1", "--max-cases", "1")
    res = json.loads((tmp_path / "results.json").read_text())
    assert [c["case_id"] for c in res["cases"]] == [
        "hybrid:B2:seed0:chunk_tokens=20,context_tokens=48,decode_q_len=3"]
    bad = _dry_run("bench_hybrid.py", tmp_path, "--skip-cases", "-1", rc=2)
    assert bad.stderr.strip().splitlines() == [
        "bench_hybrid: error: --skip-cases / --max-cases: must be >= 0"]


def test_fi_warmup_without_flashinfer_or_cuda_is_one_line():
    import torch

    try:
        import flashinfer  # noqa: F401
        have_fi = True
    except Exception:  # noqa: BLE001
        have_fi = False
    if have_fi and torch.cuda.is_available():
        return  # the warmup would really build FlashInfer here
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_hybrid.py"),
                           "--fi-warmup", "pod"], env=dict(os.environ, TRITON_INTERPRET="1"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "bench_hybrid: error: --fi-warmup needs CUDA and flashinfer"]


def test_overlap_probe_dry_run_checks_every_variant(tmp_path):
    proc = _dry_run("hybrid_overlap_probe.py", tmp_path)
    res = json.loads((tmp_path / "overlap_probe.json").read_text())
    assert res["dry_run"] and len(res["cases"]) == 2
    for case in res["cases"]:
        variants = case["variants"]
        assert {"serial", "streams", "pf64-d2", "prefill-alone", "decode-alone"} <= set(variants)
        for name, row in variants.items():
            assert row["ok"] and row["rel_error"] < 2e-2, (name, row)
        # The probe's overrides reach the launch configuration it ran.
        assert variants["pf64-d1"]["config"]["prefill_first"] is True
        assert variants["pf64-d1"]["config"]["num_stages"] == 1
        assert variants["serial"]["config"]["prefill_first"] is False
        # k programs per SM of the dry run's 4-SM device, and the tail beside them
        assert variants["coP1-s3-T1"]["config"]["persistent_prefill_programs"] == 4
        assert variants["coP1-s3-T1"]["config"]["prefill_tail_programs"] == 4
        assert variants["coD2"]["config"]["persistent_decode_programs"] == 8
        assert variants["coP1-s3-T1-a32s4"]["config"]["decode_ahead"] is True
    assert "over serial" in proc.stdout


def test_heuristic_variant_checks_and_suite_options(tmp_path):
    """--heuristic times hybrid-tuned with that file (planned by its bucket), --no-checks skips
    the other shapes, and a bad --heuristic or --suite is one line, exit 2."""
    from kvtune.kernels.hybrid_policies import HYBRID_SCHEMA

    doc = {"schema": HYBRID_SCHEMA, "buckets": [
        {"min_decodes": 0, "max_decodes": 16, "min_prefill_tokens": 1, "max_prefill_tokens": 1024,
         "params": {"schedule": "colocated", "prefill_block_m": 64, "ctas_per_sm": 4}}]}
    path = tmp_path / "h.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "run"
    _dry_run("bench_hybrid.py", out, "--variants", "colocated", "--no-tuned", "--no-checks",
             "--heuristic", str(path), "--case-ids", "decode_q_len", "--no-flashinfer")
    res = json.loads((out / "results.json").read_text())
    v = res["cases"][0]["variants"]
    assert v["heuristic"]["ok"] and v["heuristic"]["schedule"] == "colocated"
    assert res["check"] == [] and "heuristic" in (out / "results.md").read_text()
    assert res["summary"]["geomean_heuristic_speedup_vs_serial"] > 0
    bad = _dry_run("bench_hybrid.py", out, "--heuristic", str(tmp_path / "none.json"), rc=2)
    assert len(bad.stderr.strip().splitlines()) == 1 and "--heuristic" in bad.stderr
    bad = _dry_run("bench_hybrid.py", out, "--suite", "prod-mix", rc=2)
    assert len(bad.stderr.strip().splitlines()) == 1 and "--suite" in bad.stderr


def test_prefill_tile_probe_dry_run_checks_every_tile(tmp_path):
    """benchmarks/prefill_tile_probe.py: every tile configuration is checked against the float64
    reference before it is timed; an unknown --tiles label is one line, exit 2."""
    _dry_run("prefill_tile_probe.py", tmp_path)
    res = json.loads((tmp_path / "prefill_tile_probe.json").read_text())
    tiles = res["cases"][0]["tiles"]
    # The Triton tiles run; the Gluon ones (an sm_90 GPU only) are listed as skipped.
    assert len(tiles) == 10 and all(t["ok"] and t["rel_error"] < 2e-2 for t in tiles.values())
    assert tiles["triton"]["prefill_wgmma"] is False
    assert res["skipped"] and all(label.startswith("wgmma-") for label in res["skipped"])
    assert tiles["m128-n128-w8-s2"]["block_np"] == 128
    assert tiles["m64-default"]["prefill_block_m"] == 64
    bad = _dry_run("prefill_tile_probe.py", tmp_path, "--tiles", "nope", rc=2)
    assert len(bad.stderr.strip().splitlines()) == 1


def test_fp8_bench_dry_run_checks_every_variant(tmp_path):
    """benchmarks/bench_hybrid_fp8.py: bf16, fp8 (the widened copy), fp8-tile (without it), the
    serial step's single-token decodes as the hybrid kernel's items (-items, beside their run
    through kernels/decode.py) and the copy's launch alone, each checked before it is timed; a
    bad --cases is one line, exit 2."""
    _dry_run("bench_hybrid_fp8.py", tmp_path, "--policies", "hybrid-serial")
    res = json.loads((tmp_path / "results.json").read_text())
    rows = {r["variant"]: r for r in res["rows"]}
    assert list(rows) == ["bf16", "bf16-items", "fp8", "fp8-tile", "fp8-items", "widen"]
    assert all(r["ok"] for r in res["rows"]), res["rows"]
    assert rows["fp8"]["launches"] == rows["fp8-tile"]["launches"] + 1  # the widening launch
    assert rows["fp8"]["decode_kernel"] and rows["bf16"]["decode_kernel"]
    assert not rows["fp8-items"]["decode_kernel"] and not rows["bf16-items"]["decode_kernel"]
    assert "| 48, 24, 3 | hybrid-serial |" in (tmp_path / "results.md").read_text()
    bad = _dry_run("bench_hybrid_fp8.py", tmp_path, "--cases", "8x2", rc=2)
    assert bad.stderr.strip().splitlines() == [
        "bench_hybrid_fp8: error: --cases: '8x2' is not CONTEXTxCHUNKxDECODES (three integers)"]


def test_colocated_order_dry_run_checks_every_variant(tmp_path):
    """benchmarks/bench_colocated_order.py: serial, colocated on two streams and in order, each
    checked before its interleaved rounds are timed; on the interpreter (no programmatic launch)
    the ordered variant falls back to the two-stream path. A bad --rounds is one line, exit 2."""
    _dry_run("bench_colocated_order.py", tmp_path, "--rounds", "2", "--max-cases", "1")
    res = json.loads((tmp_path / "results.json").read_text())
    (case,) = res["cases"]
    assert case["ordered_launch"] is False
    for name in ("serial", "two-streams", "ordered"):
        row = case["variants"][name]
        assert row["ok"] and len(row["rounds"]) == 2 and row["round_spread"] >= 1.0, name
    assert "ordered_over_serial_geomean" in res["summary"]
    bad = _dry_run("bench_colocated_order.py", tmp_path, "--rounds", "0", rc=2)
    assert len(bad.stderr.strip().splitlines()) == 1 and "--rounds" in bad.stderr


def test_colocated_order_shares_add_checked_variants(tmp_path):
    """--shares S: an ordered variant with round(S x SMs) persistent prefill programs, checked
    and timed like the others and summarised; a share outside (0, 1] is one line, exit 2."""
    _dry_run("bench_colocated_order.py", tmp_path, "--rounds", "1", "--max-cases", "1",
             "--shares", "0.5")
    res = json.loads((tmp_path / "results.json").read_text())
    (case,) = res["cases"]
    row = case["variants"]["ordered-p0.5"]
    assert row["ok"] and len(row["rounds"]) == 1
    assert "ordered-p0.5_over_serial_geomean" in res["summary"]
    assert "Persistent prefill share" in (tmp_path / "results.md").read_text()
    for bad_share in ("1.5", "0", "x"):
        bad = _dry_run("bench_colocated_order.py", tmp_path, "--shares", bad_share, rc=2)
        assert len(bad.stderr.strip().splitlines()) == 1 and "--shares" in bad.stderr


def test_colocated_order_gluon_variants_and_no_two_streams(tmp_path):
    """--colocated-wgmma N:S adds ordered-wgNsS only where the Gluon tile can run (never on the
    interpreter: no such variant, nothing fails); --no-two-streams leaves that variant out; a
    malformed --colocated-wgmma is one line, exit 2."""
    _dry_run("bench_colocated_order.py", tmp_path, "--rounds", "1", "--max-cases", "1",
             "--colocated-wgmma", "64:3", "--no-two-streams")
    res = json.loads((tmp_path / "results.json").read_text())
    (case,) = res["cases"]
    assert set(case["variants"]) == {"serial", "ordered"}
    assert all(row["ok"] for row in case["variants"].values())
    for bad_arg in ("64", "48:3", "64:5", "x:y"):
        bad = _dry_run("bench_colocated_order.py", tmp_path, "--colocated-wgmma", bad_arg, rc=2)
        assert len(bad.stderr.strip().splitlines()) == 1 and "--colocated-wgmma" in bad.stderr


def test_side_by_side_with_flashinfer_uses_the_after_flashinfer_timings():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_hybrid
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    def t(us):
        return {"ok": True, "median_us": us}

    # The first pass ran beside FlashInfer's JIT (slow serial); the FlashInfer comparison takes
    # the timings made after FlashInfer's, every other figure the first pass.
    entry = {"min_bytes": 1e8, "flops": 1e12, "variants": {
        "serial": t(330.0), "heuristic": t(300.0), "prefill-alone": t(160.0),
        "decode-alone": t(200.0), "flashinfer-serial": t(180.0), "flashinfer-pod": t(190.0),
        "serial" + bench_hybrid.AFTER_FI: t(198.0), "heuristic" + bench_hybrid.AFTER_FI: t(190.0)}}
    bench_hybrid.summarize_case(entry, 3e12)
    assert entry["best"] == "heuristic" and entry["best_speedup_vs_serial"] == 330.0 / 300.0
    assert entry["heuristic_over_fi_pod"] == 1.0 and entry["best_over_fi_pod"] == 1.0
    assert entry["serial_over_fi_serial"] == 1.1
    # Without a second pass, the first one.
    del entry["variants"]["heuristic" + bench_hybrid.AFTER_FI]
    bench_hybrid.summarize_case(entry, 3e12)
    assert entry["heuristic_over_fi_pod"] == 300.0 / 190.0

"""benchmarks/bench_kernels.py --dry-run: the shapes sections run on the CPU (Triton's
interpreter, a tiny batch, FlashInfer skipped), so the GPU call does not break on a typo."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from kvtune.kernels import decode_config
from kvtune.kernels.decode_config import KernelConfig

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_kernels")


def test_default_matrix_covers_every_shape_kv_type_and_page_size(bench):
    variants = bench.default_variants()
    assert {v[0] for v in variants} == set(bench.MATRIX_SHAPES)
    assert {(v[1], v[2]) for v in variants} == set(bench.MATRIX_KV)
    assert {v[3] for v in variants} == set(bench.MATRIX_PAGES)
    assert len(variants) == 13 and len(bench.full_variants()) == 8 * 3 * 3
    for v in variants + [v for v, _ in bench.SWEEP]:
        bench.variant_shape(v)  # every variant is a valid shape


def test_dry_run_shapes_section_checks_then_tabulates(bench, tmp_path):
    out = tmp_path / "out"
    # Variant 12: llama3-70b-tp8 with an fp8 cache (one KV head: cheap in the interpreter).
    assert bench.main(["--dry-run", "--sections", "shapes", "--variants", "12", "--total-tokens",
                       "40", "--out", str(out)]) == 0
    rows = pd.read_csv(out / "shapes.csv")
    assert len(rows) == 2 and set(rows["plan"]) == {"fixed-2048", "balanced-2x"}
    assert (rows["triton_status"] == "ok").all() and (rows["kv_dtype"] == "fp8_e4m3").all()
    assert (rows["triton_rel_error"] < 2e-2).all()  # verified before it was timed
    assert (rows["flashinfer_status"] == "unavailable").all()
    assert (rows["programs_per_sm"] > 0).all()
    table = (out / "shapes.md").read_text()
    assert table.startswith("| variant |") and "llama3-70b-tp8 bf16/fp8_e4m3 p16" in table
    assert json.loads((out / "results.json").read_text())["dry_run"] is True
    assert (rows["triton_merge"] == "chunked").all()


def test_dry_run_shapes_with_the_read_ceiling(bench, tmp_path):
    """--read-ceiling: each row also carries the plan's paged read (its sums checked against
    float64 first: no configuration failed) and the table its two columns."""
    out = tmp_path / "out"
    assert bench.main(["--dry-run", "--sections", "shapes", "--variants", "12", "--total-tokens",
                       "40", "--read-ceiling", "--out", str(out)]) == 0
    rows = pd.read_csv(out / "shapes.csv")
    assert len(rows) == 2 and (rows["read_not_ok"] == 0).all()
    assert (rows["read_us"] > 0).all() and rows["read_config"].str.startswith("bn").all()
    assert (rows["triton_of_read"] > 0).all()
    header = (out / "shapes.md").read_text().splitlines()[0]
    assert header.endswith("| read of copy | Triton of read |")


def test_dry_run_read_ceiling_with_given_configurations(bench, tmp_path, capsys):
    """--read-configs: the read runs those configurations only; a bad label is one line, exit
    2, before anything runs."""
    out = tmp_path / "out"
    assert bench.main(["--dry-run", "--sections", "shapes", "--variants", "12", "--total-tokens",
                       "40", "--read-ceiling", "--read-configs", "bn16-w4-s2",
                       "--out", str(out)]) == 0
    rows = pd.read_csv(out / "shapes.csv")
    assert (rows["read_config"] == "bn16-w4-s2").all() and (rows["read_not_ok"] == 0).all()
    assert bench.main(["--dry-run", "--sections", "shapes", "--read-ceiling", "--read-configs",
                       "bn16-w4", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bench_kernels: error: --read-configs:")
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("merge", ["blocks", "tail"])
def test_dry_run_shapes_with_another_merge(bench, tmp_path, merge):
    """--merge blocks / tail: the matrix's Triton rows run kernels/merge.py or merge in stage
    1's tail (checked against the reference like the default merge) and say so; the batch is
    split (balanced-2x)."""
    out = tmp_path / "out"
    assert bench.main(["--dry-run", "--sections", "shapes", "--variants", "12", "--total-tokens",
                       "40", "--merge", merge, "--out", str(out)]) == 0
    rows = pd.read_csv(out / "shapes.csv")
    assert (rows["triton_status"] == "ok").all() and (rows["triton_merge"] == merge).all()
    assert (rows["triton_rel_error"] < 2e-2).all()


def test_dry_run_config_sweep_suggests_a_table_entry(bench, tmp_path, monkeypatch):
    table_entry = decode_config.CONFIG_TABLE[(128, 2, "one-per-sm")]
    monkeypatch.setitem(decode_config.CANDIDATES, (128, 2),
                        (table_entry, KernelConfig(64, 4, 2)))
    runner = bench.MatrixRunner(True, float("nan"), lambda msg: None)
    try:
        sweep = [(("llama3-70b-tp8", "bf16", "bf16", 16), (("skew80", 2, "balanced-2x"),))]
        result = bench.section_shape_configs(runner, sweep, 40, lambda m: None)
    finally:
        runner.close()
    assert [r["status"] for r in result["rows"]] == ["ok", "ok"]
    assert [r["is_table_entry"] for r in result["rows"]] == [True, False]
    (key, choice), = result["suggested"].items()
    assert key == str((128, 2, "one-per-sm")) and choice["table_config"] == table_entry.label()
    assert choice["config"] in (table_entry.label(), "bn64-w4-s2")


def test_bad_variant_index_is_one_line_exit_2(bench, tmp_path, capsys):
    assert bench.main(["--dry-run", "--variants", "99", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "variants: '99' not allowed" in err


def test_time_limit_stops_the_matrix_sections_and_counts_what_it_skipped(bench, tmp_path):
    out = tmp_path / "out"
    assert bench.main(["--dry-run", "--sections", "shapes,shape-configs", "--variants", "12",
                       "--total-tokens", "40", "--time-limit-s", "0", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    # 2 shapes cases (one batch, two plans) and the sweep's candidates of its one case.
    assert results["cases_skipped_time_limit"] == 2 + len(decode_config.CANDIDATES[(128, 1)])
    assert results["shapes"] == [] and results["shape-configs"]["rows"] == []


def test_config_kv_keeps_only_the_sweep_shapes_of_that_kv_type(bench, tmp_path, capsys):
    fp8 = bench.filter_sweep(bench.SWEEP, "fp8")
    assert fp8 and all(v[2] == "fp8_e4m3" for v, _ in fp8)
    assert {bench.variant_shape(v).head_dim for v, _ in fp8} == {64, 128, 256}
    assert bench.filter_sweep(bench.SWEEP, "fp8_e4m3") == fp8
    assert bench.filter_sweep(bench.SWEEP, None) == list(bench.SWEEP)
    assert all(v[2] == "bf16" for v, _ in bench.filter_sweep(bench.SWEEP, "bf16"))
    assert bench.main(["--dry-run", "--config-kv", "fp4", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config-kv: 'fp4' not allowed" in err


def test_sweep_cases_parse_and_bad_ones_are_one_line_exit_2(bench, tmp_path, capsys):
    assert bench.parse_sweep_cases(None) == bench.SWEEP_CASES
    assert bench.parse_sweep_cases("skew80:8:balanced-2x, uniform:64:fa3") == (
        ("skew80", 8, "balanced-2x"), ("uniform", 64, "fa3"))
    for text, field in (("skew80:8", "DIST:BATCH:PLAN"), ("zipf:8:fa3", "dist"),
                        ("skew80:0:fa3", "batch"), ("skew80:8:balanced", "plan")):
        assert bench.main(["--dry-run", "--sweep-cases", text, "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "sweep-cases" in err and field in err


def test_dry_run_shapes_section_with_the_longest_first_launch_order(bench, tmp_path):
    out = tmp_path / "out"
    assert bench.main(["--dry-run", "--sections", "shapes", "--variants", "12", "--total-tokens",
                       "40", "--launch-order", "longest-first", "--out", str(out)]) == 0
    rows = pd.read_csv(out / "shapes.csv")
    assert len(rows) == 2 and (rows["triton_status"] == "ok").all()
    assert (rows["triton_rel_error"] < 2e-2).all()
    results = json.loads((out / "results.json").read_text())
    assert results["launch_order"] == "longest-first"
    assert "--launch-order longest-first" in results["command"]

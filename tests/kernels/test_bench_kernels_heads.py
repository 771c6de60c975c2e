"""bench_kernels.py --heads: the shapes matrix on shapes outside MATRIX_SHAPES (held-out shapes
such as 40/8/128 or 8/1/256), their parsing, their errors and a dry run."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_kernels")


def test_heads_names_parse_to_the_shape_asked_for(bench):
    assert bench.parse_heads_name("40/8/128") == (40, 8, 128)
    assert bench.parse_heads_name("llama3-8b") is None
    assert bench.parse_heads_name("40/8") is None
    shape = bench.variant_shape(("8/1/256", "fp16", "fp8_e4m3", 64))
    assert (shape.num_qo_heads, shape.num_kv_heads, shape.head_dim) == (8, 1, 256)
    assert (shape.dtype, shape.kv_dtype, shape.page_size) == ("fp16", "fp8_e4m3", 64)
    # A matrix name keeps its own heads.
    assert bench.variant_shape(("llama3-70b-tp8", "bf16", "bf16", 16)).num_kv_heads == 1


def test_heads_variants_default_to_bf16_and_fp8_at_page_16(bench):
    variants = bench.heads_variants("40/8/128,2/1/256", full=False)
    assert variants == [("40/8/128", "bf16", "bf16", 16), ("40/8/128", "bf16", "fp8_e4m3", 16),
                        ("2/1/256", "bf16", "bf16", 16), ("2/1/256", "bf16", "fp8_e4m3", 16)]
    full = bench.heads_variants("2/1/256", full=True)
    assert len(full) == len(bench.MATRIX_KV) * len(bench.MATRIX_PAGES)
    assert {v[3] for v in full} == set(bench.MATRIX_PAGES)


@pytest.mark.parametrize("text, field", [("40x8x128", "heads"), ("40/8/96", "head_dim"),
                                         ("40/6/128", "num_qo_heads")])
def test_bad_heads_name_the_field(bench, text, field):
    with pytest.raises(ValueError, match=field):
        bench.heads_variants(text, full=False)


def test_bad_heads_on_the_command_line_exit_2(bench, tmp_path, capsys):
    assert bench.main(["--dry-run", "--sections", "shapes", "--heads", "40/8/96",
                       "--out", str(tmp_path / "out")]) == 2
    assert "head_dim" in capsys.readouterr().err


def test_dry_run_on_a_held_out_shape(bench, tmp_path):
    """One KV head at head_dim 256 with an fp8 cache: the one-program-per-SM fp8 entry runs and
    passes the float64 check in the interpreter."""
    out = tmp_path / "out"
    assert bench.main(["--dry-run", "--sections", "shapes", "--heads", "8/1/256", "--variants",
                       "1", "--total-tokens", "40", "--out", str(out)]) == 0
    rows = pd.read_csv(out / "shapes.csv")
    assert len(rows) == 2 and (rows["shape"] == "8/1/256").all()
    assert (rows["kv_dtype"] == "fp8_e4m3").all() and (rows["triton_status"] == "ok").all()
    assert (rows["triton_rel_error"] < 2e-2).all()

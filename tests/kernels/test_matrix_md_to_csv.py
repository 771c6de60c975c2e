"""benchmarks/matrix_md_to_csv.py: a printed matrix row becomes the shapes.csv row that
benchmarks/sim_on_matrix.py reads, with the case rebuilt and checked against the row."""

from __future__ import annotations

import csv

import pytest

from tests.benchmark_scripts import load_benchmark

ROW = ("| llama3-70b-tp8 bf16 p16 | skew80 | 256 | fixed-2048 | {pps} | 68.7 | 64.8 | 0.944 | 0.649 "
       "| 0.688 | bn128-w8-s2-pa | 0.84/0.96 |\n")
HEADER = "| variant | dist | B | plan | programs/SM | Triton us | FlashInfer us |\n|---|---|---|\n"


@pytest.fixture(scope="module")
def conv():
    return load_benchmark("matrix_md_to_csv")


def test_a_printed_row_becomes_a_csv_row_with_the_rebuilt_case(conv, tmp_path):
    log, out = tmp_path / "call.log", tmp_path / "rows.csv"
    log.write_text("noise\n" + HEADER + ROW.format(pps="2.71"))
    assert conv.main([str(log), str(out)]) == 0
    (row,) = list(csv.DictReader(out.open()))
    assert (row["shape"], row["dist"], row["batch"], row["plan"]) == (
        "llama3-70b-tp8", "skew80", "256", "fixed-2048")
    assert (int(row["num_tasks"]), int(row["chunk_tokens"])) == (358, 2048)
    assert (float(row["triton_us"]), float(row["flashinfer_us"])) == (68.7, 64.8)


def test_a_row_whose_case_does_not_rebuild_or_no_row_is_exit_2(conv, tmp_path, capsys):
    log, out = tmp_path / "call.log", tmp_path / "rows.csv"
    log.write_text(HEADER + ROW.format(pps="3.10"))
    assert conv.main([str(log), str(out)]) == 2
    assert "programs/SM" in capsys.readouterr().err
    assert conv.main([str(log), str(out), "--shapes", "g16"]) == 2
    assert "no matrix row" in capsys.readouterr().err
    assert not out.exists()

"""harness/summary.py marks measurements the interference guard could not clear."""

import math

from kvtune.harness.summary import QUIET_RATIO_MIN, disturbed_count, format_rows, summary_records


def row(policy, latency_us, quiet_ratio=None, status="ok"):
    r = {"distribution": "uniform", "batch_size": 8, "seed": 0, "case_id": "c0",
         "policy": policy, "status": status, "latency_us": latency_us, "p10_us": latency_us,
         "p90_us": latency_us, "achieved_bytes_per_s": 4e12, "bw_fraction": 0.9}
    if quiet_ratio is not None:
        r["quiet_ratio"] = quiet_ratio
    return r


def test_disturbed_rows_are_counted_and_marked():
    rows = [row("fa3", 46.0, 0.97), row("no-split", 95.0, 0.66), row("fixed-split", 50.0),
            row("trtllm-oversub", 1.0, 0.2, status="failed")]
    assert QUIET_RATIO_MIN == 0.9
    recs = summary_records(rows)
    assert recs[0]["quiet_ratio"] == 0.97 and math.isnan(recs[2]["quiet_ratio"])
    assert math.isnan(recs[3]["quiet_ratio"])  # not measured: never counted
    assert disturbed_count(rows) == 1
    table = format_rows(rows, "table")
    assert "~disturbed 0.66" in table and table.count("~disturbed") == 1 + 1  # cell + legend
    assert "quiet_ratio" in format_rows(rows, "csv").splitlines()[0]


def test_simulator_rows_have_no_quiet_ratio_and_no_marks():
    rows = [row("fa3", 46.0), row("no-split", 95.0)]
    assert disturbed_count(rows) == 0
    assert "~disturbed 0" not in format_rows(rows, "table")


def test_kvtune_bench_prints_one_note_for_disturbed_measurements(tmp_path, monkeypatch, capsys):
    # The simulator never sets quiet_ratio; stand in for a GPU run whose guard cleared one
    # measurement and not the other.
    from kvtune.cli import main
    from kvtune.harness import bench as bench_module

    real_run = bench_module.run_bench

    def run_with_quiet_ratios(settings, command=""):
        outcome = real_run(settings, command)
        for i, r in enumerate(outcome.rows):
            r["quiet_ratio"] = 0.5 if i == 0 else 0.98
        return outcome

    monkeypatch.setattr(bench_module, "run_bench", run_with_quiet_ratios)
    argv = ["bench", "--suite", "smoke", "--policies", "fa3,no-split", "--backend", "simulator",
            "--device-model", "h100", "--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    notes = [line for line in err.splitlines() if line.startswith("kvtune: note:")]
    assert len(notes) == 1 and notes[0].startswith("kvtune: note: 1 of ")
    assert "~disturbed 0.50" in out

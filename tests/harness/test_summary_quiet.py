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

"""Issue 11's CLI habits: machine-readable info/plan, bench summary formats, a taken port."""

from __future__ import annotations

import csv
import io
import json
import socket

from kvtune.cli import main

BENCH = ["bench", "--suite", "smoke", "--backend", "simulator", "--device-model", "h200",
         "--policies", "fa3,fixed-split:chunk_tokens=4096", "--no-progress"]


def test_info_json_is_one_document_with_every_part(capsys):
    assert main(["info", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"device", "backends", "timers", "device_models", "policies", "suites",
                        "distributions", "versions"}
    assert doc["backends"]["simulator"] == "available" and "fa3" in doc["policies"]
    assert doc["distributions"]["lognormal"]["params"]["sigma"]["allowed"]


def test_info_lines_stay_short(capsys):
    assert main(["info"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 200


def test_plan_json(capsys):
    assert main(["plan", "--policy", "fa3", "--kv-lens", "65536,1024,1024", "--device-model",
                 "h100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy"] == "fa3" and doc["plan"]["batch_size"] == 3
    assert len(doc["plan"]["splits_per_request"]) == 3 and doc["device"]["name"] == "h100"


def test_bench_formats_give_spread_bandwidth_and_ceiling_per_series(tmp_path, capsys):
    assert main(BENCH + ["--out", str(tmp_path / "a"), "--format", "csv"]) == 0
    records = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["series"] for r in records} == {"fa3", "fixed-split:chunk_tokens=4096"}
    for r in records:
        assert float(r["p10_us"]) <= float(r["median_us"]) <= float(r["p90_us"])
        assert float(r["achieved_tb_per_s"]) > 0 and 0 < float(r["ceiling_fraction"]) <= 1.5
    assert main(BENCH + ["--out", str(tmp_path / "b"), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(records)
    assert main(BENCH + ["--out", str(tmp_path / "c"), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| fixed-split:chunk_tokens=4096 |" in out.replace("  ", " ") or \
        "fixed-split:chunk_tokens=4096" in out.splitlines()[2]
    assert "TB/s" in out


def test_dashboard_on_a_taken_port_is_one_line_exit_2(capsys, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["dashboard", "--results", str(tmp_path), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already in use" in err and str(port) in err


def test_a_closed_pipe_ends_quietly():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "kvtune", "info"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as `kvtune info | head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 141) and "Traceback" not in err

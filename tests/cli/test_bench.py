"""`kvtune bench`, `plan`, `info` end to end on the simulator, and their handling of bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kvtune.harness import store
from kvtune.cli import main

THRESHOLD_CMD = [
    "bench", "--suite", "threshold",
    "--policies", "flashinfer-tensor-core,fa3,trtllm-oversub,no-split",
    "--backend", "simulator", "--device-model", "h200", "--no-progress",
]


def only_run(out):
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_threshold_bench_writes_a_complete_run_that_shows_the_jump(tmp_path, capsys):
    assert main(THRESHOLD_CMD + ["--out", str(tmp_path)]) == 0
    run = only_run(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["backend"] == "simulator" and manifest["simulated"] is True
    assert manifest["device"]["name"] == "h200"
    for key in ("command", "environment", "policies", "cases", "run_id"):
        assert key in manifest
    assert "git_commit" in manifest["environment"] and "torch_version" in manifest["environment"]
    rows = pd.read_parquet(run / "measurements.parquet")
    assert len(rows) == len(manifest["cases"]) * 4 == manifest["rows"]
    assert (rows["status"] == "ok").all() and (rows["backend"] == "simulator").all()
    for col in ("distribution", "batch_size", "num_qo_heads", "total_tokens", "policy", "policy_params",
                "latency_us", "bytes_moved", "achieved_bytes_per_s", "splits", "num_tasks", "grid_size"):
        assert col in rows.columns, col
    lat = rows.set_index(["distribution", "batch_size", "policy"])["latency_us"]
    # The threshold jump: FlashInfer's tensor-core planner stops splitting past B = 33 on 132 SMs.
    assert lat["skew80", 48, "flashinfer-tensor-core"] > 3 * lat["skew80", 16, "flashinfer-tensor-core"]
    assert lat["skew80", 48, "fa3"] < 1.3 * lat["skew80", 32, "fa3"]
    # The long request stays whole at B=48 under the tensor-core plan, split under fa3.
    split = rows.set_index(["distribution", "batch_size", "policy"])["splits"]
    assert split["skew80", 48, "flashinfer-tensor-core"][0] == 1
    assert split["skew80", 48, "fa3"][0] > 1
    out = capsys.readouterr()
    assert "simulated (h200)" in out.err
    assert "latency_us" in out.out and str(run) in out.out


@pytest.mark.parametrize(
    "argv, field",
    [
        (["bench", "--distribution", "zipf", "--batch-sizes", "4"], "distribution"),
        (["bench", "--suite", "smoke", "--policies", "flashinfer-magic"], "policy"),
        (["bench", "--distribution", "uniform-range", "--batch-sizes", "4", "--param", "lo=0"], "lo"),
        (["bench", "--distribution", "skew80", "--batch-sizes", "0"], "batch_size"),
        (["bench", "--suite", "smoke", "--num-kv-heads", "5"], "num_qo_heads"),
        (["bench", "--suite", "smoke", "--device-model", "h300"], "device-model"),
        (["bench", "--suite", "nope"], "suite"),
        (["bench", "--suite", "smoke", "--backend", "tpu"], "backend"),
        (["bench", "--suite", "smoke", "--policies", "fixed-split:chunk_tokens=-5"], "chunk_tokens"),
        (["plan", "--policy", "fa3", "--kv-lens", "0,5"], "kv-lens"),
        (["plan", "--policy", "fa3", "--kv-lens", "99999999999999999999999"], "kv-lens"),
        (["plan", "--policy", "fa3", "--kv-lens", "a,b"], "kv-lens"),
        (["bench", "--bogus-flag"], "unrecognized"),
        (["bench", "--suite", "smoke", "--stopping", "min_time_ms=10,patience=3"], "patience"),
        (["bench", "--suite", "smoke", "--stopping", "max_noise=2"], "max_noise"),
        (["bench", "--suite", "smoke", "--kv-dtype", "fp8_e5m2"], "kv_dtype"),
        (["bench", "--suite", "smoke", "--dtype", "fp8_e4m3"], "dtype"),
        (["bench", "--suite", "smoke", "--dtype", "fp16", "--kv-dtype", "bf16"], "kv_dtype"),
        (["bench", "--suite", "smoke", "--rounds", "0"], "rounds"),
        (["bench", "--suite", "smoke", "--rounds", "21"], "rounds"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, argv, field):
    out = tmp_path / "res"
    if argv[0] == "bench":
        argv = argv + ["--out", str(out), "--backend", "simulator"] if "--backend" not in argv else argv + ["--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvtune: error: ")
    assert field in err
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_a_crash_mid_run_keeps_the_rows_and_marks_the_run_failed(tmp_path, monkeypatch):
    from kvtune.harness import runner

    calls = {"n": 0}
    real = runner.Runner.measure_one

    def flaky(self, case, policy):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("GPU fell off the bus")
        return real(self, case, policy)

    monkeypatch.setattr(runner.Runner, "measure_one", flaky)
    with pytest.raises(RuntimeError):
        main(["bench", "--suite", "smoke", "--backend", "simulator", "--no-progress", "--out", str(tmp_path)])
    run = only_run(tmp_path)
    manifest = store.load_manifest(run)
    assert manifest["status"] == "failed" and "GPU fell off the bus" in manifest["error"]
    assert len(store.load_measurements(run)) == 3


def test_a_second_run_leaves_the_first_untouched(tmp_path):
    args = ["bench", "--suite", "smoke", "--backend", "simulator", "--no-progress", "--out", str(tmp_path)]
    assert main(args) == 0
    first = only_run(tmp_path)
    before = (first / "measurements.parquet").read_bytes()
    assert main(args + ["--policies", "fa3"]) == 0
    assert (first / "measurements.parquet").read_bytes() == before
    assert len(list(tmp_path.iterdir())) == 2


def test_fp8_kv_cache_reaches_the_rows_and_halves_the_kv_bytes(tmp_path):
    base = ["bench", "--distribution", "uniform", "--batch-sizes", "8", "--backend", "simulator",
            "--policies", "no-split", "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "bf16")]) == 0
    assert main(base + ["--kv-dtype", "fp8_e4m3", "--out", str(tmp_path / "fp8")]) == 0
    bf16 = store.load_measurements(only_run(tmp_path / "bf16"))
    fp8 = store.load_measurements(only_run(tmp_path / "fp8"))
    assert set(fp8["kv_dtype"]) == {"fp8_e4m3"} and set(bf16["kv_dtype"]) == {"bf16"}
    assert set(fp8["dtype"]) == {"bf16"}
    qo = 2 * 8 * 32 * 128 * 2
    assert int(fp8["bytes_moved"][0]) - qo == (int(bf16["bytes_moved"][0]) - qo) // 2


def test_policy_overrides_reach_the_rows(tmp_path):
    assert main(["bench", "--distribution", "skew80", "--batch-sizes", "8", "--backend", "simulator",
                 "--policies", "fixed-split:chunk_tokens=4096", "--no-progress", "--out", str(tmp_path)]) == 0
    rows = store.load_measurements(only_run(tmp_path))
    assert json.loads(rows["policy_params"][0])["chunk_tokens"] == 4096


def test_plan_prints_splits(capsys):
    assert main(["plan", "--policy", "fa3", "--kv-lens", "131072," + ",".join(["2048"] * 63),
                 "--device-model", "h100"]) == 0
    out = capsys.readouterr().out
    assert "splits_per_request: [8, 1, 1" in out


def test_info_without_gpu_says_so(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU" in out and "simulator: available" in out
    assert "fa3" in out and "skew80" in out


def test_auto_backend_without_gpu_is_the_simulator(tmp_path, capsys):
    assert main(["bench", "--suite", "smoke", "--no-progress", "--out", str(tmp_path)]) == 0
    assert "simulated" in capsys.readouterr().err
    assert set(store.load_measurements(only_run(tmp_path))["backend"]) == {"simulator"}


def test_gpu_backend_without_gpu_exits_2(tmp_path, capsys):
    assert main(["bench", "--suite", "smoke", "--backend", "triton", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "triton" in err and "GPU" in err
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize("rounds, noted", [("1", True), ("2", False)])
def test_a_gpu_run_slower_than_serial_in_one_round_points_to_rounds(tmp_path, capsys,
                                                                    monkeypatch, rounds, noted):
    """A measured hybrid run whose series reads > 2% slower than serial somewhere, in one round,
    names --rounds 2; with rounds, or on the simulator, no such note."""
    from kvtune.harness import bench

    real = bench.run_bench

    def as_if_measured(settings, command=""):
        outcome = real(settings, command)
        outcome.live = True  # the simulator's rows, read as a GPU run's
        for row in outcome.rows:
            row["simulated"] = False
        return outcome

    argv = ["bench", "--suite", "hybrid-quick", "--backend", "simulator", "--device-model", "h100",
            "--policies", "hybrid-serial,hybrid-colocated", "--no-progress",
            "--rounds", rounds, "--out", str(tmp_path)]
    monkeypatch.setattr(bench, "run_bench", as_if_measured)
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "hybrid cases by kind" in out.out and "False" in out.out  # colocated loses somewhere
    assert ("kvtune: note: measured in one round" in out.err) is noted
    assert ("--rounds 2" in out.err) is noted
    monkeypatch.setattr(bench, "run_bench", real)
    assert main(argv[:-2] + ["--out", str(tmp_path / "sim")]) == 0
    assert "--rounds 2" not in capsys.readouterr().err


def test_a_hybrid_file_for_another_shape_is_refused_before_anything_runs(tmp_path, capsys):
    """As a decode heuristic is: one line naming the field, exit 2, no run folder (it used to
    fail every row of the file's series one by one)."""
    from pathlib import Path

    path = (Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_calls"
            / "s21_hybrid_heuristic_h100_fallback.json")
    out = tmp_path / "res"
    argv = ["bench", "--suite", "hybrid-quick", "--backend", "simulator", "--no-progress",
            "--policies", f"hybrid-serial,hybrid-tuned:path={path}", "--out", str(out)]
    assert main(argv + ["--shape", "llama3-70b-tp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "shape.num_qo_heads" in err and "allowed: 32" in err
    assert not out.exists() or not any(out.iterdir())
    assert main(argv + ["--kv-dtype", "fp8_e4m3"]) == 2
    assert "shape.kv_dtype" in capsys.readouterr().err

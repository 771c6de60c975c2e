"""benchmarks/fit_fixed_costs.py: the refit of a model's fixed costs finds a known merge launch
cost in simulated rows, holds every other constant, and writes its provenance."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from kvtune.cli import main as kvtune_main
from kvtune.harness.device import sim_model, write_calibration

from tests.benchmark_scripts import load_benchmark


def _model_file(path, merge_launch_us):
    model = sim_model("h200", kernel="triton")
    write_calibration(replace(model, constants=replace(model.constants,
                                                       merge_launch_us=merge_launch_us)), path)
    return path


def _rows(tmp_path, model, name, seed):
    out = tmp_path / name
    assert kvtune_main(["bench", "--distribution", "skew80", "--batch-sizes", "4,8,16,32,64,128",
                        "--param", "total_tokens=16384",
                        "--seeds", str(seed), "--backend", "simulator", "--device-model",
                        str(model), "--policies",
                        "flashinfer-tensor-core,fixed-split,fixed-split:chunk_tokens=512",
                        "--no-progress", "--out", str(out), "--format", "csv"]) == 0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return str(run)


def test_the_refit_recovers_a_merge_launch_cost_and_writes_its_provenance(tmp_path, capsys):
    truth = _model_file(tmp_path / "truth.json", 2.0)
    start = _model_file(tmp_path / "start.json", 9.0)
    train, held = _rows(tmp_path, truth, "train", 0), _rows(tmp_path, truth, "held", 1)
    fit = load_benchmark("fit_fixed_costs")
    out = tmp_path / "refit.json"
    numbers = tmp_path / "fit.json"
    assert fit.main(["--device-model", str(start), "--train", train, "--held-out", held,
                     "--names", "merge_launch_us", "--write", str(out),
                     "--json", str(numbers)]) == 0
    got = json.loads(numbers.read_text())
    assert got["identified"] == ["merge_launch_us"]
    assert math.isclose(got["after"]["merge_launch_us"], 2.0, rel_tol=0.05)
    held_out = got["held out"]
    assert held_out["after"]["abs"] < 0.01 < held_out["before"]["abs"]
    written = json.loads(out.read_text())
    base = json.loads(start.read_text())
    changed = {k for k in base["constants"] if base["constants"][k] != written["constants"][k]}
    assert changed == {"merge_launch_us"}
    prov = written["source"]["fixed_cost_fit"]
    assert [r["run_id"] for r in prov["train_runs"]] == [train.rsplit("/", 1)[-1]]
    assert "/" not in prov["command"].split("--train ", 1)[1].split()[0]  # run ids, not paths
    assert fit.main(["--device-model", str(start), "--train", train, "--held-out", held,
                     "--names", "no_such_constant"]) == 2
    assert "no_such_constant" in capsys.readouterr().err

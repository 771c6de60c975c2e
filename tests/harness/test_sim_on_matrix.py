"""benchmarks/sim_on_matrix.py (the decode simulator judged on shape-matrix rows) and
benchmarks/fit_fp8_sim.py --kernel flashinfer-tensor-core, on rows made by the simulator itself,
so the right answers are known."""

import csv
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from kvtune.harness.device import sim_model
from kvtune.harness.sim_model import simulate

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["variant", "shape", "dtype", "kv_dtype", "page_size", "dist", "batch", "plan",
           "chunk_tokens", "num_tasks", "triton_us", "triton_status", "triton_config",
           "triton_launch_order", "flashinfer_us", "flashinfer_status"]
KERNELS = ("triton", "flashinfer-tensor-core")


def _script(name):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def _write(path, cases, scale=None, fi_fp8=1.0, break_tasks=False, total_tokens=None,
           fi_cta_factor=None, triton_order="product"):
    """A shapes.csv whose times are the H100 models' own predictions (times scale[kernel][plan]
    where given); FlashInfer's with fp8_stream_efficiency = fi_fp8 (and fp8_cta_rate_factor =
    fi_cta_factor where given, else the shipped file's) for fp8 rows; batches of total_tokens
    (default: the matrix's). triton_order: "product" (the model's default order, recorded in
    the rows' triton_launch_order, as bench_kernels writes it today) or "old" (the plan's order
    and no such column: rows from before the twenty-ninth session)."""
    bench = _script("bench_kernels")
    models = {k: sim_model("h100", k) for k in KERNELS}
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for variant, dist, batch, plan_name in cases:
            shape = bench.variant_shape(variant)
            b = bench.matrix_batch(dist, batch, shape, total_tokens or bench.TOTAL_TOKENS)
            plan, chunk = bench.matrix_plan(plan_name, b.kv_lens, shape, models["triton"].device)
            us = {}
            for k, m in models.items():
                c = m.constants
                if k != "triton" and shape.kv_is_fp8:
                    c = replace(c, fp8_stream_efficiency=fi_fp8)
                    if fi_cta_factor is not None:
                        c = replace(c, fp8_cta_rate_factor=fi_cta_factor)
                order = "plan" if k == "triton" and triton_order == "old" else None
                result = simulate(plan, shape, m.device, c, launch_order=order)
                us[k] = result.time_us
                if k == "triton":
                    ran = result.launch_order
                us[k] *= (scale or {}).get(k, {}).get(plan_name, 1.0)
            w.writerow({"variant": bench.variant_label(variant), "shape": variant[0],
                        "dtype": variant[1], "kv_dtype": variant[2], "page_size": variant[3],
                        "dist": dist, "batch": batch, "plan": plan_name, "chunk_tokens": chunk,
                        "num_tasks": plan.num_tasks + (1 if break_tasks else 0),
                        "triton_us": us["triton"], "triton_status": "ok",
                        "triton_config": "bn64-w4-s4-pa", "flashinfer_us":
                        us["flashinfer-tensor-core"], "flashinfer_status": "ok",
                        **({} if triton_order == "old" else {"triton_launch_order": ran})})


BF16 = ("llama3-8b", "bf16", "bf16", 16)
FP8 = ("llama3-8b", "bf16", "fp8_e4m3", 16)
TP8_FP8 = ("llama3-70b-tp8", "bf16", "fp8_e4m3", 16)


@pytest.mark.parametrize("order", ["product", "old"])
def test_the_models_own_times_read_no_error_and_every_plan_right(tmp_path, order):
    # Rows of today's kernel (longest first, recorded) and of the old one (the plan's order,
    # unrecorded) are each simulated in the order they ran.
    path = tmp_path / "shapes.csv"
    _write(path, [(BF16, "uniform", 64, "fixed-2048"), (BF16, "uniform", 64, "balanced-2x"),
                  (BF16, "skew80", 8, "fixed-2048"), (BF16, "skew80", 8, "balanced-2x")],
           triton_order=order)
    out = tmp_path / "out.json"
    assert _script("sim_on_matrix").main([str(path), "--device-model", "h100",
                                          "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for k in KERNELS:
        assert res["kernels"][k]["all"]["median_abs_error"] < 1e-9
        assert res["kernels"][k]["plan_choice"]["agree"] == 2 == \
            res["kernels"][k]["plan_choice"]["cases"]


def test_a_plan_the_gpu_ran_slower_is_a_miss_with_its_loss(tmp_path):
    # The GPU's time for the plan the model prefers is made 1.5x the model's: the other plan is
    # then the GPU's best, and the model's pick a miss with the loss the rows give.
    path = tmp_path / "shapes.csv"
    cases = [(BF16, "uniform", 64, "fixed-2048"), (BF16, "uniform", 64, "balanced-2x")]
    _write(path, cases)
    m = sim_model("h100", "triton")
    model = {r["plan_name"]: r["gpu_us"]["triton"]
             for r in _script("sim_on_matrix").load_rows([str(path)], m.device)}
    pick, other = sorted(model, key=model.get)
    assert model[other] < 1.5 * model[pick]  # else the case cannot show a miss
    _write(path, cases, scale={"triton": {pick: 1.5}})
    out = tmp_path / "out.json"
    assert _script("sim_on_matrix").main([str(path), "--json", str(out)]) == 0
    pc = json.loads(out.read_text())["kernels"]["triton"]["plan_choice"]
    assert pc["agree"] == 0 and len(pc["misses"]) == 1
    assert pc["max_regret"] == pytest.approx(1.5 * model[pick] / model[other] - 1)


def test_a_row_that_does_not_rebuild_stops_the_script(tmp_path):
    path = tmp_path / "shapes.csv"
    _write(path, [(BF16, "uniform", 64, "fixed-2048")], break_tasks=True)
    with pytest.raises(SystemExit, match="does not rebuild"):
        _script("sim_on_matrix").main([str(path)])


def test_rows_of_other_totals_rebuild_with_their_total_tokens(tmp_path):
    # The matrix's second total (bench_kernels --total-tokens 196608): the default rebuild has
    # other task counts and stops; with the rows' total the models' own times read no error.
    path = tmp_path / "shapes.csv"
    _write(path, [(BF16, "uniform", 8, "fixed-2048"), (BF16, "uniform", 8, "balanced-2x")],
           total_tokens=196608)
    with pytest.raises(SystemExit, match="does not rebuild"):
        _script("sim_on_matrix").main([str(path)])
    out = tmp_path / "out.json"
    assert _script("sim_on_matrix").main([str(path), "--total-tokens", "196608",
                                          "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["rows"] == 2
    assert res["kernels"]["triton"]["all"]["median_abs_error"] < 1e-9


def test_fit_recovers_flashinfers_fp8_share(tmp_path):
    train, held = tmp_path / "train.csv", tmp_path / "held.csv"
    # Rows of a FlashInfer whose fp8 differs by its stream share alone (the script's default fit).
    _write(train, [(FP8, "uniform", 64, "fixed-2048"), (FP8, "skew80", 64, "fixed-2048"),
                   (FP8, "uniform", 256, "balanced-2x")], fi_fp8=0.6, fi_cta_factor=1.0)
    _write(held, [(TP8_FP8, "uniform", 64, "fixed-2048"), (FP8, "skew80", 8, "balanced-2x")],
           fi_fp8=0.6, fi_cta_factor=1.0)
    out = tmp_path / "fit.json"
    fit = _script("fit_fp8_sim")
    assert fit.main(["--kernel", "flashinfer-tensor-core", "--device-model", "h100",
                     "--train-shapes", str(train), "--held-out", str(held),
                     "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["kernel"] == "flashinfer-tensor-core"
    assert res["fp8_stream_efficiency"] == pytest.approx(0.6)
    assert res["train"]["all"]["after"]["median_abs_error"] < 1e-9
    with pytest.raises(SystemExit):  # FlashInfer has no configuration sweep to train on
        fit.main(["--kernel", "flashinfer-tensor-core", "--train-sweep", str(out),
                  "--held-out", str(held)])


def test_the_launch_order_of_the_rows_moves_the_triton_reading(tmp_path):
    # Skewed rows launched longest first, read as if they had run in the plan's order: the
    # model's reading moves, so the order column is not decoration.
    path = tmp_path / "shapes.csv"
    _write(path, [(BF16, "skew80", 64, "balanced-2x")])
    m = sim_model("h100", "triton")
    rows = _script("sim_on_matrix").load_rows([str(path)], m.device)
    assert [r["launch_order"] for r in rows] == ["longest-first"]
    forced = _script("sim_on_matrix").load_rows([str(path)], m.device,
                                                triton_launch_order="plan")
    assert forced[0]["launch_order"] == "plan"
    out = tmp_path / "out.json"
    assert _script("sim_on_matrix").main([str(path), "--device-model", "h100", "--json",
                                          str(out), "--triton-launch-order", "plan"]) == 0
    assert json.loads(out.read_text())["kernels"]["triton"]["all"]["median_abs_error"] > 0.01

"""The shipped calibrations against real GPU rows (tests/fixtures/gpu, H200 measurements
transcribed from docs/PERFORMANCE.md by build_from_performance_md.py), so CI keeps them honest.

- Replaying a GPU row plans what the GPU ran: the items and grid the run recorded come back.
- Each shipped H200 calibration meets issue 14's targets on rows of its kernel (the Triton one on
  a run it was not fitted to); the hand-set preset constants do not (that is why they were
  replaced).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kvtune.harness.device import CALIBRATIONS_DIR, DEVICE_MODELS, SimModel, sim_model
from kvtune.harness.fidelity import fidelity, load_rows, replay
from kvtune.harness.sim_model import DEFAULT_CONSTANTS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
KERNELS_RUN = FIXTURES / "h200-triton-kernels"
TRITON_HELD_OUT = FIXTURES / "h200-bench-flashinfer-triton"
FLASHINFER_RUN = FIXTURES / "h200-bench-flashinfer-flashinfer"


def test_replayed_plans_are_the_plans_the_gpu_ran():
    rows = load_rows([KERNELS_RUN])
    rep = replay(rows.frame, rows.devices)
    assert len(rep.frame) == 36 and all(p is not None for p in rep.plans)
    for plan, items, grid in zip(rep.plans, rep.frame["items"], rep.frame["grid"]):
        assert (plan.num_items, plan.grid_size) == (items, grid)


def test_shipped_h200_calibrations_name_their_runs():
    shipped = {p.name for p in CALIBRATIONS_DIR.glob("*.json")}
    assert {"h200-flashinfer-cuda-core.json", "h200-flashinfer-tensor-core.json",
            "h200-triton.json"} <= shipped
    for kernel in ("triton", "flashinfer-tensor-core", "flashinfer-cuda-core"):
        model = sim_model("h200", kernel)
        assert model.calibrated and model.kernel == kernel
        assert model.source["run_commands"] and model.source["run_dates"]
    for name in ("a100", "h20", "b200", "l40s"):  # nobody measured these
        assert not sim_model(name, "triton").calibrated


def test_triton_calibration_on_a_run_it_was_not_fitted_to():
    rows = load_rows([TRITON_HELD_OUT])
    model = sim_model("h200", "triton")
    assert "h200-bench-flashinfer-triton" not in model.source["runs"]
    report, _ = fidelity(rows, "triton", model)
    s = report.summary
    assert s["median_spearman"] >= 0.9 and s["regret_worst"] <= 0.10
    assert s["median_abs_error"] <= 0.10
    # The hand-set constants on the datasheet device miss the latency target on the same rows.
    uncal = SimModel(DEVICE_MODELS["h200"], DEFAULT_CONSTANTS, "triton")
    assert fidelity(rows, "triton", uncal)[0].summary["median_abs_error"] > 0.10


@pytest.mark.parametrize("kernel", ["flashinfer-tensor-core", "flashinfer-cuda-core"])
def test_flashinfer_calibrations_on_their_rows(kernel):
    rows = load_rows([FLASHINFER_RUN])
    report, _ = fidelity(rows, kernel, sim_model("h200", kernel))
    assert report.summary["median_abs_error"] <= 0.10
    if kernel == "flashinfer-tensor-core":  # two plans per batch: own planner and tuned chunk
        assert report.summary["regret_worst"] <= 0.10


# Measured rows of runs no shipped calibration was fitted to: the traces suite (other lengths)
# of the H200 and H100 calls of 2026-11-26 (benchmarks/collect_rows_gpu.sh), mooncake and
# azure-conv cases. The shipped H200/H100 Triton and FlashInfer tensor-core calibrations were fitted
# to the threshold and prod-mix runs of the same calls. What they reach here is pinned so that CI
# catches a model change that makes them worse; issue 14's targets (median Spearman >= 0.9,
# regret <= 3% geomean / 10% worst, median |error| <= 10%) are met for the latency error on every
# card and kernel, and not everywhere for the ranking (docs/PERFORMANCE.md, fidelity table).
HELD_OUT_LEVELS = {
    # (card, kernel): (median Spearman >=, regret geomean <=, regret worst <=, median |error| <=)
    ("h200", "triton"): (0.85, 0.06, 0.35, 0.10),
    ("h200", "flashinfer-tensor-core"): (0.85, 0.03, 0.25, 0.10),
    ("h100", "triton"): (0.85, 0.03, 0.10, 0.10),
    ("h100", "flashinfer-tensor-core"): (0.85, 0.03, 0.10, 0.10),
}


@pytest.mark.parametrize("card, kernel", sorted(HELD_OUT_LEVELS))
def test_shipped_calibrations_on_held_out_gpu_rows(card, kernel):
    backend = "triton" if kernel == "triton" else "flashinfer"
    rows = load_rows([FIXTURES / f"{card}-traces-{backend}"])
    model = sim_model(card, kernel)
    assert model.calibrated and model.source["date"] == "2026-11-26"
    assert not set(model.source["runs"]) & {p.name for p in (FIXTURES / f"{card}-traces-{backend}").iterdir()}
    s = fidelity(rows, kernel, model)[0].summary
    spearman, regret_geo, regret_worst, error = HELD_OUT_LEVELS[(card, kernel)]
    assert s["median_spearman"] >= spearman and s["regret_geomean"] <= regret_geo, s
    assert s["regret_worst"] <= regret_worst and s["median_abs_error"] <= error, s
    # The hand-set constants on the datasheet device are further off in latency (they were
    # once fitted to FlashInfer's tensor-core kernel alone, so there the gap is smaller).
    uncal = SimModel(DEVICE_MODELS[card], DEFAULT_CONSTANTS, kernel)
    assert fidelity(rows, kernel, uncal)[0].summary["median_abs_error"] > 1.3 * s["median_abs_error"]

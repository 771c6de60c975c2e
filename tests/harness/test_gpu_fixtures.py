"""The shipped calibrations against real GPU rows (tests/fixtures/gpu: H200 measurements
transcribed from docs/PERFORMANCE.md by build_from_performance_md.py, and subsets of GPU runs
that no calibration was fitted to), so CI keeps them honest.

- Replaying a GPU row plans what the GPU ran: the items and grid the run recorded come back.
- Each shipped calibration meets issue 14's targets on held-out rows of its kernel; the
  hand-set preset constants do not (that is why they were replaced).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kvtune.harness.device import CALIBRATIONS_DIR, DEVICE_MODELS, SimModel, sim_model
from kvtune.harness.fidelity import fidelity, load_rows, replay
from kvtune.harness.sim_model import DEFAULT_CONSTANTS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
KERNELS_RUN = FIXTURES / "h200-triton-kernels"
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


def test_triton_calibration_describes_the_current_kernel():
    """The Triton calibration is fitted to rows of the kernel configuration it stands for: the
    H200 runs after the config table of 2026-11-26 10:27 UTC (bn64-w4-s4-pa, 2 CTAs per SM, in
    harness.calibration.KERNEL_START). The transcribed rows of h200-bench-flashinfer-triton ran
    the earlier bn128-w4-s2 (3 per SM) and are no longer a check of it (the held-out traces rows
    below are)."""
    from kvtune.harness.calibration import KERNEL_START

    import torch
    from kvtune.kernels.decode_config import default_config

    model = sim_model("h200", "triton")
    assert model.constants.kernel_ctas_per_sm == KERNEL_START["triton"]["kernel_ctas_per_sm"]
    assert all(date >= "2026-11-26T10:27" for date in model.source["run_dates"].values())
    assert "h200-bench-flashinfer-triton" not in model.source["runs"]
    # The loop steps of the two variants the rows ran (bf16, head_dim 128, page 16, G = 4).
    start = KERNEL_START["triton"]
    for ctas_per_sm, key in ((2, "block_tokens"), (1, "single_cta_block_tokens")):
        config = default_config(128, torch.bfloat16, 16, ctas_per_sm, num_kv_heads=8, group_size=4)
        assert start[key] == config.block_n, key


@pytest.mark.parametrize("kernel", ["flashinfer-tensor-core", "flashinfer-cuda-core"])
def test_flashinfer_calibrations_on_their_rows(kernel):
    rows = load_rows([FLASHINFER_RUN])
    report, _ = fidelity(rows, kernel, sim_model("h200", kernel))
    assert report.summary["median_abs_error"] <= 0.10
    if kernel == "flashinfer-tensor-core":  # two plans per batch: own planner and tuned chunk
        assert report.summary["regret_worst"] <= 0.10


# Measured rows of runs no shipped calibration was fitted to: the traces suite (other lengths),
# mooncake and azure-conv cases, of GPU calls of 2026-11-26 (benchmarks/collect_rows_gpu.sh).
# Triton: the H200 call of 11:42 and the H100 call of 12:30 UTC, each decode replayed from a CUDA
# graph (TIMER=graph), with the kernel configuration of that day's 10:27 table; the shipped
# h200-triton.json and h100-triton.json were fitted to the threshold and prod-mix runs of the
# same calls. FlashInfer: the 06:33/06:38 calls (CUPTI), whose threshold and prod-mix runs the
# FlashInfer tensor-core calibrations were fitted to. What they
# reach here is pinned (a little below the levels reached, so that CI catches a model change
# that makes them worse). Issue 14's targets (median Spearman >= 0.9, regret <= 3% geomean / 10%
# worst, median |error| <= 10%) are met on these rows except the FlashInfer Spearman (three of
# five policies often plan the same launch, whose GPU order is noise).
HELD_OUT_LEVELS = {
    # (card, kernel): (median Spearman >=, regret geomean <=, regret worst <=, median |error| <=)
    # reached 2026-11-26 (graph replays, 11:45 UTC rows; model with tile quantisation and one
    # program per task, fourth session): 0.954, 0.39%, 3.5%, 1.6%
    ("h200", "triton"): (0.92, 0.01, 0.05, 0.03),
    # reached: 0.894, 0.23%, 3.8%, 1.7%
    ("h200", "flashinfer-tensor-core"): (0.87, 0.01, 0.06, 0.03),
    # reached (graph replays, 12:31 UTC rows; same model): 0.945, 0.36%, 4.4%, 0.94%
    ("h100", "triton"): (0.92, 0.01, 0.05, 0.02),
    # reached: 0.900, 0.34%, 7.3%, 0.95%
    ("h100", "flashinfer-tensor-core"): (0.87, 0.01, 0.09, 0.02),
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

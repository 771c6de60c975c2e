"""Fitting the simulator's constants to GPU measurement rows: one model per (device, kernel).

`calibrate(rows, kernel)` takes the usable rows of GPU bench runs (harness.fidelity.load_rows),
keeps those of one kernel, holds out a share of the batches (whole cases, chosen with a seeded
permutation) and fits the SimConstants that minimise the robust loss of log(simulated / measured)
latency over the rest, with scipy.optimize.least_squares (trust-region reflective, bounds,
soft-L1 loss with a 5% scale, finite-difference Jacobian, a weak prior toward the starting
constants for directions the rows do not pin down). The held-out batches give the fit's
honest numbers: per-batch Spearman, top-1 agreement, regret, latency error (harness.fidelity).

What is fitted, and when (a constant the rows cannot identify keeps its starting value and is
listed as not identified):
- hbm_efficiency: share of the run's measured copy bandwidth that streaming reaches (always);
- cta_rate_cap_bytes_per_s: one CTA's streaming cap (always);
- cta_start_us: a CTA's start cost, the per-work-item fixed cost (always);
- launch_us: the first launch (always);
- merge_launch_us: the merge kernel's fixed cost (rows with a merge; merge_fixed_us is folded
  into it and set to 0, the two are indistinguishable);
- persistent_task_us: later tasks of a persistent CTA (rows with persistent plans);
- empty_cta_us: programs launched with no work (rows whose plans launch some);
- residency_exponent: the per-CTA cap of launches built for several CTAs per SM (rows with
  more than one ctas_per_sm);
- inflight_exponent: the per-CTA cap with other KV bytes per token (rows with more than one);
- saturation_sharpness: how sharply n streaming CTAs reach the bandwidth (when the start has a
  finite one: KERNEL_START gives it for the Triton and FlashInfer tensor-core kernels);
- merge_issue_us, merge_row_us, merge_per_split_us: the merge's earliest start after the first
  launch, its time per merged (request, query head) row per SM and per split (rows with a merge);
- fp8_stream_efficiency: the fp8 kernel's share of the streaming bandwidth (rows with both an fp8
  and a 16-bit KV cache; fp8 rows alone cannot tell it from hbm_efficiency). A fit without fp8
  rows keeps the start's value (1.0, so a refit on 16-bit rows alone drops a fitted fp8 term:
  run benchmarks/fit_fp8_sim.py again after it); the replay (harness/fidelity.py row_shape)
  reads each row's kv_dtype. benchmarks/fit_fp8_sim.py fits it alone on fp8 rows, the other
  constants held.
How each kernel occupies an SM (kernel_ctas_per_sm, single_cta_variant), the tokens of its
inner loop's step (block_tokens, single_cta_block_tokens) and whether it launches the upstream
kernel's extra programs (one_program_per_task) is not fitted: it is KERNEL_START's,
from the kernel's source and the rows that show it.
The fit runs on the runs' GPU (SM count, L2) with the median measured copy bandwidth as
hbm_bytes_per_s; the file then keeps the matching preset's datasheet figures (name, L2,
bandwidth) with hbm_efficiency rescaled to them, so a calibrated preset plans like the datasheet
one (an unknown GPU keeps the measured figures). For FlashInfer's CUDA-core kernel the occupancy (CTAs per SM, what its
planner sizes the grid by) is read from FlashInfer's own decisions in the rows (fi_split_kv,
fi_chunk_tokens): the occupancy whose plans match the most rows; without those columns the runs'.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from kvtune.harness.device import SimModel, check_sim_kernel, model_for_gpu_name
from kvtune.harness.fidelity import GpuRows, compare, replay, simulate_replay
from kvtune.harness.sim_model import (
    DEFAULT_CONSTANTS,
    SimConstants,
    empty_programs,
    merged_requests,
    resident_ctas_per_sm,
)
from kvtune.kernels.plan import DeviceSpec

DEFAULT_HOLDOUT_SHARE = 0.25
DEFAULT_MAX_FIT_ROWS = 400
DEFAULT_MAX_EVALUATIONS = 60
# The loss's scale: residuals are log latency ratios, so 0.05 is about a 5% error.
LOSS_SCALE = 0.05

# A weak prior keeps constants the rows barely tell apart (launch cost against bandwidth when
# every batch moves the same bytes) near their start: one extra residual per constant,
# PRIOR_WEIGHT * (value - start) / PRIOR_SCALE, i.e. a one-scale move costs what a 5% error on
# one row costs. Rows that identify a constant outweigh it.
PRIOR_WEIGHT = 0.05
PRIOR_SCALE = {
    "hbm_efficiency": 0.1,
    "cta_rate_cap_bytes_per_s": 20e9,
    "cta_start_us": 2.0,
    "launch_us": 3.0,
    "merge_launch_us": 3.0,
    "persistent_task_us": 1.0,
    "empty_cta_us": 1.0,
    "residency_exponent": 0.5,
    "inflight_exponent": 0.5,
    "merge_issue_us": 10.0,
    "merge_per_split_us": 0.5,
    "merge_row_us": 0.5,
    "saturation_sharpness": 2.0,
    "fp8_stream_efficiency": 0.1,
}

# name -> (unit the optimizer sees, lower bound, upper bound), in the constant's own units.
FIT_BOUNDS = {
    "hbm_efficiency": (1.0, 0.2, 1.25),
    "cta_rate_cap_bytes_per_s": (1e9, 1e9, 4e12),
    "cta_start_us": (1.0, 0.0, 50.0),
    "launch_us": (1.0, 0.0, 50.0),
    "merge_launch_us": (1.0, 0.0, 50.0),
    "persistent_task_us": (1.0, 0.0, 50.0),
    "empty_cta_us": (1.0, 0.0, 20.0),
    "residency_exponent": (1.0, 0.0, 2.0),
    "inflight_exponent": (1.0, -2.0, 2.0),
    "merge_issue_us": (1.0, 0.0, 80.0),
    "merge_per_split_us": (1.0, 0.0, 5.0),
    "merge_row_us": (1.0, 0.0, 10.0),
    "saturation_sharpness": (1.0, 0.5, 20.0),
    "fp8_stream_efficiency": (1.0, 0.2, 1.0),
}

# What the fit starts from, per kernel: how the kernel occupies an SM (not fitted: a count) and a
# finite roofline sharpness for the optimizer to move.
# - triton: kvtune's stage-1 kernel has two variants for the default shape
#   (kernels/decode_config.py): plans built for one CTA per SM get the 8-warp page-ahead one
#   (bn128-w8-s3-pa, 136 KB of shared memory), which fills an SM; every other plan runs the
#   4-warp page-ahead one (bn64-w4-s4-pa, 102 KB: 2 per SM by shared memory, local sm_90 compile,
#   benchmarks/compile_survey.py), whatever ctas_per_sm the plan counted. Until the table
#   changed (2026-11-26, 10:27 UTC) that variant was bn128-w4-s2 (72 KB, 3 per SM): the H200
#   rows of 06:33 showed 3, and the fit to the graph-replay rows of 11:42 (the new variant)
#   held out reaches median Spearman 0.90 and 3.6% worst regret with 2, 0.85 and 21% with 3.
#   When the config table changes, this count must follow it. The backend launches one program
#   per planned task (grid (items, KV heads), or the plan's persistent grid): the extra programs
#   SGLang's and vLLM's own kernels would launch (plan.notes launched_ctas, kv_reads_per_task)
#   do not run (one_program_per_task). Charging them had the fit put 0.7 us on each (H100 and
#   H200 graph rows), which made SGLang's plans 1-5% too slow on the held-out traces. The
#   variants' inner loops step 64 (bn64) and 128 (bn128) tokens (block_tokens,
#   single_cta_block_tokens): a task's partial last block costs a whole step.
# - flashinfer-tensor-core: FlashInfer's prefill kernel at PrefillPlan's 2 CTAs per SM for every
#   plan (its fixed-split and no-split plans too: same kernel, same registers).
# - flashinfer-cuda-core: the occupancy comes from the rows (infer_cuda_core_occupancy) and is the
#   device's max_ctas_per_sm, so the plan's count is used (kernel_ctas_per_sm 0).
KERNEL_START = {
    "triton": {"kernel_ctas_per_sm": 2, "single_cta_variant": True, "one_program_per_task": True,
               "block_tokens": 64, "single_cta_block_tokens": 128, "saturation_sharpness": 4.0},
    "flashinfer-tensor-core": {"kernel_ctas_per_sm": 2, "saturation_sharpness": 4.0},
    "flashinfer-cuda-core": {},
}


@dataclass
class CalibrationResult:
    """A fitted model and how good it is.

    model: the SimModel (device, constants, kernel, calibrated=True, source).
    fitted / not_identified: constant names. fit_summary / held_out_summary: harness.fidelity
    summaries of the fit rows and the held-out rows (held_out_summary is {} with no held-out
    rows). rows_fit, rows_held_out: row counts. cost: least_squares' final cost.
    """

    model: SimModel
    fitted: list
    not_identified: list
    fit_summary: dict
    held_out_summary: dict
    rows_fit: int
    rows_held_out: int
    cost: float
    held_out_report: object = None
    notes: dict = field(default_factory=dict)


def split_cases(frame: pd.DataFrame, share: float, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fit, held out): whole batches (run, case, shape) held out with a seeded permutation."""
    if not 0 <= share < 1:
        raise ValueError(f"holdout_share: {share} out of range; allowed: 0 <= share < 1")
    keys = frame["run_id"].astype(str) + "|" + frame["case_id"].astype(str) + "|" + \
        frame["num_kv_heads"].astype(str) + "|" + frame["head_dim"].astype(str)
    unique = np.array(sorted(keys.unique()))
    rng = np.random.default_rng(seed)
    rng.shuffle(unique)
    n_hold = round(share * len(unique))
    if share > 0 and len(unique) >= 2:
        n_hold = min(max(n_hold, 1), len(unique) - 1)
    held = set(unique[:n_hold])
    mask = keys.isin(held)
    return frame[~mask], frame[mask]


def infer_cuda_core_occupancy(frame: pd.DataFrame, devices: dict, default: int) -> tuple[int, int]:
    """(occupancy, rows matched): the CTAs per SM whose flashinfer-cuda-core plans agree with the
    most of FlashInfer's own decisions recorded in the rows (fi_split_kv, fi_chunk_tokens).
    `default` and 0 when the rows hold no decision."""
    from kvtune.kernels.baselines_flashinfer import FlashInferCudaCorePolicy

    if "fi_split_kv" not in frame.columns or "fi_chunk_tokens" not in frame.columns:
        return default, 0
    rows = frame[(frame["policy"] == "flashinfer-cuda-core") & frame["fi_split_kv"].notna()]
    if rows.empty:
        return default, 0
    from kvtune.harness.fidelity import row_kv_lens, row_shape

    best, best_hits = default, -1
    for occ in range(1, 33):
        hits = 0
        for row in rows.to_dict("records"):
            dev = devices[row["run_id"]]
            dev = DeviceSpec(dev.name, dev.sm_count, dev.l2_bytes, dev.hbm_bytes_per_s, occ)
            shape = row_shape(row)
            try:
                plan = FlashInferCudaCorePolicy(occupancy_ctas_per_sm=occ).plan(
                    row_kv_lens(row, shape), shape, dev)
            except ValueError:
                continue
            split = bool(plan.notes.get("split_kv"))
            agree = split == bool(row["fi_split_kv"])
            if agree and split:
                chunk = int(plan.notes["chunk_pages"]) * shape.page_size
                agree = chunk == int(row["fi_chunk_tokens"])
            hits += int(agree)
        if hits > best_hits:
            best, best_hits = occ, hits
    return best, best_hits


def identifiable(rep, frame: pd.DataFrame, device: DeviceSpec,
                 start: SimConstants = DEFAULT_CONSTANTS) -> list[str]:
    """The constants the replayed rows can tell apart (see the module docstring); `device` and
    `start` give the CTAs per SM each plan runs at."""
    names = ["hbm_efficiency", "cta_rate_cap_bytes_per_s", "cta_start_us", "launch_us"]
    if not math.isinf(start.saturation_sharpness):
        names.append("saturation_sharpness")
    plans = [p for p in rep.plans if p is not None]
    if any(merged_requests(p).any() for p in plans):
        names += ["merge_launch_us", "merge_issue_us", "merge_row_us", "merge_per_split_us"]
    if any(p.is_persistent and p.grid_size < p.num_tasks for p in plans):
        names.append("persistent_task_us")
    if any(empty_programs(p, start) > 0 for p in plans):
        names.append("empty_cta_us")
    if len({resident_ctas_per_sm(p, device, start) for p in plans}) > 1:
        names.append("residency_exponent")
    if len({s.kv_bytes_per_token_per_head for s in rep.shapes}) > 1:
        names.append("inflight_exponent")
    if len({s.kv_is_fp8 for s in rep.shapes}) > 1:
        names.append("fp8_stream_efficiency")
    return names


def _to_x(constants: SimConstants, names: list[str]) -> np.ndarray:
    return np.array([getattr(constants, n) / FIT_BOUNDS[n][0] for n in names], dtype=float)


def _from_x(x: np.ndarray, start: SimConstants, names: list[str]) -> SimConstants:
    values = {n: float(v) * FIT_BOUNDS[n][0] for n, v in zip(names, x)}
    return replace(start, **values)


def fit_constants(rep, device: DeviceSpec, measured_us: np.ndarray, names: list[str],
                  start: SimConstants = DEFAULT_CONSTANTS, max_evaluations: int = DEFAULT_MAX_EVALUATIONS):
    """least_squares over `names`; returns (constants, cost, the names the rows identified).
    Rows without a plan are ignored."""
    from scipy.optimize import least_squares

    keep = np.array([p is not None for p in rep.plans])
    log_measured = np.log(measured_us)

    x_start = _to_x(start, names)
    prior_scale = np.array([PRIOR_SCALE[n] / FIT_BOUNDS[n][0] for n in names])

    def residuals(x):
        sim = simulate_replay(rep, device, _from_x(x, start, names))
        r = np.where(keep, np.log(sim) - log_measured, 0.0)
        return np.concatenate([r, PRIOR_WEIGHT * (x - x_start) / prior_scale])

    lower = np.array([FIT_BOUNDS[n][1] / FIT_BOUNDS[n][0] for n in names])
    upper = np.array([FIT_BOUNDS[n][2] / FIT_BOUNDS[n][0] for n in names])
    x0 = np.clip(x_start, lower + 1e-9, upper - 1e-9)  # the optimizer starts strictly inside
    # A 2% finite-difference step: the event model is piecewise smooth (wave boundaries), so a
    # step that spans small kinks gives a more useful slope than a tiny one.
    result = least_squares(residuals, x0, bounds=(lower, upper), loss="soft_l1", f_scale=LOSS_SCALE,
                           diff_step=0.02, max_nfev=max_evaluations, x_scale="jac")
    # A constant whose Jacobian column is zero moved no prediction: the rows do not identify it,
    # so it keeps its starting value rather than wherever the optimizer left it.
    rows_jac = result.jac[: len(keep)]
    moved = np.abs(rows_jac).max(axis=0) > 1e-9 if rows_jac.size else np.zeros(len(names), bool)
    x = np.where(moved, result.x, x_start)
    identified = [n for n, m in zip(names, moved) if m]
    return _from_x(x, start, names), float(result.cost), identified


def calibrate(rows: GpuRows, kernel: str, *, holdout_share: float = DEFAULT_HOLDOUT_SHARE,
              held_out: GpuRows | None = None, seed: int = 0,
              max_fit_rows: int = DEFAULT_MAX_FIT_ROWS,
              max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
              start: SimConstants = DEFAULT_CONSTANTS, name: str | None = None,
              command: str = "") -> CalibrationResult:
    """Fit the constants of `kernel` to `rows` (see the module docstring).

    held_out: rows of other runs used only to evaluate (e.g. other traces and seeds).
    max_fit_rows: at most this many rows are fitted (whole batches, seeded choice), to bound
    the time: each evaluation simulates every fitted row. name: the model's device name
    (default: the preset matching the GPU's name, else the GPU's name).
    """
    kernel = check_sim_kernel(kernel)
    frame = rows.for_kernel(kernel)
    if frame.empty:
        raise ValueError(f"kernel: no row of kernel {kernel!r} in the runs; found: "
                         + (", ".join(rows.kernels()) or "none"))
    fit_frame, hold_frame = split_cases(frame, holdout_share, seed)
    if len(fit_frame) > max_fit_rows:
        fit_frame, _ = split_cases(fit_frame, 1 - max_fit_rows / len(fit_frame), seed + 1)
    run_devices = [rows.devices[r] for r in frame["run_id"].unique()]
    gpu = run_devices[0]
    if any(d.sm_count != gpu.sm_count for d in run_devices):
        raise ValueError("from: the runs were measured on GPUs with different SM counts; "
                         "calibrate one GPU at a time")
    bandwidth = float(np.median([rows.copy_bandwidth[r] for r in frame["run_id"].unique()]))
    occupancy, matched = gpu.max_ctas_per_sm, 0
    if kernel == "flashinfer-cuda-core":
        occupancy, matched = infer_cuda_core_occupancy(frame, rows.devices, gpu.max_ctas_per_sm)
    preset = model_for_gpu_name(gpu.name)
    # Fit against the measured copy bandwidth; the file keeps the preset's datasheet figure (so a
    # calibrated preset plans and reports like the uncalibrated one) with hbm_efficiency rescaled.
    fit_device = DeviceSpec(name or (preset.name if preset else gpu.name), gpu.sm_count,
                            gpu.l2_bytes, bandwidth, occupancy, live=False)

    rep = replay(fit_frame, rows.devices, occupancy)
    measured = rep.frame["latency_us"].to_numpy(float)
    start = replace(start, merge_launch_us=start.merge_launch_us + start.merge_fixed_us,
                    merge_fixed_us=0.0, **KERNEL_START[kernel])
    names = identifiable(rep, fit_frame, fit_device, start)
    constants, cost, names = fit_constants(rep, fit_device, measured, names, start, max_evaluations)
    device = fit_device
    if preset is not None and name is None:
        device = DeviceSpec(preset.name, gpu.sm_count, preset.l2_bytes, preset.hbm_bytes_per_s,
                            occupancy, live=False)
        constants = replace(constants, hbm_efficiency=constants.hbm_efficiency * bandwidth
                            / preset.hbm_bytes_per_s)
    fit_report = compare(rep.frame.assign(sim_us=simulate_replay(rep, device, constants)))

    hold_frames = [hold_frame]
    hold_devices = dict(rows.devices)
    if held_out is not None:
        hold_frames.append(held_out.for_kernel(kernel))
        hold_devices.update(held_out.devices)
    hold_all = pd.concat(hold_frames, ignore_index=True)
    held_report = None
    if not hold_all.empty:
        hrep = replay(hold_all, hold_devices, occupancy)
        held_report = compare(hrep.frame.assign(sim_us=simulate_replay(hrep, device, constants)))
    runs = sorted(frame["run_id"].unique())
    source = {
        "date": _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
        "gpu": gpu.name,
        "command": command,
        "runs": runs,
        "run_commands": {r: rows.manifests[r].get("command", "") for r in runs},
        "run_dates": {r: rows.manifests[r].get("started_at", "") for r in runs},
        "held_out_runs": sorted(held_out.frame["run_id"].unique()) if held_out is not None else [],
        "fitted": names,
        "not_identified": [n for n in FIT_BOUNDS if n not in names],
        "rows_fit": len(rep.frame),
        "rows_held_out": len(hold_all),
        "fit": fit_report.summary,
        "held_out": held_report.summary if held_report is not None else {},
        "occupancy_rows_matched": matched,
        "copy_bandwidth_bytes_per_s": bandwidth,
    }
    if device is not fit_device:
        source["note"] = (f"fitted against the measured copy bandwidth ({bandwidth / 1e12:.3f} TB/s); "
                          "stored on the preset's datasheet bandwidth with hbm_efficiency rescaled, "
                          "as kvtune calibrate does for a preset card")
    model = SimModel(device, constants, kernel, True,
                     f"{kernel} model, calibrated {source['date']} on {gpu.name}", source)
    return CalibrationResult(model, names, source["not_identified"], fit_report.summary,
                             source["held_out"], len(rep.frame), len(hold_all), cost, held_report)


def format_result(result: CalibrationResult) -> str:
    """What `kvtune calibrate` prints: constants, fit error, held-out rank agreement."""
    c = result.model.constants
    dev = result.model.device
    copy = result.model.source["copy_bandwidth_bytes_per_s"]
    lines = [(f"calibrated {result.model.kernel} on {result.model.source.get('gpu')}: "
              f"{result.rows_fit} rows fitted, {result.rows_held_out} held out"),
             (f"  device: {dev.name}, {dev.sm_count} SMs, {dev.hbm_bytes_per_s / 1e12:.2f} TB/s "
              f"(measured copy {copy / 1e12:.2f}), {dev.max_ctas_per_sm} CTAs/SM")]
    for n in result.fitted:
        v = getattr(c, n)
        lines.append(f"  {n} = {v / 1e9:.1f} GB/s" if n.endswith("bytes_per_s") else f"  {n} = {v:.3g}")
    if result.not_identified:
        lines.append("  not identified by these rows (kept): " + ", ".join(result.not_identified))
    f = result.fit_summary
    lines.append(f"fit rows: median |error| {f['median_abs_error']:.1%}, median Spearman "
                 f"{f['median_spearman']:.2f}")
    h = result.held_out_summary
    if h:
        lines.append(f"held out: {h['cases']} batches, median Spearman {h['median_spearman']:.2f} "
                     f"(min {h['min_spearman']:.2f}), top-1 {h['top1_share']:.0%}, regret "
                     f"{h['regret_geomean']:.1%} geomean / {h['regret_worst']:.1%} worst, "
                     f"median |error| {h['median_abs_error']:.1%}")
    else:
        lines.append("held out: no rows (holdout share 0 and no --held-out run)")
    return "\n".join(lines)


__all__ = [
    "DEFAULT_HOLDOUT_SHARE",
    "FIT_BOUNDS",
    "CalibrationResult",
    "calibrate",
    "fit_constants",
    "format_result",
    "identifiable",
    "infer_cuda_core_occupancy",
    "split_cases",
]

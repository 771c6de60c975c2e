"""How well a simulator model stands in for a GPU: re-run the GPU's cases on the simulator.

Rows of GPU bench runs (results/<run>/measurements.parquet plus the manifest) are turned back into
what ran: the batch (the stored kv_lens, or the case rebuilt from its recipe), the attention shape,
the policy with its parameters. Each is planned for the run's GPU (its SM count; the occupancy of
the simulator model, which matters for FlashInfer's CUDA-core planner) and simulated: a hybrid
row (prefill chunks, speculative decodes, or any row of a hybrid policy) by plan_hybrid and
harness/sim_hybrid.py with its q_lens (stored, else rebuilt from the hybrid case), a decode row
by plan and harness/sim_model.py. Then, per
batch (case), the simulator's ranking of the policies is compared with the GPU's:

- Spearman rank correlation (scipy.stats.spearmanr) of simulated vs measured latency, over the
  batch's distinct launches (policies that planned the same pieces count once, at their mean);
- top-1 agreement: the simulator's fastest policy is the GPU's fastest (within `tie_share`);
- regret: measured latency of the simulator's pick over the GPU's best, minus 1;
- latency error: simulated / measured - 1, summarised by batch size.

Which kernel a row measured: backend triton -> "triton"; backend flashinfer -> "flashinfer-" +
fi_path (tensor-core or cuda-core, as the backend records it); backend simulator -> its
sim_kernel column (rows made by the simulator, used by tests). Rows whose status is not ok, or
without a positive latency, are dropped; telemetry and other extra columns are ignored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from kvtune.kernels.plan import AttentionShape, DeviceSpec

# Targets of issue 14 on rows not used for fitting.
TARGET_MEDIAN_SPEARMAN = 0.9
TARGET_REGRET_GEOMEAN = 0.03
TARGET_REGRET_WORST = 0.10
TARGET_MEDIAN_ABS_ERROR = 0.10
# Two policies whose GPU latencies differ by less than this share count as tied for top-1.
DEFAULT_TIE_SHARE = 0.005


def row_kernel(row) -> str | None:
    """The kernel a measurement row ran (see the module docstring); None when unknown."""
    backend = row.get("backend")
    if backend == "triton":
        return "triton"
    if backend == "flashinfer":
        path = row.get("fi_path")
        return f"flashinfer-{path}" if isinstance(path, str) and path else None
    if backend == "simulator":
        kernel = row.get("sim_kernel")
        return kernel if isinstance(kernel, str) and kernel else "triton"
    return None


@dataclass
class GpuRows:
    """Usable rows of one or more runs, with what each needs to be replayed.

    frame: one row per measurement (ok, latency > 0), columns of the store plus `kernel`,
        `run_dir`. devices: run_id -> the DeviceSpec the run planned for (live=False).
    copy_bandwidth: run_id -> the run's ceiling in bytes/s (the measured copy bandwidth on a GPU).
    manifests: run_id -> manifest. dropped: rows not usable, by reason.
    """

    frame: pd.DataFrame
    devices: dict
    copy_bandwidth: dict
    manifests: dict
    dropped: dict = field(default_factory=dict)

    def for_kernel(self, kernel: str) -> pd.DataFrame:
        return self.frame[self.frame["kernel"] == kernel]

    def kernels(self) -> list[str]:
        return sorted(k for k in self.frame["kernel"].dropna().unique())


def expand_run_dirs(run_dirs) -> list[Path]:
    """Run folders: each given folder that holds manifest.json, or the run folders directly
    inside a results folder. ValueError names a folder that is neither."""
    out = []
    for d in run_dirs:
        path = Path(d)
        if (path / "manifest.json").is_file():
            out.append(path)
            continue
        inner = sorted(p for p in path.iterdir() if (p / "manifest.json").is_file()) \
            if path.is_dir() else []
        if not inner:
            raise ValueError(f"from: {str(path)!r} is not a run folder (no manifest.json) "
                             "nor a results folder holding runs")
        out.extend(inner)
    return out


def load_rows(run_dirs) -> GpuRows:
    """Rows of the runs under `run_dirs` (run folders holding manifest.json and
    measurements.parquet, or results folders holding such runs). ValueError with one line when a
    folder is not a run or no row is usable."""
    from kvtune.harness.store import load_manifest, load_measurements

    frames, devices, bandwidth, manifests = [], {}, {}, {}
    dropped: dict[str, int] = {}
    for path in expand_run_dirs(run_dirs):
        man = load_manifest(path)
        rows = load_measurements(path)
        if rows.empty:
            dropped["runs without rows"] = dropped.get("runs without rows", 0) + 1
            continue
        run_id = str(man.get("run_id", path.name))
        dev = dict(man.get("device") or {})
        dev.pop("live", None)
        try:
            devices[run_id] = DeviceSpec(**dev, live=False)
        except TypeError as exc:
            raise ValueError(f"from: run {str(path)!r} manifest device unreadable: {exc}") from None
        ceiling = man.get("ceiling_bytes_per_s")
        bandwidth[run_id] = float(ceiling) if ceiling else devices[run_id].hbm_bytes_per_s
        manifests[run_id] = man
        rows = rows.copy()
        rows["run_id"] = run_id
        rows["run_dir"] = str(path)
        ok = rows.get("status", pd.Series("ok", index=rows.index)) == "ok"
        lat = pd.to_numeric(rows.get("latency_us"), errors="coerce")
        good = ok & lat.gt(0) & np.isfinite(lat)
        if (~ok).any():
            dropped["status not ok"] = dropped.get("status not ok", 0) + int((~ok).sum())
        if (ok & ~good).any():
            dropped["no latency"] = dropped.get("no latency", 0) + int((ok & ~good).sum())
        rows = rows[good]
        kernels = [row_kernel(r) for r in rows.to_dict("records")]
        rows = rows.assign(kernel=kernels)
        unknown = rows["kernel"].isna()
        if unknown.any():
            dropped["unknown kernel"] = dropped.get("unknown kernel", 0) + int(unknown.sum())
        frames.append(rows[~unknown])
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if frame.empty:
        raise ValueError("from: no usable rows (status ok with a latency) in "
                         + ", ".join(str(d) for d in run_dirs))
    return GpuRows(frame, devices, bandwidth, manifests, dropped)


def _absent(value) -> bool:
    """Whether a row's cell holds nothing (None, or the NaN pandas fills a missing cell with)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def row_shape(row) -> AttentionShape:
    """The row's shape, its KV cache type included (rows from before fp8 KV have no kv_dtype:
    the query type then)."""
    kv = row.get("kv_dtype")
    kv = None if _absent(kv) else str(kv)
    return AttentionShape(num_qo_heads=int(row["num_qo_heads"]), num_kv_heads=int(row["num_kv_heads"]),
                          head_dim=int(row["head_dim"]), page_size=int(row["page_size"]),
                          dtype=str(row["dtype"]), kv_dtype=kv)


def row_kv_lens(row, shape: AttentionShape) -> np.ndarray:
    """The batch's kv_lens: the stored list, else the case rebuilt from its recipe."""
    stored = row.get("kv_lens")
    if not _absent(stored):
        return np.asarray(stored, dtype=np.int64)
    from kvtune.workloads.suites import Case

    params = json.loads(row["dist_params"]) if isinstance(row.get("dist_params"), str) else {}
    case = Case(str(row["distribution"]), params, int(row["batch_size"]), shape, int(row["seed"]))
    return case.kv_lens()


def row_q_lens(row, shape: AttentionShape, kv_lens: np.ndarray) -> np.ndarray | None:
    """The batch's q_lens for a hybrid row (the stored list, else the hybrid case rebuilt from
    its recipe); None for a decode row (q_len 1 everywhere, planned by plan())."""
    stored = row.get("q_lens")
    if not _absent(stored):
        return np.asarray(stored, dtype=np.int64)
    from kvtune.workloads.hybrid import DISTRIBUTION, HybridCase

    if str(row.get("distribution")) != DISTRIBUTION:
        return None
    params = json.loads(row["dist_params"]) if isinstance(row.get("dist_params"), str) else {}
    q, kv = HybridCase(params, int(row["batch_size"]), shape, int(row["seed"])).lengths()
    if not np.array_equal(kv, kv_lens):
        raise ValueError(f"case {row['case_id']}: its recipe no longer gives the run's kv_lens")
    return q


def row_plan(row, shape: AttentionShape, device: DeviceSpec):
    """The row's plan on `device`: a HybridPlan for a hybrid row (the hybrid policies plan
    AttentionBatches; kernels/hybrid_policies.py), else the decode Plan."""
    policy = row_policy(row)
    kv = row_kv_lens(row, shape)
    q = row_q_lens(row, shape, kv)
    if q is not None or hasattr(policy, "plan_hybrid"):
        # A hybrid policy on a decode batch planned it with q_len 1 everywhere (runner.plan_case).
        return policy.plan_hybrid(np.ones_like(kv) if q is None else q, kv, shape, device)
    return policy.plan(kv, shape, device)


def row_policy(row):
    from kvtune.kernels.policies import get

    params = json.loads(row["policy_params"]) if isinstance(row.get("policy_params"), str) else {}
    return get(str(row["policy"]), **params)


@dataclass
class Replay:
    """The plans of some rows, ready to simulate: plans[i], shapes[i] for frame row i (None when
    the policy no longer plans that batch, or plans another launch than the row measured; such
    rows are dropped from the comparison). stale_rows: how many rows were dropped because their
    policy now plans another launch (replanned_as_measured)."""

    frame: pd.DataFrame
    plans: list
    shapes: list
    stale_rows: int = 0


# The plan columns a row records (harness/runner.py) that say which launch ran.
LAUNCH_COLUMNS = ("num_tasks", "grid_size", "schedule")


def replanned_as_measured(row, plan) -> bool:
    """Whether `plan` (the row's policy planned again) is the launch the row measured: the same
    pieces per request (where the row stored them) and the same tasks, grid and schedule. Why:
    a policy that reads a file (hybrid-tuned:path=..., tuned:...) plans from whatever the file
    holds today; on an H200 (twenty-seventh session) a hybrid file re-written under the same
    name made the replay simulate a serial step for rows that had measured split decodes 2.4x
    faster, and the regret read 144%. A row that does not record a column is not checked on
    it."""
    summary = plan.summary()
    for col in LAUNCH_COLUMNS:
        stored = row.get(col)
        if _absent(stored):
            continue
        if str(stored) != str(summary.get(col)):
            return False
    splits = row.get("splits")
    if _absent(splits):
        return True
    return np.array_equal(np.asarray(splits, dtype=np.int64).ravel(),
                          np.asarray(plan.splits, dtype=np.int64).ravel())


def replay(frame: pd.DataFrame, devices: dict, max_ctas_per_sm: int | None = None) -> Replay:
    """Plan every row for its run's device. max_ctas_per_sm: the occupancy to plan with (the
    simulator model's, e.g. FlashInfer's CUDA-core occupancy from a calibration); None keeps the
    run's. A row planned at the run's occupancy whose plan is not the launch it measured
    (replanned_as_measured) gets no plan and counts in stale_rows; at another occupancy a
    planner may cut the batch otherwise by design, so nothing is checked there."""
    plans, shapes, cache, stale = [], [], {}, 0
    for row in frame.to_dict("records"):
        dev = devices[row["run_id"]]
        as_run = max_ctas_per_sm is None or max_ctas_per_sm == dev.max_ctas_per_sm
        if not as_run:
            dev = DeviceSpec(dev.name, dev.sm_count, dev.l2_bytes, dev.hbm_bytes_per_s,
                             max_ctas_per_sm, live=False)
        key = (row["run_id"], row["case_id"], row["policy"], row.get("policy_params"),
               row["num_qo_heads"], row["num_kv_heads"], row["head_dim"], row["page_size"],
               row["dtype"], dev.max_ctas_per_sm)
        if key not in cache:
            shape = row_shape(row)
            try:
                plan = row_plan(row, shape, dev)
            except ValueError:
                plan = None
            cache[key] = (plan, shape)
        plan, shape = cache[key]
        if plan is not None and as_run and not replanned_as_measured(row, plan):
            plan = None
            stale += 1
        plans.append(plan)
        shapes.append(shape)
    return Replay(frame.reset_index(drop=True), plans, shapes, stale)


def simulate_replay(rep: Replay, device: DeviceSpec, constants) -> np.ndarray:
    """Predicted latency (us) of every replayed row on `device` with `constants`; NaN where the
    row has no plan. A HybridPlan goes through the hybrid simulator (harness/sim_hybrid.py), a
    decode Plan through harness/sim_model.py, each with the launch order the row's decodes ran in
    (its "launch_order"; "plan" where it records none: FlashInfer's rows, and kvtune's Triton
    rows from before the twenty-ninth session, whose kernel launched every plan in its own
    order, or hybrid rows without a decode launch of kernels/decode.py)."""
    from kvtune.harness.sim_hybrid import simulate_hybrid
    from kvtune.harness.sim_model import simulate
    from kvtune.kernels.hybrid_plan import HybridPlan

    out = np.full(len(rep.plans), np.nan)
    orders = (rep.frame["launch_order"].tolist() if "launch_order" in rep.frame
              else [None] * len(rep.plans))
    for i, (plan, shape) in enumerate(zip(rep.plans, rep.shapes)):
        order = orders[i] if isinstance(orders[i], str) else "plan"
        if isinstance(plan, HybridPlan):
            out[i] = simulate_hybrid(plan, shape, device, constants,
                                     decode_launch_order=order).time_us
        elif plan is not None:
            out[i] = simulate(plan, shape, device, constants, launch_order=order).time_us
    return out


@dataclass
class FidelityReport:
    """per_case: one row per batch (case_id, batch_size, policies, spearman, top1, regret).
    by_batch: per batch size, median signed and absolute latency error and cases.
    summary: the headline numbers (see summarize)."""

    per_case: pd.DataFrame
    by_batch: pd.DataFrame
    summary: dict


def launch_key(row) -> tuple | None:
    """What the GPU ran for a row, or None when the row does not say: the pieces per request,
    the schedule, the grid, the chunk (plan_notes chunk_tokens, or FlashInfer's chunk_pages x
    page_size), the compiled kernel configuration when the row names one (kvtune's Triton
    kernel picks it from the plan's CTAs per SM) and the launch order ("plan" where the row
    records none). Two policies with the same key launched the same kernel on the same pieces
    in the same order."""
    splits = row.get("splits")
    if _absent(splits):
        return None
    notes = row.get("plan_notes")
    notes = json.loads(notes) if isinstance(notes, str) and notes else {}
    chunk = notes.get("chunk_tokens")
    if chunk is None and notes.get("chunk_pages") is not None and notes.get("split_kv", True):
        chunk = int(notes["chunk_pages"]) * int(row.get("page_size") or 1)
    if isinstance(chunk, list):
        chunk = tuple(chunk)
    split_counts = np.asarray(splits).ravel()
    if split_counts.size and split_counts.max() == 1 and notes.get("split_kv") is not True:
        # Nothing is cut and no merge runs: the chunk a planner named changes nothing launched.
        chunk = None
    config = row.get("kernel_config")
    config = None if _absent(config) else str(config)
    order = row.get("launch_order")
    order = "plan" if _absent(order) else str(order)
    return (tuple(int(x) for x in split_counts), str(row.get("schedule")),
            int(row.get("grid_size") or 0), chunk, config, order)


def distinct_launches(group: pd.DataFrame, gpu_col: str, sim_col: str) -> pd.DataFrame:
    """One row per distinct launch of a batch: policies that planned the same pieces (launch_key)
    are one entry, at their mean GPU and simulated latency. Ranking identical launches would
    rank the GPU's run-to-run noise (three of FlashInfer's five policies often plan alike)."""
    keys = [launch_key(r) for _, r in group.iterrows()]
    if any(k is None for k in keys):
        return group
    index = {}
    group = group.assign(_launch=[index.setdefault(k, len(index)) for k in keys])
    merged = group.groupby("_launch", sort=False).agg(
        **{gpu_col: (gpu_col, "mean"), sim_col: (sim_col, "mean")})
    first = group.drop_duplicates("_launch").set_index("_launch")
    first[gpu_col], first[sim_col] = merged[gpu_col], merged[sim_col]
    return first.reset_index(drop=True)


def compare(frame: pd.DataFrame, gpu_col: str = "latency_us", sim_col: str = "sim_us",
            tie_share: float = DEFAULT_TIE_SHARE) -> FidelityReport:
    """Per-batch ranking agreement and latency error of `sim_col` against `gpu_col`.

    frame: rows with case_id (plus run_id, shape columns when present), batch_size, policy and
    both latencies. A case is one batch of one run and shape; cases with fewer than 2 policies
    count for the latency error only.
    """
    from scipy.stats import spearmanr

    data = frame[np.isfinite(frame[sim_col]) & np.isfinite(frame[gpu_col])].copy()
    data["rel_error"] = data[sim_col] / data[gpu_col] - 1.0
    keys = [k for k in ("run_id", "case_id", "num_qo_heads", "num_kv_heads", "head_dim",
                        "page_size", "dtype") if k in data.columns]
    cases = []
    for key, group in data.groupby(keys, sort=False):
        # One latency per policy configuration (a repeated row keeps the first).
        group = group.drop_duplicates(subset=[c for c in ("policy", "policy_params") if c in group])
        group = distinct_launches(group, gpu_col, sim_col)
        if len(group) < 2:
            continue
        gpu = group[gpu_col].to_numpy(float)
        sim = group[sim_col].to_numpy(float)
        rho = spearmanr(sim, gpu).statistic if np.ptp(gpu) > 0 and np.ptp(sim) > 0 else np.nan
        pick = int(np.argmin(sim))
        best = float(gpu.min())
        regret = float(gpu[pick] / best - 1.0)
        key = key if isinstance(key, tuple) else (key,)
        cases.append({**dict(zip(keys, key)), "batch_size": int(group["batch_size"].iloc[0]),
                      "policies": len(group), "spearman": float(rho),
                      "top1": bool(regret <= tie_share), "regret": regret,
                      "sim_pick": str(group["policy"].iloc[pick]),
                      "gpu_pick": str(group["policy"].iloc[int(np.argmin(gpu))])})
    per_case = pd.DataFrame(cases)
    by_batch = (data.groupby("batch_size")["rel_error"]
                .agg(median_error="median", median_abs_error=lambda e: float(np.median(np.abs(e))),
                     rows="size").reset_index())
    return FidelityReport(per_case, by_batch, summarize(per_case, data["rel_error"].to_numpy()))


def summarize(per_case: pd.DataFrame, rel_error: np.ndarray) -> dict:
    """Headline numbers: cases, median and min per-batch Spearman, top-1 share, regret geomean
    (exp(mean(log(1 + regret))) - 1) and worst, median |latency error|, rows, and whether each
    target of issue 14 is met."""
    rho = per_case["spearman"].dropna().to_numpy() if not per_case.empty else np.array([])
    regret = per_case["regret"].to_numpy() if not per_case.empty else np.array([])
    out = {
        "cases": len(per_case),
        "rows": len(rel_error),
        "median_spearman": float(np.median(rho)) if rho.size else float("nan"),
        "min_spearman": float(rho.min()) if rho.size else float("nan"),
        "top1_share": float(per_case["top1"].mean()) if len(per_case) else float("nan"),
        "regret_geomean": float(np.expm1(np.mean(np.log1p(regret)))) if regret.size else float("nan"),
        "regret_worst": float(regret.max()) if regret.size else float("nan"),
        "median_abs_error": float(np.median(np.abs(rel_error))) if len(rel_error) else float("nan"),
        "median_error": float(np.median(rel_error)) if len(rel_error) else float("nan"),
    }
    out["targets_met"] = {
        "median_spearman>=0.9": bool(out["median_spearman"] >= TARGET_MEDIAN_SPEARMAN),
        "regret_geomean<=3%": bool(out["regret_geomean"] <= TARGET_REGRET_GEOMEAN),
        "regret_worst<=10%": bool(out["regret_worst"] <= TARGET_REGRET_WORST),
        "median_abs_error<=10%": bool(out["median_abs_error"] <= TARGET_MEDIAN_ABS_ERROR),
    }
    return out


def fidelity(rows: GpuRows, kernel: str, model) -> tuple[FidelityReport, pd.DataFrame]:
    """Replay the rows of `kernel` on the simulator model `model` (a device.SimModel) and compare.
    Returns the report and the frame with sim_us added. ValueError when no row ran `kernel`."""
    frame = rows.for_kernel(kernel)
    if frame.empty:
        raise ValueError(f"sim-kernel: no row of kernel {kernel!r} in the runs; found: "
                         + (", ".join(rows.kernels()) or "none"))
    rep = replay(frame, rows.devices, model.device.max_ctas_per_sm)
    sim = simulate_replay(rep, model.device, model.constants)
    out = rep.frame.assign(sim_us=sim)
    report = compare(out)
    report.summary["stale_rows"] = rep.stale_rows
    return report, out


def format_report(report: FidelityReport, title: str) -> str:
    """The fidelity table as markdown: the summary line, then latency error by batch size."""
    s = report.summary
    lines = [f"### {title}", "",
             "| cases | median Spearman (min) | top-1 | regret geomean / worst | median abs error |",
             "|---|---|---|---|---|",
             (f"| {s['cases']} | {s['median_spearman']:.2f} ({s['min_spearman']:.2f}) | "
              f"{s['top1_share']:.0%} | {s['regret_geomean']:.1%} / {s['regret_worst']:.1%} | "
              f"{s['median_abs_error']:.1%} |"), "",
             "| batch size | median error | median abs error | rows |", "|---|---|---|---|"]
    for r in report.by_batch.itertuples():
        lines.append(f"| {r.batch_size} | {r.median_error:+.1%} | {r.median_abs_error:.1%} | {r.rows} |")
    met = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in s["targets_met"].items())
    lines += ["", f"targets: {met}"]
    if s.get("stale_rows"):
        lines += [f"not compared: {s['stale_rows']} rows whose policy now plans another launch "
                  "than the run measured (a heuristic file or planner changed since the run)"]
    return "\n".join(lines)


__all__ = [
    "DEFAULT_TIE_SHARE",
    "FidelityReport",
    "GpuRows",
    "LAUNCH_COLUMNS",
    "Replay",
    "compare",
    "fidelity",
    "format_report",
    "load_rows",
    "replay",
    "replanned_as_measured",
    "row_kernel",
    "simulate_replay",
    "summarize",
]

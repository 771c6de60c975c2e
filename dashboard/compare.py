"""Comparing runs, also across devices: short run names, a line style per run and device, the
memory floor, latency normalised by a chosen baseline series, and the A/B ratio table of two runs.

Pure functions on plain data (manifests, latency_points() / ok_rows_with_lines() frames); nothing
here reads a file or touches Streamlit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Dash per run (in the order picked), marker symbol per device: two runs on two devices differ in
# both, two runs on one device in the dash. Colour stays the policy's (charts.policy_color).
RUN_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
DEVICE_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star")
FLOOR = "floor"


def device_short(manifest: dict) -> str:
    """'h200 (sim)' for a simulator model, the GPU's name for a live device, '?' when unknown."""
    device = manifest.get("device")
    name = device.get("name") if isinstance(device, dict) else device
    name = str(name) if name else "?"
    simulated = manifest.get("simulated") or (isinstance(device, dict) and device.get("live") is False)
    return f"{name} (sim)" if simulated else name


def run_labels(manifests: list[dict]) -> dict[str, str]:
    """{run id: '<device> · <kind>-<suffix>'}, e.g. 'h200 (sim) · bench-0d84': short enough for a
    legend, and naming the device. The run id's last part (its random suffix) tells runs apart;
    where two labels still collide the full run id is used."""
    by_id = {str(m.get("run_id", "?")): m for m in manifests}
    labels = {}
    for rid, m in by_id.items():
        parts = rid.split("-")
        tail = "-".join(parts[-2:]) if len(parts) >= 2 else rid
        labels[rid] = f"{device_short(m)} · {tail}"
    counts = pd.Series(list(labels.values()), dtype=object).value_counts()
    return {
        rid: label if counts[label] == 1 else f"{device_short(by_id[rid])} · {rid}"
        for rid, label in labels.items()
    }


def run_styles(manifests: list[dict]) -> dict[str, dict]:
    """{run id: {"dash": ..., "symbol": ...}}: the dash by the run's place in `manifests`, the
    marker symbol by its device (the first device seen gets circles)."""
    devices: list[str] = []
    out = {}
    for i, m in enumerate(manifests):
        device = device_short(m)
        if device not in devices:
            devices.append(device)
        out[str(m.get("run_id", "?"))] = {
            "dash": RUN_DASHES[i % len(RUN_DASHES)],
            "symbol": DEVICE_SYMBOLS[devices.index(device) % len(DEVICE_SYMBOLS)],
        }
    return out


def floor_points(ok: pd.DataFrame, run_names: dict[str, str] | None = None) -> pd.DataFrame:
    """The memory floor per (run, distribution, batch size): the fewest bytes a decode kernel
    must move (bytes_moved; the batch's K, V, q and output once) over the run's bandwidth ceiling,
    in us (median over the cases). `line` is `floor`, or `<run name> · floor` when run_names is
    given. Empty when the rows lack bytes_moved or the ceiling.

    ok: ok_rows_with_lines() output."""
    columns = ["line", "run_id", "distribution", "batch_size", "floor_us"]
    need = {"bytes_moved", "ceiling_bytes_per_s", "distribution", "batch_size", "run_id"}
    if ok.empty or not need <= set(ok):
        return pd.DataFrame(columns=columns)
    floor = ok["bytes_moved"].astype(float) / ok["ceiling_bytes_per_s"].astype(float) * 1e6
    part = ok.assign(floor_us=floor)
    part = part[np.isfinite(part["floor_us"]) & (part["floor_us"] > 0)]
    if part.empty:
        return pd.DataFrame(columns=columns)
    # One value per case first (every policy of a case moves the same minimum), then the median.
    per_case = part.groupby(["run_id", "distribution", "batch_size", "case_id"] if "case_id" in part
                            else ["run_id", "distribution", "batch_size"])["floor_us"].min()
    out = per_case.groupby(["run_id", "distribution", "batch_size"]).median().reset_index()
    out["line"] = (
        out["run_id"].map(lambda r: f"{run_names.get(r, r)} · {FLOOR}") if run_names else FLOOR
    )
    return out[columns].sort_values(["line", "distribution", "batch_size"]).reset_index(drop=True)


def normalise(points: pd.DataFrame, baseline_line: str) -> pd.DataFrame:
    """`points` with `latency_ratio` = latency / the baseline line's latency at the same
    distribution and batch size (1 = as fast as the baseline; below 1 faster). Points where the
    baseline has no measurement are left out. points: latency_points() output."""
    base = points[points["line"] == baseline_line][["distribution", "batch_size", "latency_us"]]
    if base.empty:
        raise ValueError(f"baseline: no points of {baseline_line!r}; pick a drawn series")
    base = base.rename(columns={"latency_us": "baseline_us"})
    merged = points.merge(base, on=["distribution", "batch_size"], how="inner")
    merged["latency_ratio"] = merged["latency_us"] / merged["baseline_us"]
    return merged.drop(columns="baseline_us")


AB_COLUMNS = [
    "policy",
    "distribution",
    "batch_size",
    "A_us",
    "B_us",
    "ratio_B_over_A",
    "A_p10_us",
    "A_p90_us",
    "B_p10_us",
    "B_p90_us",
    "ratio_p10",
    "ratio_p90",
    "within_noise",
]


def ab_table(points: pd.DataFrame, run_a: str, run_b: str) -> pd.DataFrame:
    """Run B against run A on every (policy, distribution, batch size) both measured:
    their median latencies, B / A, each one's noise (the measurements' own p10 and p90, median
    over the cases), the ratio's noise band [B p10 / A p90, B p90 / A p10], and `within_noise`
    (the band holds 1: the two runs do not differ beyond their noise).

    points: latency_points() of the runs (with run_id, policy, noise_p10_us, noise_p90_us)."""
    keys = ["policy", "distribution", "batch_size"]
    cols = [*keys, "latency_us", "noise_p10_us", "noise_p90_us"]
    a = points[points["run_id"] == run_a][cols]
    b = points[points["run_id"] == run_b][cols]
    merged = a.merge(b, on=keys, suffixes=("_a", "_b"))
    if merged.empty:
        return pd.DataFrame(columns=AB_COLUMNS)
    out = pd.DataFrame(
        {
            "policy": merged["policy"],
            "distribution": merged["distribution"],
            "batch_size": merged["batch_size"],
            "A_us": merged["latency_us_a"],
            "B_us": merged["latency_us_b"],
            "A_p10_us": merged["noise_p10_us_a"].fillna(merged["latency_us_a"]),
            "A_p90_us": merged["noise_p90_us_a"].fillna(merged["latency_us_a"]),
            "B_p10_us": merged["noise_p10_us_b"].fillna(merged["latency_us_b"]),
            "B_p90_us": merged["noise_p90_us_b"].fillna(merged["latency_us_b"]),
        }
    )
    out["ratio_B_over_A"] = out["B_us"] / out["A_us"]
    out["ratio_p10"] = out["B_p10_us"] / out["A_p90_us"]
    out["ratio_p90"] = out["B_p90_us"] / out["A_p10_us"]
    out["within_noise"] = (out["ratio_p10"] <= 1.0) & (out["ratio_p90"] >= 1.0)
    return out[AB_COLUMNS].sort_values(keys, kind="stable").reset_index(drop=True)


def matching_tuning_run(picked: list[dict], tuning: list[dict]) -> str | None:
    """The tuning run whose buckets belong on the picked runs' latency chart: a picked tuning run
    first, else the newest tuning run whose suite and attention shape (and device) match a picked
    run's; None when none matches (an unrelated study's buckets would mislead)."""
    tuning_ids = {r.get("run_id") for r in tuning}
    for run in picked:
        if run.get("run_id") in tuning_ids:
            return run["run_id"]
    wanted = {(r.get("suite"), _shape_key(r), device_short(r)) for r in picked}
    for run in tuning:  # newest first
        if (run.get("suite"), _shape_key(run), device_short(run)) in wanted:
            return run["run_id"]
    return None


def _shape_key(manifest: dict):
    cases = manifest.get("cases")
    if not isinstance(cases, list) or not cases or not isinstance(cases[0], dict):
        return None
    shape = cases[0].get("shape")
    return tuple(sorted(shape.items())) if isinstance(shape, dict) else None


__all__ = [
    "AB_COLUMNS",
    "DEVICE_SYMBOLS",
    "FLOOR",
    "RUN_DASHES",
    "ab_table",
    "device_short",
    "floor_points",
    "matching_tuning_run",
    "normalise",
    "run_labels",
    "run_styles",
]

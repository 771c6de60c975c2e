"""Latency vs batch size: one line per policy, a facet per distribution, log axes, and the batch
sizes where each baseline's plan changes regime (and the tuned heuristic's buckets) as rules."""

import pandas as pd
import streamlit as st

from kvtune.dashboard import charts, data, frames, selection
from kvtune.dashboard.replay import SHAPE_FIELDS
from kvtune.dashboard.thresholds import DEFAULT_LONG_TOKENS, Threshold, bucket_thresholds

MAX_DEFAULT_LINES = 10
TABLE_MAX_BATCH = 1024

st.title("Latency vs batch size")
picked = selection.picked_runs_or_stop()
by_id = {r["run_id"]: r for r in picked}
measured = selection.measurements_of(picked)
if not measured:
    st.stop()

frame = pd.concat([f.assign(run_id=rid) for rid, f in measured.items()], ignore_index=True)
by_run = len(measured) > 1
ok = frames.ok_rows_with_lines(frame, by_run)
counts = frames.status_counts(frame)
if ok.empty:
    st.warning(
        "No successful measurement to draw: " + ", ".join(f"{v} {k}" for k, v in counts.items())
    )
    st.stop()
if set(counts) - {"ok"}:
    st.caption("Rows not drawn: " + ", ".join(f"{v} {k}" for k, v in counts.items() if k != "ok"))

points = frames.latency_points(frame, by_run)
lines = sorted(points["line"].unique())
dists = sorted(points["distribution"].unique())

c1, c2, c3 = st.columns([1, 1, 2])
metric = c1.radio("y axis", list(frames.METRICS), format_func=frames.METRICS.get, key="lat_metric")
layout = c2.radio("distributions", ["facets", "one at a time"], key="lat_layout")
if layout == "one at a time":
    dists = [c2.selectbox("distribution", dists, key="lat_distribution")]
# Trials of a tuning run are `parametric` lines; the baselines and the tuned winner come first.
default_lines = [
    ln for ln in lines if not ln.rsplit(" · ", 1)[-1].startswith("parametric")
] or lines
chosen = c3.multiselect(
    "policies", lines, default=default_lines[:MAX_DEFAULT_LINES], key="lat_policies"
)
show_rules = c3.checkbox(
    "threshold rules",
    value=True,
    key="lat_rules",
    help="Where each policy's plan changes regime as the batch grows",
)

tuning = selection.tuning_runs()
tuning_ids = [r["run_id"] for r in tuning]
default_tuned = next((rid for rid in by_id if rid in tuning_ids), None)
if default_tuned is None:
    devices = {frames.device_text(r) for r in picked}
    default_tuned = next((r["run_id"] for r in tuning if frames.device_text(r) in devices), None)
options = ["(none)"] + tuning_ids
tuned_id = c3.selectbox(
    "tuned heuristic's buckets from",
    options,
    index=options.index(default_tuned) if default_tuned else 0,
    key="lat_tuned",
)

rules: list[Threshold] = []
notes: list[str] = []
if show_rules:
    owners = frames.line_policies(ok)
    owners = owners[owners["line"].isin(chosen)]
    shape_cols = [c for c in SHAPE_FIELDS if c in ok]
    combos = ok[["run_id", *shape_cols]].drop_duplicates()
    several = len(combos) > 1
    for combo in combos.to_dict("records"):
        run = by_id[combo["run_id"]]
        device = run.get("device") if isinstance(run.get("device"), dict) else None
        if device is None or len(shape_cols) < len(SHAPE_FIELDS):
            notes.append(f"run {combo['run_id']}: no device or shape recorded, no thresholds")
            continue
        shape = {c: (str(combo[c]) if c == "dtype" else int(combo[c])) for c in SHAPE_FIELDS}
        in_run = ok[ok["run_id"] == combo["run_id"]]
        # Rules past the drawn batch sizes still go in the table (FA3's dynamic split ends at 992).
        max_batch = max(int(in_run["batch_size"].max()), TABLE_MAX_BATCH)
        long_tokens = (
            int(in_run["max_kv_len"].max()) if "max_kv_len" in in_run else DEFAULT_LONG_TOKENS
        )
        prefix = f"{device.get('name')} H_kv={shape['num_kv_heads']}: " if several else ""
        for owner in owners[owners["run_id"] == combo["run_id"]].itertuples():
            found, note = data.policy_thresholds(
                owner.policy, owner.policy_params, shape, device, max_batch, long_tokens
            )
            if note:
                notes.append(note)
            if found is None:
                continue
            for r in found:
                rules.append(Threshold(**{**r, "label": prefix + r["label"]}))
    if tuned_id != "(none)":
        loaded = data.tuning_result(next(r for r in tuning if r["run_id"] == tuned_id)["path"])
        if loaded.ok:
            rules += bucket_thresholds(loaded.value.bucket_table(), policy="tuned")
        else:
            notes.append(loaded.error)
    rules = list({(r.policy, r.batch_size, r.label): r for r in rules}.values())

fig = charts.latency_figure(
    points[points["line"].isin(chosen)], rules, metric=metric, distributions=dists
)
st.plotly_chart(fig, width="stretch", key="latency_chart")
for note in notes:
    st.caption(note)

if rules:
    st.subheader("Thresholds")
    st.caption(
        "Each planner is run over batch sizes on a probe batch (one request as long as the "
        "run's longest beside one-page requests, the batch most favourable to splitting) for "
        "the run's device and shape; a rule marks the first batch size of a new regime (the "
        "chart draws those inside its batch sizes). "
        "Bucket rules come from the tuned heuristic's table."
    )
    st.dataframe(
        pd.DataFrame([r.to_dict() for r in sorted(rules, key=lambda r: (r.batch_size, r.policy))]),
        hide_index=True,
        width="stretch",
    )
with st.expander("points drawn"):
    st.dataframe(points[points["line"].isin(chosen)], hide_index=True, width="stretch")

"""SM timeline: a stored batch re-planned by two policies and simulated, one Gantt chart each
(one row per CTA slot, one bar per CTA, coloured by request), side by side on one time axis."""

import pandas as pd
import streamlit as st

from kvtune.dashboard import charts, data, frames, selection

PREFERRED = ("flashinfer-tensor-core", "fa3", "trtllm-oversub", "no-split")

st.title("SM timeline")
picked = selection.picked_runs_or_stop()

ids = [r["run_id"] for r in picked]
rid = st.selectbox("run", ids, key="tl_run") if len(ids) > 1 else ids[0]
run = next(r for r in picked if r["run_id"] == rid)
measured = selection.measurements_of([run])
if rid not in measured:
    st.stop()
ok = frames.ok_rows_with_lines(measured[rid])
if ok.empty:
    st.warning(f"Run {rid} has no successful measurement to replay.")
    st.stop()
device = run.get("device") if isinstance(run.get("device"), dict) else None
if device is None:
    st.error(f"Run {rid}: its manifest has no device record, so its plans cannot be simulated.")
    st.stop()

c1, c2, c3 = st.columns(3)
dist = c1.selectbox("distribution", sorted(ok["distribution"].unique()), key="tl_distribution")
in_dist = ok[ok["distribution"] == dist]
sizes = sorted(int(b) for b in in_dist["batch_size"].unique())
default_size = next((b for b in sizes if b >= 48), sizes[-1])
batch_size = c2.selectbox("batch size", sizes, index=sizes.index(default_size), key="tl_batch")
in_case = in_dist[in_dist["batch_size"] == batch_size]
seeds = sorted(int(s) for s in in_case["seed"].unique())
seed = c3.selectbox("seed", seeds, key="tl_seed") if len(seeds) > 1 else seeds[0]
in_case = in_case[in_case["seed"] == seed]
case_id = str(in_case["case_id"].iloc[0])

labels = list(dict.fromkeys(in_case["policy_label"]))
ordered = [p for p in PREFERRED if p in labels] + [p for p in labels if p not in PREFERRED]
p1, p2 = st.columns(2)
left = p1.selectbox("policy (left)", labels, index=labels.index(ordered[0]), key="tl_policy_a")
right_default = next((p for p in ordered if p != left), left)
right = p2.selectbox("policy (right)", labels, index=labels.index(right_default), key="tl_policy_b")

rows = data.case_rows(run["path"], case_id)
if not rows.ok:
    st.error(rows.error)
    st.stop()
# The case's stored rows (with kv_lens) matched to the labels by policy name and parameters.
key_of = {
    lab: (pol, par)
    for lab, pol, par in in_case[["policy_label", "policy", "policy_params"]].itertuples(
        index=False
    )
}
case_frame = selection.with_tuned(run, pd.DataFrame(rows.value)) if rows.value else pd.DataFrame()
row_by_key = {}
for r in case_frame.to_dict("records"):
    if r.get("status") == "ok":
        row_by_key.setdefault((r.get("policy"), r.get("policy_params")), r)
row_by_label = {lab: row_by_key.get(key) for lab, key in key_of.items()}

replays = {}
for label in (left, right):
    row = row_by_label.get(label)
    if row is None:
        st.error(f"{case_id}: no stored row for {label}")
        continue
    result, error = data.replay(row, device)
    if error:
        st.error(f"{case_id}, {label}: the timeline cannot be rebuilt ({error})")
        continue
    replays[label] = (result, row)
if not replays:
    st.stop()

sim_note = (
    ""
    if run.get("simulated")
    else " The run was measured on a GPU; this timeline is the simulator's model of it."
)
st.caption(
    f"Case `{case_id}` on {frames.device_text(run)}: the stored kv_lens re-planned with each "
    "policy's "
    f"stored parameters and simulated.{sim_note}"
)
x_max = max(r.time_us for r, _ in replays.values()) * 1.03
cols = st.columns(2)
for side, col, label in zip("ab", cols, (left, right)):
    if label not in replays:
        continue
    result, row = replays[label]
    plan = result.plan
    fig = charts.timeline_figure(
        result.timeline,
        sm_count=result.sm_count,
        num_slots=result.num_slots,
        kv_lens=result.kv_lens,
        stage1_us=result.stage1_us,
        time_us=result.time_us,
        x_max_us=x_max,
        title=f"{label}: {result.time_us:,.0f} us (simulated)",
    )
    col.plotly_chart(fig, width="stretch", key=f"timeline_{side}")
    m = col.columns(4)
    m[0].metric("CTAs (tasks)", f"{plan['num_tasks']:,}")
    m[1].metric("waves", f"{plan['waves']:.2f}")
    m[2].metric("max splits", plan["max_splits"])
    m[3].metric("split requests", plan["split_requests"])
    col.caption(
        f"stored {row.get('timer', '?')} latency: {row.get('latency_us', float('nan')):,.1f} us; "
        f"schedule {plan['schedule']}, {plan['ctas_per_sm']} CTA(s)/SM, {result.num_slots} slots"
    )

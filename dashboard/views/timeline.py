"""SM timeline: a stored batch re-planned by two policies and simulated, one Gantt chart each
(one row per CTA slot or per SM, one bar per CTA, coloured by request, longest first), side by
side on one time axis or each on its own, with the waves marked and the idle-slot share."""

import pandas as pd
import streamlit as st
from kvtune.dashboard import charts, data, frames, selection
from kvtune.dashboard.text import code, plain
from kvtune.dashboard.timeline_chart import idle_slot_share

TIME_AXES = {"shared": "one time axis for both", "own": "each panel its own"}
ROW_CHOICES = {"auto": "auto", "slots": "a row per CTA slot", "sms": "a row per SM"}

PREFERRED = ("flashinfer-tensor-core", "fa3", "trtllm-oversub", "no-split")

st.title("SM timeline")
picked = selection.picked_runs_or_stop()

ids = [r["run_id"] for r in picked]
if len(ids) > 1:
    selection.url_widget("tl_run", ids, ids[0])
    rid = st.selectbox("run", ids, key="tl_run")
    selection.to_url("tl_run", rid)
else:
    rid = ids[0]
run = next(r for r in picked if r["run_id"] == rid)
measured = selection.measurements_of([run])
if rid not in measured:
    st.stop()
ok = frames.ok_rows_with_lines(measured[rid])
if ok.empty:
    st.warning(f"Run {code(rid)} has no successful measurement to replay.")
    st.stop()
device = run.get("device") if isinstance(run.get("device"), dict) else None
if device is None:
    st.error(
        f"Run {code(rid)}: its manifest has no device record, so its plans cannot be simulated."
    )
    st.stop()

c1, c2, c3 = st.columns(3)
distributions = sorted(ok["distribution"].unique())
selection.url_widget("tl_distribution", distributions, distributions[0])
dist = c1.selectbox("distribution", distributions, key="tl_distribution")
selection.to_url("tl_distribution", dist)
in_dist = ok[ok["distribution"] == dist]
sizes = sorted(int(b) for b in in_dist["batch_size"].unique())
default_size = next((b for b in sizes if b >= 48), sizes[-1])
selection.url_widget("tl_batch", sizes, default_size)
batch_size = c2.selectbox("batch size", sizes, key="tl_batch")
selection.to_url("tl_batch", batch_size)
in_case = in_dist[in_dist["batch_size"] == batch_size]
seeds = sorted(int(s) for s in in_case["seed"].unique())
if len(seeds) > 1:
    selection.url_widget("tl_seed", seeds, seeds[0])
    seed = c3.selectbox("seed", seeds, key="tl_seed")
    selection.to_url("tl_seed", seed)
else:
    seed = seeds[0]
in_case = in_case[in_case["seed"] == seed]
case_id = str(in_case["case_id"].iloc[0])

labels = list(dict.fromkeys(in_case["policy_label"]))
ordered = [p for p in PREFERRED if p in labels] + [p for p in labels if p not in PREFERRED]
p1, p2 = st.columns(2)
selection.url_widget("tl_policy_a", labels, ordered[0])
left = p1.selectbox("policy (left)", labels, key="tl_policy_a")
selection.to_url("tl_policy_a", left)
right_default = next((p for p in ordered if p != left), left)
selection.url_widget("tl_policy_b", labels, right_default)
right = p2.selectbox("policy (right)", labels, key="tl_policy_b")
selection.to_url("tl_policy_b", right)
o1, o2, o3 = st.columns(3)
selection.url_widget("tl_time", list(TIME_AXES), "shared")
time_axis = o1.radio(
    "time axis", list(TIME_AXES), format_func=TIME_AXES.get, horizontal=True, key="tl_time",
    help="Shared: both panels on the slower one's time scale (shows which finishes first). "
    "Own: each panel fills its width (shows how each one uses the SMs).",
)
selection.to_url("tl_time", time_axis)
selection.url_widget("tl_rows", list(ROW_CHOICES), "auto")
row_choice = o2.radio(
    "rows", list(ROW_CHOICES), format_func=ROW_CHOICES.get, horizontal=True, key="tl_rows",
    help="auto: a row per SM (its CTA slots overlaid) on big grids, where a row per slot would "
    "be thinner than a pixel; a row per slot otherwise",
)
selection.to_url("tl_rows", row_choice)
selection.url_flag("tl_waves", True)
show_waves = o3.checkbox(
    "mark waves", key="tl_waves",
    help="A dotted rule where wave 2, 3, ... begins: when the (k x CTA slots)-th task starts",
)
selection.to_url("tl_waves", show_waves)

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
        st.error(f"{code(case_id)}: no stored row for {code(label)}")
        continue
    result, error = data.replay(row, device)
    if error:
        st.error(f"{code(case_id)}, {code(label)}: the timeline cannot be rebuilt ({code(error)})")
        continue
    replays[label] = (result, row)
if not replays:
    st.stop()

sim_note = (
    ""
    if run.get("simulated")
    else " The run was measured on a GPU; this timeline is the simulator's model of it."
)
hybrid = any("kind" in r.timeline.columns for r, _ in replays.values())
colours = (
    "Colours: the CTAs that ran prefill tiles and those that ran decode pieces."
    if hybrid
    else "Colours follow the requests' lengths (the longest is red); the legend lists the "
    "longest requests first."
)
st.caption(
    f"Case {code(case_id)} on {code(frames.device_text(run))}: the stored lengths re-planned with "
    f"each policy's stored parameters and simulated.{sim_note} {colours}"
)
x_max = max(r.time_us for r, _ in replays.values()) * 1.03 if time_axis == "shared" else None
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
        title=f"{plain(label)} · {result.time_us:,.0f} us",
        rows=row_choice,
        waves=show_waves,
    )
    col.plotly_chart(fig, width="stretch", key=f"timeline_{side}")
    idle = idle_slot_share(result.timeline, result.num_slots, result.stage1_us)
    m = col.columns(5)
    m[0].metric("CTAs (tasks)", f"{plan['num_tasks']:,}")
    # On the model's slots, as the wave marks: the kernel may run other than the plan counted.
    m[1].metric("waves", f"{plan['num_tasks'] / result.num_slots:.2f}",
                help="CTAs over the slots the model runs them on (SMs x CTAs per SM)")
    m[2].metric(
        "idle slots",
        f"{idle:.0%}",
        help="Share of CTA-slot time idle during the attention launch: 1 - busy slot time / "
        "(slots x the launch's span)",
    )
    m[3].metric("max splits", plan["max_splits"])
    m[4].metric("split requests", plan["split_requests"])
    latency = row.get("latency_us")
    col.caption(
        f"stored {code(row.get('timer', '?'))} latency: "
        f"{latency if latency is None else format(float(latency), ',.1f')} us; "
        f"schedule {code(plan['schedule'])}, {plan['ctas_per_sm']} CTA(s)/SM counted by the plan, "
        f"{result.num_slots // result.sm_count} run by the model: {result.num_slots} slots"
    )

"""Latency vs batch size: one line per policy, a facet per distribution, log axes, the memory floor,
and the batch sizes where each baseline's plan changes regime (and the tuned heuristic's buckets)
as rules. Several runs (on one device or several) are told apart by dash and marker, and compared
normalised by a chosen baseline series and in an A/B ratio table with their noise."""

import pandas as pd
import streamlit as st

from kvtune.dashboard import charts, compare, data, frames, selection
from kvtune.dashboard.replay import SHAPE_FIELDS
from kvtune.dashboard.text import code
from kvtune.dashboard.thresholds import DEFAULT_LONG_TOKENS, Threshold, bucket_thresholds
from kvtune.kernels.fingerprint import decode_kernel_sha256

MAX_DEFAULT_LINES = 10
TABLE_MAX_BATCH = 1024
NO_TUNED = "(none)"

st.title("Latency vs batch size")
picked = selection.picked_runs_or_stop()
by_id = {r["run_id"]: r for r in picked}
measured = selection.measurements_of(picked)
if not measured:
    st.stop()

frame = pd.concat([f.assign(run_id=rid) for rid, f in measured.items()], ignore_index=True)
by_run = len(measured) > 1
drawn_runs = [by_id[rid] for rid in measured]
names = compare.run_labels(drawn_runs) if by_run else None
ok = frames.ok_rows_with_lines(frame, by_run, names)
counts = frames.status_counts(frame)
if ok.empty:
    st.warning(
        "No successful measurement to draw: " + ", ".join(f"{v} {k}" for k, v in counts.items())
    )
    st.stop()
if set(counts) - {"ok"}:
    st.caption(
        "Rows not drawn: " + ", ".join(f"{v} {code(k)}" for k, v in counts.items() if k != "ok")
    )
for note in frames.heuristic_notes(frame, decode_kernel_sha256()):
    st.caption(f"Note: {note}.")
if frames.benches_a_heuristic_file(frame):
    # The verdict tells identical launches apart by their pieces per request, which the page's
    # frame leaves out (per-request arrays): read them for these runs only.
    loaded = {rid: data.split_counts(by_id[rid]["path"]) for rid in measured}
    splits = {rid: got.value for rid, got in loaded.items() if got.ok}
    for line, slower in frames.heuristic_verdict_lines(frames.with_split_counts(frame, splits),
                                                        names):
        (st.warning if slower else st.caption)(f"Heuristic: {line}.")

points = frames.latency_points(frame, by_run, names)
lines = sorted(points["line"].unique())
dists = sorted(points["distribution"].unique())


def _policy_of(line: str) -> str:
    return line.rsplit(" · ", 1)[-1]


c1, c2, c3 = st.columns([1, 1, 2])
selection.url_widget("lat_metric", list(frames.METRICS), "latency_us")
metric = c1.radio(
    "y axis",
    list(frames.METRICS),
    format_func=frames.METRICS.get,
    key="lat_metric",
    help="latency / baseline: every series divided by the baseline series picked below, at the "
    "same distribution and batch size",
)
selection.to_url("lat_metric", metric)
selection.url_widget("lat_layout", ["facets", "one at a time"], "facets")
layout = c2.radio("distributions", ["facets", "one at a time"], key="lat_layout")
selection.to_url("lat_layout", layout)
if layout == "one at a time":
    selection.url_widget("lat_distribution", dists, dists[0])
    dists = [c2.selectbox("distribution", dists, key="lat_distribution")]
    selection.to_url("lat_distribution", dists[0])
# A tuning run's trial configurations are one `best trial` series per case (frames.GROUPED_SERIES);
# the baselines, the tuned winner and the oracle come first.
default_lines = [
    ln
    for ln in lines
    if _policy_of(ln) != frames.BEST_TRIAL and not _policy_of(ln).startswith("parametric")
] or lines
selection.url_widget("lat_policies", lines, default_lines[:MAX_DEFAULT_LINES], multi=True)
chosen = c3.multiselect("policies", lines, key="lat_policies")
selection.to_url("lat_policies", chosen)
selection.url_flag("lat_rules", True)
show_rules = c3.checkbox(
    "threshold rules",
    key="lat_rules",
    help="Where each policy's plan changes regime as the batch grows",
)
selection.to_url("lat_rules", show_rules)
selection.url_flag("lat_floor", True)
show_floor = c3.checkbox(
    "memory floor",
    key="lat_floor",
    help="The batch's bytes (K, V, q and output once) at the run's bandwidth ceiling: no kernel "
    "is faster (latency view). The bandwidth view draws the ceiling, 1.0.",
)
selection.to_url("lat_floor", show_floor)

tuning = selection.tuning_runs()
tuning_ids = [r["run_id"] for r in tuning]
options = [NO_TUNED] + tuning_ids
selection.url_widget(
    "lat_tuned", options, compare.matching_tuning_run(picked, tuning) or NO_TUNED
)
tuned_id = c3.selectbox(
    "tuned heuristic's buckets from",
    options,
    key="lat_tuned",
    help="Default: a picked tuning run, else the newest tuning run of the same suite, shape and "
    "device as a picked run, else none",
)
selection.to_url("lat_tuned", tuned_id)

drawn = points[points["line"].isin(chosen)]
if metric == "latency_ratio":
    baselines = [ln for ln in chosen if _policy_of(ln) not in frames.GROUPED_SERIES] or chosen
    if not baselines:
        st.info("Pick at least one policy to normalise by.")
        st.stop()
    preferred = next(
        (ln for ln in baselines if _policy_of(ln) == "flashinfer-tensor-core"), baselines[0]
    )
    selection.url_widget("lat_baseline", baselines, preferred)
    baseline = st.selectbox(
        "baseline series (divides every series)", baselines, key="lat_baseline"
    )
    selection.to_url("lat_baseline", baseline)
    drawn = compare.normalise(drawn, baseline)

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
            notes.append(f"run {code(combo['run_id'])}: no device or shape recorded, no thresholds")
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
                notes.append(code(note))
            if found is None:
                continue
            for r in found:
                rules.append(Threshold(**{**r, "label": prefix + r["label"]}))
    if tuned_id != NO_TUNED:
        loaded = data.tuning_result(next(r for r in tuning if r["run_id"] == tuned_id)["path"])
        if loaded.ok:
            rules += bucket_thresholds(loaded.value.bucket_table(), policy="tuned")
        else:
            notes.append(code(loaded.error))
    rules = list({(r.policy, r.batch_size, r.label): r for r in rules}.values())

floor = None
if show_floor and metric == "latency_us":
    floor = compare.floor_points(ok, names if by_run else None)
    floor = floor[floor["run_id"].isin(drawn["run_id"].unique())] if not drawn.empty else floor

fig = charts.latency_figure(
    drawn,
    rules,
    metric=metric,
    distributions=dists,
    floor=floor,
    run_styles=compare.run_styles(drawn_runs) if by_run else None,
    run_names=names,
)
st.plotly_chart(fig, width="stretch", key="latency_chart")
if by_run:
    st.caption(
        "Colour: the policy. Dash: the run. Marker: the device ("
        + ", ".join(
            f"{code(names[r['run_id']])} {style['dash']} / {style['symbol']}"
            for r, style in zip(drawn_runs, compare.run_styles(drawn_runs).values())
        )
        + ")."
    )
for note in notes:
    st.caption(note)

if by_run:
    st.subheader("A/B: two runs")
    run_ids = list(measured)
    selection.url_widget("lat_ab_a", run_ids, run_ids[0])
    selection.url_widget("lat_ab_b", run_ids, run_ids[1])
    a1, a2 = st.columns(2)
    run_a = a1.selectbox("run A", run_ids, format_func=names.get, key="lat_ab_a")
    run_b = a2.selectbox("run B", run_ids, format_func=names.get, key="lat_ab_b")
    selection.to_url("lat_ab_a", run_a)
    selection.to_url("lat_ab_b", run_b)
    table = compare.ab_table(points, run_a, run_b)
    if table.empty:
        st.info("These two runs share no policy, distribution and batch size.")
    else:
        st.caption(
            "B / A latency per policy, distribution and batch size both runs measured. Noise: "
            "each run's own p10..p90 (median over the cases); the ratio's band is "
            "[B p10 / A p90, B p90 / A p10]. *within noise*: the band holds 1, the runs do not "
            f"differ beyond their noise ({int(table['within_noise'].sum())} of {len(table)} rows)."
        )
        st.dataframe(table, hide_index=True, width="stretch")

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
    st.dataframe(drawn, hide_index=True, width="stretch")

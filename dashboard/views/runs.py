"""Runs: every run in the results folder with its device, backend, timer, L2 state, date and
command."""

import streamlit as st

from kvtune.dashboard import charts, data, frames, selection

st.title("Runs")
runs = selection.all_runs()
if not runs:
    selection.no_runs_message()
    st.stop()

st.caption(
    "Every run in the results folder, newest first. Pick the runs the other pages show in the "
    "sidebar (one or several)."
)
st.dataframe(frames.runs_table(runs), hide_index=True, width="stretch")

picked = selection.selected_runs()
if not picked:
    st.info("No run picked: choose one or several in the sidebar.")
    st.stop()

for run in picked:
    st.subheader(run["run_id"])
    selection.run_state_message(run)
    rows = run.get("rows")
    st.markdown(
        f"**status** {run.get('status', '?')} · **device** {frames.device_text(run)} · "
        f"**backend** {run.get('backend', '?')} · **rows** {rows if rows is not None else '—'} · "
        f"**started** {run.get('started_at', '?')}"
    )
    if run.get("command"):
        st.code(run["command"], language="bash")
    loaded = data.measurements(run["path"]) if run.get("status") != "corrupt" else None
    if loaded is not None and not loaded.ok:
        st.error(f"measurements.parquet cannot be read: {loaded.error}")
    elif loaded is not None and not loaded.value.empty:
        counts = frames.status_counts(loaded.value)
        policies = (
            sorted(loaded.value["policy"].astype(str).unique()) if "policy" in loaded.value else []
        )
        st.write(
            f"{len(loaded.value):,} measurement rows "
            f"({', '.join(f'{v} {k}' for k, v in counts.items())}); "
            f"policies: {', '.join(policies)}"
        )
        summary = frames.policy_summary(selection.with_tuned(run, loaded.value))
        if (summary["line"] == "tuned").any():  # a tuning run: its winner, not every trial
            summary = summary[~summary["line"].str.startswith("parametric")]
        if not summary.empty:
            st.plotly_chart(
                charts.policy_summary_figure(
                    summary, title="How close each policy is to the fastest one on every case"
                ),
                width="stretch",
                key=f"summary_{run['run_id']}",
            )
    if run.get("has_tuning"):
        st.write("This run holds a tuning result: see the **Study** and **Export** pages.")
    with st.expander("manifest"):
        st.json({k: v for k, v in run.items() if k not in ("cases",)}, expanded=False)

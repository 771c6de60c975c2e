"""Runs: every run in the results folder with its device, backend, timer, L2 state, date and
command, what cannot be read in it, and how close each policy came to the fastest per case.

Every string here comes from a results file: shown as a code span or plain text, never as Markdown
(dashboard/text.py); commands and storage URLs redacted again before they are shown."""

import streamlit as st

from kvtune.dashboard import charts, data, frames, selection
from kvtune.dashboard.text import code, without_none
from kvtune.harness.redact import redact_url


def _redacted(value):
    """A manifest with every string passed through redact_url (commands, storage URLs)."""
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return redact_url(value)


st.title("Runs")
runs = selection.all_runs()
if not runs:
    selection.no_runs_message()
    st.stop()

st.caption(
    "Every run in the results folder, newest first. Pick the runs the other pages show in the "
    "sidebar (one or several)."
)
st.dataframe(
    without_none(frames.runs_table(runs)), hide_index=True, width="stretch"
)

picked = selection.selected_runs()
if not picked:
    st.info("No run picked: choose one or several in the sidebar.")
    st.stop()

for run in picked:
    st.subheader(f"Run {code(run['run_id'])}")
    selection.run_state_message(run)
    rows = run.get("rows")
    st.markdown(
        f"**status** {code(run.get('status', '?'))} · **device** {code(frames.device_text(run))} · "
        f"**backend** {code(run.get('backend', '?'))} · **rows** "
        f"{code(rows if rows is not None else None)} · **started** {code(run.get('started_at'))}"
    )
    if run.get("command"):
        st.code(redact_url(str(run["command"])), language="bash")
    for problem in run.get("problems") or ():
        st.error(f"This run's {code(problem)}")
    loaded = data.measurements(run["path"]) if run.get("status") != "corrupt" else None
    if loaded is not None and not loaded.ok:
        st.error(f"measurements.parquet cannot be read: {code(loaded.error)}")
    elif loaded is not None and not loaded.value.empty:
        counts = frames.status_counts(loaded.value)
        policies = (
            sorted(loaded.value["policy"].astype(str).unique()) if "policy" in loaded.value else []
        )
        st.markdown(
            f"{len(loaded.value):,} measurement rows "
            f"({', '.join(f'{v} {code(k)}' for k, v in counts.items())}); "
            f"policies: {', '.join(code(p) for p in policies)}"
        )
        # A tuning run's trials and oracle configurations are the `best trial` and `oracle`
        # series (frames.ok_rows_with_lines), not a bar each.
        summary = frames.policy_summary(selection.with_tuned(run, loaded.value))
        if not summary.empty:
            st.plotly_chart(
                charts.policy_summary_figure(
                    summary, title="How close each policy is to the fastest one on every case"
                ),
                width="stretch",
                key=f"summary_{run['run_id']}",
            )
    if run.get("has_tuning"):
        st.markdown("This run holds a tuning result: see the **Study** and **Export** pages.")
    with st.expander("manifest"):
        st.json(_redacted({k: v for k, v in run.items() if k not in ("cases",)}), expanded=False)

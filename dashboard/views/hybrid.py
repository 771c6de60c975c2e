"""Hybrid batches (issue 15): latency versus decode batch size per (context, chunk), serial,
streams, fused, POD and tuned policies, the max(prefill alone, decode alone) bound, the
issue's targets per policy, and the speed-up over serial over every case by kind. Needs a run
of the `hybrid` suite (`kvtune bench --suite hybrid`)."""

import pandas as pd
import streamlit as st

from kvtune.dashboard import selection
from kvtune.dashboard.hybrid_charts import hybrid_figure
from kvtune.harness.hybrid_summary import (SERIAL_POLICY, hybrid_frame, one_round_note,
                                           suite_speedups, targets)

st.title("Hybrid batches")
picked = selection.picked_runs_or_stop()
measured = selection.measurements_of(picked)
if not measured:
    st.stop()
rows = pd.concat(list(measured.values()), ignore_index=True)
frame = hybrid_frame(rows)
if frame.empty:
    st.info("No hybrid sweep case in the picked runs: run `kvtune bench --suite hybrid "
            "--policies hybrid-serial,hybrid-streams,hybrid-fused,hybrid-colocated,pod` (every "
            "sweep case needs its prefill-alone and decode-alone halves, which the suite holds).")
    st.stop()
policies = sorted(frame["policy"].unique())
chosen = st.multiselect("policies", policies, default=policies, key="hybrid_policies")
st.plotly_chart(hybrid_figure(frame, chosen), width="stretch", key="hybrid_chart")
st.subheader("Targets (speedup over hybrid-serial, latency over the bound)")
st.dataframe(targets(frame[frame["policy"].isin(chosen)]), hide_index=True)
# The suite-wide form: every case measured beside hybrid-serial (the continuous-batching mixes
# and the one-kind halves too), by kind of case.
by_kind = suite_speedups(rows)
shown = by_kind["policy"].isin(chosen) & (by_kind["policy"] != SERIAL_POLICY)  # 1.0 by definition
st.subheader("Every hybrid case, by kind (speedup over hybrid-serial)")
st.dataframe(by_kind[shown], hide_index=True, key="hybrid_by_kind")
note = one_round_note(rows, by_kind[shown])
if note:
    st.warning(note[0].upper() + note[1:] + ".")

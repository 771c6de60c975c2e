"""Study: per bucket, Optuna's optimisation history, parameter importances, parallel coordinates
and slice plots, the finalists with their spreads, and tuned versus every baseline per case."""

import streamlit as st

from kvtune.dashboard import charts, data, frames, selection, storage

st.title("Study")
cfg = selection.config()
tuning = selection.tuning_runs()
listed = storage.study_names(cfg.storage)
groups = storage.group_studies(listed.value) if listed.ok else {}

sources = []
if tuning:
    sources.append("tuning run")
if groups:
    sources.append("study in the storage")
if not sources:
    st.info(
        "No tuning result to show: no run in the results folder holds a tuning.json, and "
        + (
            f"the storage has no study ({listed.error})."
            if not listed.ok
            else "the storage has no study."
        )
        + " Run `kvtune tune --suite prod-mix --backend simulator --device-model h200 --trials 40 "
        "--study demo` to make one."
    )
    selection.untuned_pick_note()
    st.stop()

selection.untuned_pick_note()
source = st.radio("source", sources, horizontal=True, key="study_source")
result, bucket_studies = None, []
if source == "tuning run":
    ids = [r["run_id"] for r in tuning]
    default = next((r["run_id"] for r in selection.selected_runs() if r.get("has_tuning")), ids[0])
    rid = st.selectbox("tuning run", ids, index=ids.index(default), key="study_run")
    run = next(r for r in tuning if r["run_id"] == rid)
    selection.run_state_message(run)
    loaded = data.tuning_result(run["path"])
    if not loaded.ok:
        st.error(loaded.error)
        st.stop()
    result = loaded.value
    bucket_studies = [b.study_name for b in result.buckets]
else:
    name = st.selectbox("study", list(groups), key="study_group")
    bucket_studies = groups[name]
    loaded = storage.tuning_result_from_studies(cfg.storage, bucket_studies)
    if loaded.ok:
        result = loaded.value
    else:
        st.info(f"Study {name}: {loaded.error}. Showing Optuna's view of its trials only.")

if result is not None:
    st.caption(
        f"study **{result.study}** · {result.kernel} · backend {result.backend}"
        f"{' (simulated)' if result.simulated else ''} · device {result.device.get('name', '?')}"
    )
    buckets = sorted(result.buckets, key=lambda b: b.min_batch)
    labels = [f"{b.name} (B {b.min_batch}-{b.max_batch})" for b in buckets]
    index = st.selectbox(
        "bucket", range(len(buckets)), format_func=labels.__getitem__, key="study_bucket"
    )
    bucket = buckets[index]
    study_name = bucket.study_name
else:
    bucket = None
    study_name = st.selectbox("bucket study", bucket_studies, key="study_bucket_name")

if bucket is not None:
    c = st.columns(4)
    c[0].metric(
        "score",
        f"{bucket.score:.3f}",
        help="Geometric mean over the bucket's cases of tuned / best baseline latency "
        "(below 1: faster)",
    )
    c[1].metric(
        "worst case",
        f"{bucket.worst:.3f}",
        help="The largest tuned / best baseline ratio of a case",
    )
    c[2].metric("trials", bucket.n_trials)
    c[3].metric(
        "regret",
        f"{bucket.regret_geomean:.3f}" if bucket.regret_geomean else "—",
        help="Geometric mean of tuned / oracle latency (measured with kvtune tune --oracle)",
    )
    st.write("Tuned params: " + ", ".join(f"`{k}={v}`" for k, v in bucket.params.to_dict().items()))

st.subheader(f"Optuna study `{study_name}`")
study = storage.load_study(cfg.storage, study_name)
if not study.ok:
    st.info(f"The study's trials are not available: {study.error}")
else:
    figures = charts.study_figures(study.value)
    titles = {
        "history": "Optimisation history",
        "importances": "Parameter importances",
        "parallel": "Parallel coordinates",
        "slice": "Slice plots",
    }
    for row in (("history", "importances"), ("parallel", "slice")):
        cols = st.columns(2)
        for col, key in zip(cols, row):
            col.markdown(f"**{titles[key]}**")
            if isinstance(figures[key], str):
                col.info(figures[key])
            else:
                col.plotly_chart(figures[key], width="stretch", key=f"study_{key}")

if bucket is not None:
    st.subheader("Finalists")
    finalists = frames.finalists_table(bucket)
    if finalists.empty:
        st.info("This bucket records no finalists.")
    else:
        st.caption(
            "The top configs re-measured interleaved at the end; spread = (p90 - p10) / median of "
            "the score. The winner is the fastest unless another is within the noise and simpler."
        )
        st.plotly_chart(charts.finalists_figure(finalists), width="stretch", key="study_finalists")
        st.dataframe(finalists, hide_index=True, width="stretch")
    st.subheader("Tuned vs every baseline, per case")
    cases = frames.case_table(bucket)
    if cases.empty:
        st.info("This bucket records no cases.")
    else:
        st.plotly_chart(
            charts.case_comparison_figure(frames.case_latencies_long(bucket)),
            width="stretch",
            key="study_cases",
        )
        st.dataframe(cases, hide_index=True, width="stretch")

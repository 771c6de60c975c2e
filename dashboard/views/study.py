"""Study: per bucket, Optuna's optimisation history, parameter importances, parallel coordinates
and slice plots (of the objective picked, for a multi-objective study, and its Pareto front), the
finalists with their spreads, and tuned versus every baseline per case."""

import pandas as pd
import streamlit as st

from kvtune.dashboard import charts, data, frames, selection, storage, validation_frames
from kvtune.dashboard.text import code, without_none

st.title("Study")
found = selection.tuning_sources()
cfg, tuning, listed, groups, sources = (found.cfg, found.tuning, found.listed, found.groups,
                                        found.sources)
if not sources:
    st.info(
        "No tuning result to show: no run in the results folder holds a tuning.json, and "
        + (
            f"the storage has no study ({code(listed.error)})."
            if not listed.ok
            else "the storage has no study."
        )
        + " Run `kvtune tune --suite prod-mix --backend simulator --device-model h200 --trials 40 "
        "--study demo` to make one."
    )
    selection.untuned_pick_note()
    st.stop()

selection.untuned_pick_note()
selection.url_widget("study_source", sources, sources[0])
source = st.radio("source", sources, horizontal=True, key="study_source")
selection.to_url("study_source", source)
result, bucket_studies = None, []
if source == "tuning run":
    ids = [r["run_id"] for r in tuning]
    default = next((r["run_id"] for r in selection.selected_runs() if r.get("has_tuning")), ids[0])
    selection.url_widget("study_run", ids, default)
    rid = st.selectbox("tuning run", ids, key="study_run")
    selection.to_url("study_run", rid)
    run = next(r for r in tuning if r["run_id"] == rid)
    selection.run_state_message(run)
    loaded = data.tuning_result(run["path"])
    if not loaded.ok:
        st.error(code(loaded.error))
        st.stop()
    result = loaded.value
    bucket_studies = [b.study_name for b in result.buckets]
else:
    selection.url_widget("study_group", list(groups), next(iter(groups)))
    name = st.selectbox("study", list(groups), key="study_group")
    selection.to_url("study_group", name)
    bucket_studies = groups[name]
    loaded = storage.tuning_result_from_studies(cfg.storage, bucket_studies)
    if loaded.ok:
        result = loaded.value
    else:
        st.info(f"Study {code(name)}: {code(loaded.error)}. Showing Optuna's view of its trials only.")

if result is not None:
    st.caption(
        f"study {code(result.study)} · {code(result.kernel)} · backend {code(result.backend)}"
        f"{' (simulated)' if result.simulated else ''} · device "
        f"{code(result.device.get('name', '?'))}"
    )
    buckets = sorted(result.buckets, key=lambda b: b.min_batch)
    labels = [f"{b.name} (B {b.min_batch}-{b.max_batch})" for b in buckets]
    selection.url_widget("study_bucket", list(range(len(buckets))), 0)
    index = st.selectbox(
        "bucket", range(len(buckets)), format_func=labels.__getitem__, key="study_bucket"
    )
    selection.to_url("study_bucket", index)
    bucket = buckets[index]
    study_name = bucket.study_name
else:
    bucket = None
    selection.url_widget("study_bucket_name", bucket_studies, bucket_studies[0])
    study_name = st.selectbox("bucket study", bucket_studies, key="study_bucket_name")
    selection.to_url("study_bucket_name", study_name)

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
    knobs = {**bucket.params.to_dict()}
    for key in ("max_chunk_tokens", "piece_cost_tokens"):  # a per-batch family's own knobs
        if getattr(bucket, key, None) is not None:
            knobs[key] = getattr(bucket, key)
    family = bucket.family or getattr(result, "rule", "")
    if family == "defer":
        st.markdown("Ships: the engine's own planner (" + code("defer") + "). The candidate "
                    "validation held back: " + ", ".join(code(f"{k}={v}") for k, v in knobs.items()))
    else:
        st.markdown(f"Ships: family {code(family)} · tuned params: "
                    + ", ".join(code(f"{k}={v}") for k, v in knobs.items()))
    if bucket.pareto_front:
        st.caption(
            "Pareto front of the two objectives (mean score, worst case) as the tuner recorded it:"
        )
        front = pd.DataFrame(list(bucket.pareto_front)).rename(
            columns={"geomean": "mean score", "worst": "worst case"}
        )
        first = [c for c in ("trial", "mean score", "worst case") if c in front]
        front = front[first + [c for c in front if c not in first]]
        st.dataframe(front.astype(object).map(str), hide_index=True, width="stretch")

if bucket is not None:
    st.subheader("Training and validation")
    v = bucket.validation
    if not v:
        st.info("This bucket records no validation (tuned with `--validate none`, or by an older "
                "kvtune): its numbers below are all on the cases it was chosen on.")
    else:
        st.caption(
            f"Validation cases ({code(v.get('source') or '?')}) were never seen by the search. "
            + ("The bucket defers to the engine's own planner: "
               + code(v.get("reason") or "") if v.get("deferred") else
               "The tuned rule ships: it beat the engine default beyond the noise "
               f"({(v.get('noise') or 0):.1%}) and is never more than 2% slower on a case.")
        )
    st.dataframe(without_none(validation_frames.train_validation_table(bucket).astype(object)),
                 hide_index=True, width="stretch")
    if v:
        with st.expander("validation cases"):
            st.dataframe(without_none(validation_frames.validation_cases(bucket)),
                         hide_index=True, width="stretch")

st.subheader("Optuna study")
st.caption(f"study {code(study_name)}")
study = storage.load_study(cfg.storage, study_name)
if not study.ok:
    st.info(f"The study's trials are not available: {code(study.error)}")
else:
    names = charts.objective_names(study.value)
    objective = 0
    if len(names) > 1:
        selection.url_widget("study_objective", list(range(len(names))), 0)
        objective = st.radio(
            "objective of the per-objective plots",
            range(len(names)),
            format_func=names.__getitem__,
            horizontal=True,
            key="study_objective",
            help="A multi-objective study: history, importances, parallel coordinates and slices "
            "show one objective at a time; the Pareto front shows both.",
        )
        selection.to_url("study_objective", objective)
        layout = (("history", "pareto"), ("importances", "parallel"), ("slice",))
    else:
        layout = (("history", "importances"), ("parallel", "slice"))
    figures = charts.study_figures(
        study.value, which=[k for row in layout for k in row], objective=objective
    )
    objective_text = f" ({names[objective]})" if len(names) > 1 else ""
    titles = {
        "history": "Optimisation history" + objective_text,
        "pareto": f"Pareto front ({' vs '.join(names[:2])})",
        "importances": "Parameter importances" + objective_text,
        "parallel": "Parallel coordinates" + objective_text,
        "slice": "Slice plots" + objective_text,
    }
    for row in layout:
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
        st.dataframe(without_none(finalists), hide_index=True, width="stretch")
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
        st.dataframe(without_none(cases), hide_index=True, width="stretch")

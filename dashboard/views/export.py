"""Export: the tuned heuristic of a tuning run as a table, and its JSON (the file `kvtune export`
writes, built by studies.export) to download."""

import streamlit as st

from kvtune.dashboard import charts, data, frames, selection, storage

st.title("Export")
cfg = selection.config()
tuning = selection.tuning_runs()
listed = storage.study_names(cfg.storage)
groups = storage.group_studies(listed.value) if listed.ok else {}
sources = (["tuning run"] if tuning else []) + (["study in the storage"] if groups else [])
if not sources:
    st.info(
        "No tuned heuristic to export: no run in the results folder holds a tuning.json and "
        "the storage has no study. Tune one with `kvtune tune ...` first."
    )
    selection.untuned_pick_note()
    st.stop()

selection.untuned_pick_note()
source = st.radio("source", sources, horizontal=True, key="export_source")
if source == "tuning run":
    ids = [r["run_id"] for r in tuning]
    default = next((r["run_id"] for r in selection.selected_runs() if r.get("has_tuning")), ids[0])
    rid = st.selectbox("tuning run", ids, index=ids.index(default), key="export_run")
    run = next(r for r in tuning if r["run_id"] == rid)
    loaded = data.tuning_result(run["path"])
    origin = {"kind": "run-dir", "run_dir": str(run["path"])}
    name = rid
else:
    name = st.selectbox("study", list(groups), key="export_study")
    loaded = storage.tuning_result_from_studies(cfg.storage, groups[name])
    origin = {"kind": "optuna-storage", "storage": storage.redact_url(cfg.storage or "")}
if not loaded.ok:
    st.error(loaded.error)
    st.stop()
result = loaded.value

st.caption(
    f"study **{result.study}** · {result.kernel} · backend {result.backend}"
    f"{' (simulated)' if result.simulated else ''} · device {result.device.get('name', '?')} · "
    f"shape {frames.shape_text(result.shape)}"
)
st.subheader("Tuned heuristic")
st.caption(
    f"One row per batch-size bucket: the five knobs of the {result.rule} rule"
    + (
        " (only min_tokens_per_cta counts: pieces of exactly that many tokens, request order)"
        if result.rule == "fixed-chunk"
        else ""
    )
    + ", the score (geometric mean of tuned / best baseline latency over the bucket's cases; "
    "below 1 is faster) and the worst case."
)
st.dataframe(frames.bucket_table(result), hide_index=True, width="stretch")
speedups = frames.bucket_speedups(result)
if speedups.empty:
    st.info("The tuning result records no per-case evidence to compare against the baselines.")
else:
    st.plotly_chart(
        charts.bucket_speedup_figure(
            speedups, title="Speedup of tuned over each baseline, per bucket"
        ),
        width="stretch",
        key="export_speedups",
    )

document, text, error = None, None, None
try:
    from kvtune.studies.export import build_heuristic, heuristic_text

    document = build_heuristic(result, source=origin)
    text = heuristic_text(document)
except ImportError:
    error = "kvtune.studies.export is not installed in this checkout"
except Exception as exc:  # noqa: BLE001 - a result the builder rejects is a message, not a crash
    error = " ".join(f"{type(exc).__name__}: {exc}".split())

safe_name = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in str(name))
if document is not None:
    st.download_button(
        "Download tuned heuristic JSON",
        text,
        file_name=f"tuned-{safe_name}.json",
        mime="application/json",
        key="export_download",
    )
    st.caption(
        "The file `kvtune export` writes (schema in docs/EXPORT.md); "
        "`studies.export.load_heuristic(path)` loads it as a policy."
    )
    targets = document.get("targets")
    if targets:
        with st.expander("engine targets"):
            st.json(targets, expanded=True)
    with st.expander("JSON"):
        st.code(text, language="json")
else:
    st.warning(
        f"The export file cannot be built ({error}); offering the tuning result as stored instead."
    )
    raw = data.tuning_json_bytes(run["path"]) if source == "tuning run" else None
    import json

    payload = raw if raw is not None else json.dumps(result.to_dict(), indent=2).encode()
    st.download_button(
        "Download tuning result JSON",
        payload,
        file_name=f"tuning-{safe_name}.json",
        mime="application/json",
        key="export_download",
    )

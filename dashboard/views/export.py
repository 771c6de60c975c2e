"""Export: the tuned heuristic of a tuning run as a table, a plan preview (kv_lens in; splits,
CTAs and waves out, like `kvtune plan --heuristic`), whether each engine target can express it (a
table), and its JSON (the file `kvtune export` writes, built by studies.export) to download."""

import streamlit as st

from kvtune.dashboard import charts, data, export_tables, frames, selection, storage
from kvtune.dashboard.text import code, without_none

st.title("Export")
found = selection.tuning_sources()
cfg, tuning, groups, sources = found.cfg, found.tuning, found.groups, found.sources
if not sources:
    st.info(
        "No tuned heuristic to export: no run in the results folder holds a tuning.json and "
        "the storage has no study. Tune one with `kvtune tune ...` first."
    )
    selection.untuned_pick_note()
    st.stop()

selection.untuned_pick_note()
selection.url_widget("export_source", sources, sources[0])
source = st.radio("source", sources, horizontal=True, key="export_source")
selection.to_url("export_source", source)
if source == "tuning run":
    ids = [r["run_id"] for r in tuning]
    default = next((r["run_id"] for r in selection.selected_runs() if r.get("has_tuning")), ids[0])
    selection.url_widget("export_run", ids, default)
    rid = st.selectbox("tuning run", ids, key="export_run")
    selection.to_url("export_run", rid)
    run = next(r for r in tuning if r["run_id"] == rid)
    loaded = data.tuning_result(run["path"])
    origin = {"kind": "run-dir", "run_dir": str(run["path"])}
    name = rid
else:
    selection.url_widget("export_study", list(groups), next(iter(groups)))
    name = st.selectbox("study", list(groups), key="export_study")
    selection.to_url("export_study", name)
    loaded = storage.tuning_result_from_studies(cfg.storage, groups[name])
    origin = {"kind": "optuna-storage", "storage": storage.redact_url(cfg.storage or "")}
if not loaded.ok:
    st.error(code(loaded.error))
    st.stop()
result = loaded.value

st.caption(
    f"study {code(result.study)} · {code(result.kernel)} · backend {code(result.backend)}"
    f"{' (simulated)' if result.simulated else ''} · device "
    f"{code(result.device.get('name', '?'))} · shape {code(frames.shape_text(result.shape))}"
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
st.dataframe(
    without_none(frames.bucket_table(result)), hide_index=True, width="stretch"
)
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

st.subheader("Plan preview")
st.caption(
    "The tuned heuristic's plan of a batch on the device it was tuned for, as "
    "`kvtune plan --heuristic tuned.json --kv-lens ...` prints it: the bucket used, the split "
    "count of every request, the CTAs (tasks) and the waves over the CTA slots."
)
selection.url_text("export_kv_lens", export_tables.DEFAULT_PREVIEW_KV_LENS)
kv_text = st.text_input("kv_lens (tokens per request, comma-separated)", key="export_kv_lens")
selection.to_url("export_kv_lens", kv_text)
try:
    preview = export_tables.plan_preview(result, kv_text)
except ValueError as exc:
    st.error(code(" ".join(str(exc).split())))
else:
    m = st.columns(5)
    m[0].metric("bucket", preview["bucket"])
    m[1].metric("CTAs (tasks)", f"{preview['num_tasks']:,}")
    m[2].metric("waves", f"{preview['waves']:.2f}")
    m[3].metric("max splits", preview["max_splits"])
    m[4].metric("split requests", preview["split_requests"])
    st.dataframe(preview["requests"], hide_index=True, width="stretch")
    st.caption(
        f"{code(preview['schedule'])} schedule, {preview['ctas_per_sm']} CTA(s) per SM, "
        f"{preview['cta_slots']:,} CTA slots on {code(preview['device'])}; grid "
        f"{preview['grid_size']:,}."
    )

document, text, error = None, None, None
try:
    from kvtune.studies.export import build_heuristic, heuristic_text

    document = build_heuristic(result, source=origin)
    text = heuristic_text(document)
except ImportError:
    error = "kvtune.studies.export is not installed in this checkout"
except Exception as exc:  # noqa: BLE001 - a result the builder rejects is a message, not a crash
    error = code(" ".join(f"{type(exc).__name__}: {exc}".split()))

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
        st.subheader("Engine targets")
        st.caption(
            "Whether each serving engine's own knobs can express the tuned heuristic, per bucket "
            "(and process-wide where the engine reads its setting once per process), the "
            "setting to use where it can, and why not where it cannot."
        )
        st.dataframe(export_tables.targets_table(targets), hide_index=True, width="stretch")
        domain = targets.get("domain")
        if domain:
            st.caption(f"Checked for {code(domain)} (max_kv_len_tokens "
                       f"{code(targets.get('max_kv_len_tokens'))}).")
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

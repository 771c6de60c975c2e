"""What every page shares: the configuration, the sidebar's run picker, and run-state messages.

The run picker lives in the sidebar, drawn by app.py on every page, so the runs picked on one page
stay picked on the others. Pages read the pick with `selected_runs()`.
"""

from __future__ import annotations

import streamlit as st

from kvtune.dashboard import data, storage

RUNS_KEY = "kvtune_runs"
SAVED_KEY = "kvtune_runs_saved"
NO_RUNS_HELP = (
    "Make one with `kvtune bench --suite threshold --backend simulator --device-model h200 "
    "--out {results}` (about 15 s on a CPU), or a tuning run with `kvtune tune`."
)


def config() -> data.DashboardConfig:
    return data.config_from_env()


def run_label(run: dict) -> str:
    """'<run id> · <status> · <device>' for pickers."""
    from kvtune.dashboard.frames import device_text

    extra = " · tuning" if run.get("has_tuning") else ""
    return f"{run.get('run_id', '?')} · {run.get('status', '?')} · {device_text(run)}{extra}"


def sidebar() -> None:
    """The results folder, the storage and the run picker (multi-select) in the sidebar."""
    cfg = config()
    side = st.sidebar
    side.caption(f"results: `{cfg.results_dir}`")
    if cfg.storage:
        side.caption(f"Optuna storage: `{storage.redact_url(cfg.storage)}`")
    else:
        side.caption(f"Optuna storage: none ({cfg.storage_note})")
    all_runs = data.runs(cfg.results_dir)
    if not all_runs:
        side.info("No runs in the results folder yet.")
        st.session_state.pop(SAVED_KEY, None)  # the first run to appear is picked by default
        return
    by_id = {r["run_id"]: r for r in all_runs}
    # Streamlit drops a widget's state when the page changes, so the pick is kept under a plain
    # session key and copied into the widget before it is drawn.
    if SAVED_KEY not in st.session_state:
        st.session_state[SAVED_KEY] = [_default_run(all_runs)]
    st.session_state[SAVED_KEY] = [r for r in st.session_state[SAVED_KEY] if r in by_id]
    st.session_state[RUNS_KEY] = list(st.session_state[SAVED_KEY])
    side.multiselect(
        "Runs",
        list(by_id),
        key=RUNS_KEY,
        on_change=_save_pick,
        format_func=lambda rid: run_label(by_id[rid]),
        help="Pick one or several runs; every page shows these.",
    )
    side.button("Reload results", help="Re-read the results folder (new runs and rows)")


def _save_pick() -> None:
    st.session_state[SAVED_KEY] = list(st.session_state[RUNS_KEY])


def _default_run(all_runs: list[dict]) -> str:
    """The newest complete run with measurements, else the newest run."""
    for run in all_runs:
        if run.get("status") == "complete" and run.get("has_measurements"):
            return run["run_id"]
    return all_runs[0]["run_id"]


def all_runs() -> list[dict]:
    return data.runs(config().results_dir)


def selected_runs() -> list[dict]:
    """The manifests of the runs picked in the sidebar, in the order picked."""
    by_id = {r["run_id"]: r for r in all_runs()}
    return [by_id[r] for r in st.session_state.get(SAVED_KEY, []) if r in by_id]


def picked_runs_or_stop() -> list[dict]:
    """The picked runs; when there are none, a message on the page and the page stops there."""
    if not all_runs():
        no_runs_message()
        st.stop()
    picked = selected_runs()
    if not picked:
        st.info("No run picked: choose one or several in the sidebar.")
        st.stop()
    return picked


def tuning_runs() -> list[dict]:
    return [r for r in all_runs() if r.get("has_tuning")]


def untuned_pick_note() -> None:
    """A caption for picked runs that hold no tuning result (a bench run, or a tuning run still
    going: its trials so far are in the storage)."""
    for run in selected_runs():
        if run.get("has_tuning"):
            continue
        if run.get("kind") == "tune" and run.get("status") == "running":
            st.caption(
                f"Run {run['run_id']} is still tuning: its result appears when it finishes; "
                "its trials so far are under *study in the storage*."
            )
        elif run.get("kind") == "tune":
            st.caption(
                f"Run {run['run_id']} ended {run.get('status', '?')} without a tuning result."
            )
        else:
            st.caption(f"Run {run['run_id']} is a {run.get('kind', '?')} run, without a study.")


def no_runs_message() -> None:
    cfg = config()
    st.info(f"No runs in `{cfg.results_dir}`. " + NO_RUNS_HELP.format(results=cfg.results_dir))


def run_state_message(run: dict) -> None:
    """A note for a run that is not simply complete: still running, failed, or unreadable."""
    status = run.get("status")
    rid = run.get("run_id", "?")
    if status == "running":
        st.info(
            f"Run {rid} is still running: the pages show the rows written so far. "
            "Use *Reload results* in the sidebar to see more."
        )
    elif status == "failed":
        st.warning(
            f"Run {rid} failed: {run.get('error') or 'no error recorded'}. "
            "The rows it kept are shown."
        )
    elif status == "corrupt":
        st.error(f"Run {rid} cannot be read: {run.get('error')}")


def measurements_of(runs: list[dict]):
    """(frames by run id, error messages shown) for the picked runs; empty frames left out."""
    frames = {}
    for run in runs:
        run_state_message(run)
        if run.get("status") == "corrupt":
            continue
        loaded = data.measurements(run["path"])
        if not loaded.ok:
            st.error(f"Run {run['run_id']}: measurements.parquet cannot be read. {loaded.error}")
            continue
        if loaded.value.empty:
            if run.get("status") != "failed":
                st.info(
                    f"Run {run['run_id']} has no measurements yet"
                    + (" (it is still running)." if run.get("status") == "running" else ".")
                )
            continue
        frames[run["run_id"]] = with_tuned(run, loaded.value)
    return frames


def with_tuned(run: dict, frame):
    """A tuning run's rows with its winning configs named `tuned` (frames.mark_tuned); other runs'
    rows unchanged."""
    from kvtune.dashboard.frames import mark_tuned

    if not run.get("has_tuning"):
        return frame
    result = data.tuning_result(run["path"])
    return mark_tuned(frame, result.value) if result.ok else frame


__all__ = [
    "RUNS_KEY",
    "all_runs",
    "config",
    "measurements_of",
    "no_runs_message",
    "run_label",
    "run_state_message",
    "selected_runs",
    "sidebar",
    "tuning_runs",
    "untuned_pick_note",
    "with_tuned",
]

"""What every page shares: the configuration, the sidebar's run picker, deep links, the
auto-refresh while a run is going, and run-state messages.

The run picker lives in the sidebar, drawn by app.py on every page, so the runs picked on one page
stay picked on the others. Pages read the pick with `selected_runs()`.

Deep links: the page is the URL's path (/latency, /study, ...; st.navigation), the picked runs
and each page's filters are its query string (?runs=...&lat_metric=...): `url_widget()` seeds a
widget from the URL on a fresh session and `to_url()` writes the widget's value back on every run,
so a view survives a reload and can be shared.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from kvtune.dashboard import data, storage
from kvtune.dashboard.text import code

RUNS_KEY = "kvtune_runs"
SAVED_KEY = "kvtune_runs_saved"
RUNS_PARAM = "runs"
REFRESH_KEY = "kvtune_auto_refresh"
REFRESH_PARAM = "refresh"
POLL_S = 3.0  # how often the results folder and the storage are polled while a run is going
NO_RUNS_HELP = (
    "Make one with `kvtune bench --suite threshold --backend simulator --device-model h200 "
    "--out {results}` (about 15 s on a CPU), or a tuning run with `kvtune tune`."
)


def config() -> data.DashboardConfig:
    return data.config_from_env()


# ---------------------------------------------------------------- deep links


def _from_url(key: str, options: list, multi: bool):
    """The URL's value for `key` matched to `options` (by their text): a list for a multi-select
    (unknown entries dropped; None when none is known), one option, or None."""
    by_text = {str(o): o for o in options}
    if multi:
        values = st.query_params.get_all(key)
        if len(values) == 1 and values[0] == "":
            return []  # "none picked", said on purpose
        picked = [by_text[v] for v in values if v in by_text]
        # A link from other runs (none of its entries exist here) falls back to the default.
        return picked or None
    value = st.query_params.get(key)
    return by_text.get(value) if value is not None else None


def url_widget(key: str, options: list, default, *, multi: bool = False) -> None:
    """Seed st.session_state[key] for the select box, radio or multi-select drawn next with
    `key=key` (and no default or index of its own): the value it holds when still one of
    `options`, else the URL's (?key=...) when it names options, else `default`."""
    if multi:
        current = st.session_state.get(key)
        if not isinstance(current, list) or any(v not in options for v in current):
            current = None
    else:
        current = st.session_state.get(key)
        if current not in options:
            current = None
    # A value the user has not changed follows the default (it depends on the runs picked).
    default_key = f"{key}__default"
    if default_key in st.session_state and current == st.session_state[default_key]:
        current = None
    elif current is None:
        current = _from_url(key, options, multi)
    if current is None:
        current = default
    st.session_state[default_key] = list(default) if multi else default
    st.session_state[key] = list(current) if multi else current


def url_text(key: str, default: str) -> None:
    """Seed st.session_state[key] for a text input drawn next: its own text, else the URL's."""
    if isinstance(st.session_state.get(key), str):
        return
    value = st.query_params.get(key)
    st.session_state[key] = value if value is not None else default


def url_flag(key: str, default: bool) -> None:
    """Seed st.session_state[key] for a checkbox or toggle drawn next (URL: 1 or 0)."""
    if isinstance(st.session_state.get(key), bool):
        return
    value = st.query_params.get(key)
    st.session_state[key] = default if value not in ("0", "1") else value == "1"


def to_url(key: str, value) -> None:
    """Write a widget's value into the URL's query string (a list as repeated keys; an empty list
    as one empty value, so that 'none picked' survives a reload too)."""
    if isinstance(value, bool):
        text = "1" if value else "0"
    elif isinstance(value, (list, tuple)):
        text = [str(v) for v in value] or [""]
    else:
        text = str(value)
    if st.query_params.get_all(key) != (text if isinstance(text, list) else [text]):
        st.query_params[key] = text


def run_label(run: dict) -> str:
    """'<run id> · <status> · <device>' for pickers."""
    from kvtune.dashboard.frames import device_text

    extra = " · tuning" if run.get("has_tuning") else ""
    return f"{run.get('run_id', '?')} · {run.get('status', '?')} · {device_text(run)}{extra}"


def sidebar() -> None:
    """The results folder, the storage and the run picker (multi-select) in the sidebar."""
    cfg = config()
    side = st.sidebar
    side.caption(f"results: {code(cfg.results_dir)}")
    if cfg.storage:
        side.caption(f"Optuna storage: {code(storage.redact_url(cfg.storage))}")
    else:
        side.caption(f"Optuna storage: none ({code(cfg.storage_note)})")
    if cfg.storage:
        listed = storage.study_names(cfg.storage)
        if not listed.ok:
            side.warning(f"The storage cannot be read: {code(listed.error)}")
    all_runs = data.runs(cfg.results_dir)
    if not all_runs:
        side.info("No runs in the results folder yet.")
        st.session_state.pop(SAVED_KEY, None)  # the first run to appear is picked by default
        if cfg.storage:
            auto_refresh([])  # a study may be tuned into the storage from another host
        return
    by_id = {r["run_id"]: r for r in all_runs}
    # Streamlit drops a widget's state when the page changes, so the pick is kept under a plain
    # session key and copied into the widget before it is drawn. A fresh session takes the pick
    # from the URL (?runs=...), else the default run.
    if SAVED_KEY not in st.session_state:
        from_url = _from_url(RUNS_PARAM, list(by_id), multi=True)
        st.session_state[SAVED_KEY] = (
            from_url if from_url is not None else [_default_run(all_runs)]
        )
    st.session_state[SAVED_KEY] = [r for r in st.session_state[SAVED_KEY] if r in by_id]
    to_url(RUNS_PARAM, st.session_state[SAVED_KEY])
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
    auto_refresh(all_runs)


def _save_pick() -> None:
    st.session_state[SAVED_KEY] = list(st.session_state[RUNS_KEY])
    to_url(RUNS_PARAM, st.session_state[SAVED_KEY])


def _default_run(all_runs: list[dict]) -> str:
    """The newest complete run with readable measurements, else the newest run."""
    for run in all_runs:
        if (
            run.get("status") == "complete"
            and run.get("has_measurements")
            and not run.get("problems")
        ):
            return run["run_id"]
    return all_runs[0]["run_id"]


# ---------------------------------------------------------------- auto-refresh


def running_runs(all_runs: list[dict]) -> list[dict]:
    return [r for r in all_runs if r.get("status") == "running"]


def poll_signature(cfg: data.DashboardConfig) -> tuple:
    """What changes while a run is going: every run's files (data.results_signature) and the
    number of trials of every study in the storage (read afresh, not from a cache)."""
    from kvtune.dashboard import storage as storages

    return (data.results_signature(cfg.results_dir), storages.trial_counts(cfg.storage))


def auto_refresh(all_runs: list[dict]) -> None:
    """A sidebar toggle (on while a run of the results folder is still going, off otherwise, e.g.
    for a study tuned from another host into the shared storage; ?refresh=0 or 1 in the URL) and,
    when on, a fragment that polls the results folder and the storage every POLL_S seconds and
    reruns the page when either changed."""
    going = running_runs(all_runs)
    url_flag(REFRESH_KEY, bool(going))
    label = "auto-refresh" + (
        f" ({len(going)} run{'s' if len(going) > 1 else ''} going)" if going else ""
    )
    on = st.sidebar.toggle(
        label,
        key=REFRESH_KEY,
        help=f"Poll the results folder and the Optuna storage every {POLL_S:g} s and redraw the "
        "page when a run wrote more rows or a study gained trials.",
    )
    to_url(REFRESH_PARAM, bool(on))
    if not on:
        return
    cfg = config()
    st.session_state["kvtune_poll_last"] = poll_signature(cfg)

    @st.fragment(run_every=POLL_S)
    def _poll() -> None:
        now = poll_signature(cfg)
        if now != st.session_state.get("kvtune_poll_last"):
            st.session_state["kvtune_poll_last"] = now
            st.rerun(scope="app")

    with st.sidebar:
        _poll()


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


@dataclass(frozen=True)
class TuningSources:
    """Where a tuned heuristic can come from, for the Study and Export pages: the dashboard's
    config, the tuning runs in the results folder, the storage's study listing (listed: a
    storage.study_names result) and its bucket-study groups, and the source names to offer
    ("tuning run", "study in the storage"; empty: nothing to show)."""

    cfg: data.DashboardConfig
    tuning: list
    listed: object
    groups: dict
    sources: list


def tuning_sources() -> TuningSources:
    """The TuningSources of this session, with every storage or run read problem shown as an
    error on the page (so a page that stops for want of a source says why)."""
    cfg = config()
    tuning = tuning_runs()
    listed = storage.study_names(cfg.storage)
    groups = storage.group_studies(listed.value) if listed.ok else {}
    if cfg.storage and not listed.ok:
        st.error("The Optuna storage cannot be read, so its studies are not offered: "
                 f"{code(listed.error)}")
    for run in selected_runs():
        for problem in run.get("problems") or ():
            st.error(f"Run {code(run['run_id'])}: {code(problem)}")
    sources = (["tuning run"] if tuning else []) + (["study in the storage"] if groups else [])
    return TuningSources(cfg, tuning, listed, groups, sources)


def untuned_pick_note() -> None:
    """A caption for picked runs that hold no tuning result (a bench run, or a tuning run still
    going: its trials so far are in the storage)."""
    for run in selected_runs():
        if run.get("has_tuning"):
            continue
        if run.get("kind") == "tune" and run.get("status") == "running":
            st.caption(
                f"Run {code(run['run_id'])} is still tuning: its result appears when it finishes; "
                "its trials so far are under *study in the storage*."
            )
        elif run.get("kind") == "tune":
            st.caption(
                f"Run {code(run['run_id'])} ended {code(run.get('status', '?'))} without a "
                "tuning result."
            )
        else:
            st.caption(
                f"Run {code(run['run_id'])} is a {code(run.get('kind', '?'))} run, without a study."
            )


def no_runs_message() -> None:
    cfg = config()
    st.info(
        f"No runs in {code(cfg.results_dir)}. " + NO_RUNS_HELP.format(results=cfg.results_dir)
    )


def run_state_message(run: dict) -> None:
    """A note for a run that is not simply complete: still running, failed, or unreadable."""
    status = run.get("status")
    rid = code(run.get("run_id", "?"))
    if status == "running":
        st.info(
            f"Run {rid} is still running: the pages show the rows written so far. "
            "Use *Reload results* in the sidebar to see more."
        )
    elif status == "failed":
        st.warning(
            f"Run {rid} failed: {code(run.get('error') or 'no error recorded')}. "
            "The rows it kept are shown."
        )
    elif status == "corrupt":
        st.error(f"Run {rid} cannot be read: {code(run.get('error'))}")


def measurements_of(runs: list[dict]):
    """(frames by run id, error messages shown) for the picked runs; empty frames left out."""
    frames = {}
    for run in runs:
        run_state_message(run)
        if run.get("status") == "corrupt":
            continue
        loaded = data.measurements(run["path"])
        if not loaded.ok:
            st.error(
                f"Run {code(run['run_id'])}: measurements.parquet cannot be read. "
                f"{code(loaded.error)}"
            )
            continue
        if loaded.value.empty:
            if run.get("status") != "failed":
                st.info(
                    f"Run {code(run['run_id'])} has no measurements yet"
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
    "POLL_S",
    "REFRESH_KEY",
    "RUNS_KEY",
    "all_runs",
    "auto_refresh",
    "config",
    "measurements_of",
    "no_runs_message",
    "poll_signature",
    "run_label",
    "run_state_message",
    "running_runs",
    "selected_runs",
    "sidebar",
    "to_url",
    "tuning_runs",
    "untuned_pick_note",
    "url_flag",
    "url_text",
    "url_widget",
    "with_tuned",
]

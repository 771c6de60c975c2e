"""Every page of the Streamlit app run by Streamlit's AppTest on fixture results: no exception, the
charts it should draw, widget changes (another run, another policy, another bucket), and clear
messages for empty and broken results."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from kvtune.dashboard.launch import ENV_RESULTS, ENV_STORAGE
from kvtune.dashboard.selection import RUNS_KEY

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
PAGES = (
    "views/runs.py",
    "views/latency.py",
    "views/study.py",
    "views/timeline.py",
    "views/export.py",
)
TIMEOUT_S = 120


def open_app(monkeypatch, results: Path, storage: str | None = None) -> AppTest:
    monkeypatch.setenv(ENV_RESULTS, str(results))
    if storage:
        monkeypatch.setenv(ENV_STORAGE, storage)
    else:
        monkeypatch.delenv(ENV_STORAGE, raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    assert_no_failure(at)
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(page).run()
    assert_no_failure(at)
    return at


def assert_no_failure(at: AppTest) -> None:
    """No exception escaped, and none was caught by app.py's last guard."""
    assert not at.exception, [e.value for e in at.exception]
    failed = [e.value for e in at.error if str(e.value).startswith("This page could not be drawn")]
    assert not failed, failed


def charts(at: AppTest) -> list:
    return at.get("plotly_chart")


def figure(at: AppTest, index: int = 0) -> dict:
    """The Plotly figure (as JSON data) of the page's index-th chart."""
    return json.loads(charts(at)[index].proto.spec)


def trace_names(fig: dict) -> set[str]:
    return {t.get("name") for t in fig["data"]}


def rule_labels(fig: dict) -> list[str]:
    return [
        s["label"]["text"]
        for s in fig["layout"].get("shapes", [])
        if s.get("label", {}).get("text")
    ]


def texts(at: AppTest) -> str:
    parts = []
    for kind in ("info", "warning", "error", "caption", "markdown", "title", "subheader"):
        parts += [str(e.value) for e in at.get(kind)]
    return "\n".join(parts)


def pick_runs(at: AppTest, run_ids: list[str]) -> AppTest:
    at.sidebar.multiselect(key=RUNS_KEY).set_value(run_ids).run()
    assert_no_failure(at)
    return at


def test_every_page_runs_on_the_fixture(monkeypatch, results_dir, bench_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name])
    for page in PAGES:
        goto(at, page)
        assert at.title[0].value, page
        if (
            page != "views/study.py"
        ):  # the study page draws its charts below; checked in its own test
            assert charts(at), f"{page} drew no chart"


def test_runs_page_lists_every_run(monkeypatch, results_dir, bench_run, tune_run):
    at = open_app(monkeypatch, results_dir)
    table = at.dataframe[0].value
    assert set(table["run"]) >= {bench_run.name, tune_run.name}
    assert "simulated (h200)" in set(table["device"])
    pick_runs(at, [bench_run.name, tune_run.name])
    subheaders = [s.value for s in at.subheader]
    assert bench_run.name in subheaders and tune_run.name in subheaders
    assert len(charts(at)) == 2  # one policy summary per picked run


def test_latency_page_draws_rules_and_follows_widgets(monkeypatch, results_dir, bench_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name])
    goto(at, "views/latency.py")
    fig = figure(at)
    assert trace_names(fig) == {"flashinfer-tensor-core", "fa3", "trtllm-oversub", "no-split"}
    assert "flashinfer-tensor-core: no split from B=33" in rule_labels(fig)
    assert fig["layout"]["xaxis"]["type"] == "log" and fig["layout"]["yaxis"]["type"] == "log"
    rules = at.dataframe[0].value  # the thresholds table, rules past B=64 included
    assert {"flashinfer-tensor-core", "trtllm-oversub", "fa3"} <= set(rules["policy"])
    assert {33, 133, 993} <= set(rules["batch_size"])

    # Another policy set: drop flashinfer-tensor-core, its line and its rule go.
    policies = at.multiselect(key="lat_policies")
    policies.set_value(["fa3", "no-split"]).run()
    assert_no_failure(at)
    fig = figure(at)
    assert trace_names(fig) == {"fa3", "no-split"}
    assert not any(label.startswith("flashinfer-tensor-core") for label in rule_labels(fig))

    # Bandwidth fraction and one distribution at a time.
    at.radio(key="lat_metric").set_value("bw_fraction").run()
    at.radio(key="lat_layout").set_value("one at a time").run()
    assert_no_failure(at)
    fig = figure(at)
    assert fig["layout"]["yaxis"]["title"]["text"] == "achieved bandwidth / ceiling"
    assert fig["layout"]["yaxis"]["type"] == "linear"
    assert len({t["xaxis"] for t in fig["data"]}) == 1  # one facet


def test_latency_page_with_several_runs_and_tuned_buckets(
    monkeypatch, results_dir, bench_run, tune_run
):
    at = open_app(monkeypatch, results_dir)
    runs = sorted(p.name for p in results_dir.iterdir() if p.is_dir() and "-bench-" in p.name)
    pick_runs(at, runs)
    goto(at, "views/latency.py")
    at.selectbox(key="lat_tuned").set_value(tune_run.name).run()
    assert_no_failure(at)
    assert "tuned bucket 9-64" in rule_labels(figure(at))
    # One policy measured with two parameter sets gets two lines.
    options = at.multiselect(key="lat_policies").options
    assert any("fixed-split[chunk_tokens=1024]" in o for o in options)
    assert any("fixed-split[chunk_tokens=4096]" in o for o in options)


def test_latency_page_on_a_tuning_run_names_the_winner_tuned(monkeypatch, results_dir, tune_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [tune_run.name])
    goto(at, "views/latency.py")
    assert "tuned" in at.multiselect(key="lat_policies").value
    fig = figure(at)
    assert "tuned bucket 9-64" in rule_labels(fig)
    assert "tuned" in trace_names(fig)


def test_study_page_tuning_run_and_storage_studies(monkeypatch, results_dir, tune_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [tune_run.name])
    goto(at, "views/study.py")
    assert at.selectbox(key="study_run").value == tune_run.name
    # history, importances, parallel coordinates, slice, finalists, cases
    assert len(charts(at)) == 6, texts(at)
    first_bucket = at.selectbox(key="study_bucket").value
    at.selectbox(key="study_bucket").set_value(1 - first_bucket).run()  # another bucket
    assert_no_failure(at)
    assert len(charts(at)) == 6
    assert "dash/9-64" in texts(at) or "dash/1-8" in texts(at)

    at.radio(key="study_source").set_value("study in the storage").run()
    at.selectbox(key="study_group").set_value("handmade").run()
    assert_no_failure(at)
    assert len(charts(at)) == 6
    at.selectbox(key="study_group").set_value("partial").run()
    assert_no_failure(at)
    assert "Optuna's view of its trials only" in texts(at)
    assert len(charts(at)) == 4  # Optuna's four plots, no finalists or cases


def test_timeline_page_follows_batch_and_policy(monkeypatch, results_dir, bench_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name])
    goto(at, "views/timeline.py")
    assert len(charts(at)) == 2
    assert at.selectbox(key="tl_policy_a").value == "flashinfer-tensor-core"
    assert at.selectbox(key="tl_policy_b").value == "fa3"
    at.selectbox(key="tl_batch").set_value(4).run()
    at.selectbox(key="tl_policy_b").set_value("no-split").run()
    assert_no_failure(at)
    left, right = figure(at, 0), figure(at, 1)
    assert left["layout"]["title"]["text"].startswith("flashinfer-tensor-core")
    assert right["layout"]["title"]["text"].startswith("no-split")
    # B=4: 4 requests, each with its own legend entry (a bar trace)
    assert len(right["data"]) == 4


def test_timeline_page_on_another_run_and_the_tuned_policy(
    monkeypatch, results_dir, bench_run, tune_run
):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name, tune_run.name])
    goto(at, "views/timeline.py")
    at.selectbox(key="tl_run").set_value(tune_run.name).run()
    assert_no_failure(at)
    labels = at.selectbox(key="tl_policy_a").options
    assert "tuned" in labels
    at.selectbox(key="tl_policy_a").set_value("tuned").run()
    assert_no_failure(at)
    assert len(charts(at)) == 2


def test_export_page_offers_the_heuristic(monkeypatch, results_dir, tune_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [tune_run.name])
    goto(at, "views/export.py")
    table = at.dataframe[0].value
    assert list(table["bucket"]) == ["1-8", "9-64"]
    assert len(charts(at)) == 1
    assert at.get("download_button"), "no download button"
    at.radio(key="export_source").set_value("study in the storage").run()
    at.selectbox(key="export_study").set_value("handmade").run()
    assert_no_failure(at)
    assert list(at.dataframe[0].value["bucket"]) == ["1-16"]


def test_empty_results_folder_says_so_on_every_page(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path / "nothing-here")
    for page in PAGES:
        goto(at, page)
        assert not charts(at)
        assert (
            "No runs" in texts(at)
            or "No tuned heuristic" in texts(at)
            or "No tuning result" in texts(at)
        ), page


def test_broken_runs_give_messages_not_tracebacks(monkeypatch, messy_results):
    at = open_app(monkeypatch, messy_results)
    runs = sorted(p.name for p in messy_results.iterdir())
    pick_runs(at, runs)
    for page in PAGES:
        goto(at, page)
    goto(at, "views/latency.py")
    shown = texts(at)
    assert "cannot be read" in shown  # the corrupt parquet and the unreadable manifest
    assert "still running" in shown
    assert "failed" in shown
    assert charts(at), "the running run's rows are still drawn"
    goto(at, "views/runs.py")
    assert "corrupt" in set(at.dataframe[0].value["status"])


def test_a_storage_that_cannot_be_opened_is_a_message(monkeypatch, results_dir, tmp_path):
    at = open_app(monkeypatch, results_dir, storage=f"sqlite:///{tmp_path / 'missing.db'}")
    goto(at, "views/study.py")
    assert not (tmp_path / "missing.db").exists()
    # The tuning run's own tuning.json is still shown; its trials are not.
    assert "trials are not available" in texts(at)


def test_a_page_that_fails_shows_one_line_not_a_traceback(monkeypatch, results_dir, bench_run):
    from kvtune.dashboard import frames

    def broken(*args, **kwargs):
        raise RuntimeError("points exploded")

    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name])
    monkeypatch.setattr(frames, "latency_points", broken)
    at.switch_page("views/latency.py").run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "This page could not be drawn: RuntimeError: points exploded"
    ]


def test_study_and_export_say_when_the_picked_run_has_no_study(monkeypatch, results_dir, bench_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name])
    for page in ("views/study.py", "views/export.py"):
        goto(at, page)
        assert f"Run {bench_run.name} is a bench run, without a study." in texts(at)

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
    subheaders = " ".join(s.value for s in at.subheader)
    assert bench_run.name in subheaders and tune_run.name in subheaders
    assert len(charts(at)) == 2  # one policy summary per picked run


def test_latency_page_draws_rules_and_follows_widgets(monkeypatch, results_dir, bench_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name])
    goto(at, "views/latency.py")
    fig = figure(at)
    assert trace_names(fig) == {"flashinfer-tensor-core", "fa3", "trtllm-oversub", "no-split", "floor"}
    floor = next(t for t in fig["data"] if t["name"] == "floor")
    assert floor["line"]["dash"] == "dot" and "bandwidth ceiling" in floor["hovertemplate"]
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
    assert trace_names(fig) == {"fa3", "no-split", "floor"}
    assert not any(label.startswith("flashinfer-tensor-core") for label in rule_labels(fig))

    # Bandwidth fraction and one distribution at a time.
    at.radio(key="lat_metric").set_value("bw_fraction").run()
    at.radio(key="lat_layout").set_value("one at a time").run()
    assert_no_failure(at)
    fig = figure(at)
    assert fig["layout"]["yaxis"]["title"]["text"] == "achieved bandwidth / ceiling"
    assert fig["layout"]["yaxis"]["type"] == "linear"
    assert len({t["xaxis"] for t in fig["data"]}) == 1  # one facet
    assert "floor" not in trace_names(fig)
    ceiling = [sh for sh in fig["layout"]["shapes"] if sh.get("name") == "unit:ceiling"]
    assert len(ceiling) == 1 and ceiling[0]["y0"] == ceiling[0]["y1"] == 1.0


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
    # Each bucket says what ships: the engine's own planner, or a family with all its knobs.
    from kvtune.studies.result import load_tuning_result

    for index, b in enumerate(sorted(load_tuning_result(tune_run).buckets,
                                     key=lambda b: b.min_batch)):
        at.selectbox(key="study_bucket").set_value(index).run()
        if b.family == "defer":
            assert "Ships: the engine's own planner" in texts(at)
        else:
            assert f"Ships: family `{b.family or 'parametric'}`" in texts(at), texts(at)
            if b.piece_cost_tokens is not None:
                assert f"piece_cost_tokens={b.piece_cost_tokens}" in texts(at)

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
        assert f"Run `{bench_run.name}` is a `bench` run, without a study." in texts(at)


# ---------------------------------------------------------------- issue 17: oracle runs, studies,
# corrupt files, devices, timeline options, deep links, export, auto-refresh, hostile strings


def all_markdown(at: AppTest) -> list[str]:
    """The Markdown source of every element that renders Markdown."""
    parts = []
    for kind in ("info", "warning", "error", "caption", "markdown", "title", "subheader",
                 "success", "exception"):
        parts += [str(e.value) for e in at.get(kind)]
    for kind in ("metric",):
        parts += [str(e.label) for e in at.get(kind)]
    return parts


def test_oracle_run_is_grouped_into_named_series(monkeypatch, results_dir, tune_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [tune_run.name])
    summary = figure(at)  # the Runs page's policy summary: a bar per series, not per config
    bars = summary["data"][0]["y"]
    # Bucket 1-8 defers (its winner plans what FlashInfer plans on the validation cases): the
    # winner's validation rows keep their policy's name (a trial's `parametric`, or a makespan
    # finalist's `makespan-chunk`), since the study did not choose it.
    from kvtune.dashboard.frames import FAMILY_POLICIES
    from kvtune.studies.result import load_tuning_result

    deferred = [next(f for f in b.finalists if f.chosen)
                for b in load_tuning_result(tune_run).buckets if b.family == "defer"]
    assert deferred
    kept = {FAMILY_POLICIES.get(f.family, "parametric") for f in deferred}
    assert set(bars) == {"tuned", "best trial", "oracle", "flashinfer-tensor-core", "fa3",
                         "trtllm-oversub", "fixed-split", *kept}
    goto(at, "views/latency.py")
    policies = at.multiselect(key="lat_policies")
    assert set(policies.options) == set(bars)
    # Named series by default; the views leave parametric configurations out of the default.
    assert set(policies.value) == set(bars) - {"best trial", "parametric"}
    assert "no thresholds" not in texts(at)
    assert "oracle-splits" not in texts(at)
    assert "oracle" in trace_names(figure(at))
    # The oracle's fastest configuration replays on the timeline.
    goto(at, "views/timeline.py")
    at.selectbox(key="tl_policy_b").set_value("oracle").run()
    assert_no_failure(at)
    assert figure(at, 1)["layout"]["title"]["text"].startswith("oracle")


def test_two_devices_compared_by_style_normalised_and_ab(monkeypatch, results_dir, bench_run, h100_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name, h100_run.name])
    goto(at, "views/latency.py")
    fig = figure(at)
    lines = [t for t in fig["data"] if t["name"] != "floor"]
    h200 = [t for t in lines if t["legendgroup"].startswith("h200 (sim) · bench-")]
    h100 = [t for t in lines if t["legendgroup"].startswith("h100 (sim) · bench-")]
    assert h200 and h100 and len(h200) + len(h100) == len(lines)
    style = {(t["line"]["dash"], t["marker"]["symbol"]) for t in h200}
    other = {(t["line"]["dash"], t["marker"]["symbol"]) for t in h100}
    assert len(style) == len(other) == 1 and style != other
    assert {t["legendgrouptitle"]["text"] for t in lines} == {t["legendgroup"] for t in lines}
    assert {t["name"] for t in h100} == {"fa3", "flashinfer-tensor-core"}
    floors = [t for t in fig["data"] if t["name"] == "floor" and t.get("showlegend", True)]
    assert {t["legendgroup"] for t in floors} == {t["legendgroup"] for t in lines}

    table = next(d.value for d in at.dataframe if "within_noise" in d.value)
    assert set(table["policy"]) == {"flashinfer-tensor-core", "fa3"}  # what both measured
    assert (table["ratio_B_over_A"] > 0).all() and table["within_noise"].dtype == bool

    at.radio(key="lat_metric").set_value("latency_ratio").run()
    assert_no_failure(at)
    baseline = at.selectbox(key="lat_baseline")
    assert baseline.value.endswith("flashinfer-tensor-core")
    fig = figure(at)
    assert fig["layout"]["yaxis"]["title"]["text"] == "latency / baseline's latency"
    assert any(sh.get("name") == "unit:baseline" for sh in fig["layout"]["shapes"])


def test_tuned_buckets_default_to_a_matching_tuning_run_or_none(
    monkeypatch, results_dir, bench_run, uniform_run, tune_run, multi_run
):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [uniform_run.name])  # no tuning run of the uniform suite
    goto(at, "views/latency.py")
    assert at.selectbox(key="lat_tuned").value == "(none)"
    pick_runs(at, [bench_run.name])  # skew80 on the h200 model, like both studies
    goto(at, "views/latency.py")
    assert at.selectbox(key="lat_tuned").value in {tune_run.name, multi_run.name}


def test_multi_objective_study_shows_its_pareto_front_and_named_objectives(
    monkeypatch, results_dir, multi_run
):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [multi_run.name])
    goto(at, "views/study.py")
    assert at.selectbox(key="study_run").value == multi_run.name
    shown = texts(at)
    assert "cannot draw" not in shown and "Objective 0" not in shown
    titles = [m.value for m in at.markdown if m.value.startswith("**")]
    assert "**Pareto front (mean score vs worst case)**" in titles
    assert "**Optimisation history (mean score)**" in titles
    # history, pareto, importances, parallel, slice, finalists, cases
    assert len(charts(at)) == 7, shown
    specs = " ".join(c.proto.spec for c in charts(at))
    assert "Objective 0" not in specs and "Objective 1" not in specs
    at.radio(key="study_objective").set_value(1).run()
    assert_no_failure(at)
    assert "**Slice plots (worst case)**" in [m.value for m in at.markdown]
    history = figure(at, 0)
    assert "worst case" in json.dumps(history["layout"]["yaxis"]["title"])
    finalists = next(
        json.loads(c.proto.spec) for c in charts(at) if '"finalists"' in c.proto.spec
    )
    assert finalists["layout"]["xaxis"]["type"] == "category"
    assert any("(chosen)" in x for x in finalists["data"][0]["x"])


def test_corrupt_tuning_json_optuna_db_and_parquet_are_named(monkeypatch, messy_results):
    at = open_app(monkeypatch, messy_results)
    table = at.dataframe[0].value.set_index("run")
    assert table.loc["20260101-000000-bench-c0c0", "status"] == "complete · files unreadable"
    assert "measurements.parquet cannot be read" in table.loc["20260101-000000-bench-c0c0", "error"]
    assert "tuning.json is not a valid" in table.loc["20260101-000004-tune-t0t0", "error"]
    pick_runs(at, ["20260101-000004-tune-t0t0", "20260101-000000-bench-c0c0"])
    shown = texts(at)
    assert "tuning.json is not a valid tuning result" in shown
    assert "This run holds a tuning result" not in shown
    assert "measurements.parquet cannot be read" in shown
    for page in ("views/study.py", "views/export.py"):
        goto(at, page)
        shown = texts(at)
        assert "The Optuna storage cannot be read" in shown, page
        assert "The storage cannot be read" in " ".join(w.value for w in at.sidebar.warning)
        assert "tuning.json is not a valid tuning result" in shown, page


def test_timeline_options_scale_rows_waves_and_idle_share(monkeypatch, results_dir, bench_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [bench_run.name])
    goto(at, "views/timeline.py")
    at.selectbox(key="tl_batch").set_value(64).run()
    left, right = figure(at, 0), figure(at, 1)
    assert left["layout"]["xaxis"]["range"] == right["layout"]["xaxis"]["range"]  # shared
    idle = [m for m in at.metric if m.label == "idle slots"]
    assert len(idle) == 2 and all(m.value.endswith("%") for m in idle)
    at.radio(key="tl_time").set_value("own").run()
    assert_no_failure(at)
    left, right = figure(at, 0), figure(at, 1)
    assert left["layout"]["xaxis"]["range"] != right["layout"]["xaxis"]["range"]
    at.radio(key="tl_rows").set_value("sms").run()
    assert_no_failure(at)
    assert figure(at, 0)["layout"]["yaxis"]["title"]["text"].startswith("SM (132")
    # Legend: the longest request first.
    assert figure(at, 0)["data"][0]["name"].startswith("request 0 · ")
    # flashinfer-tensor-core at B=64: 512 CTAs on 264 slots, a second wave
    assert at.selectbox(key="tl_policy_a").value == "flashinfer-tensor-core"
    assert any(sh.get("name") == "wave 2" for sh in figure(at, 0)["layout"]["shapes"])
    at.checkbox(key="tl_waves").uncheck().run()
    assert not any(
        (sh.get("name") or "").startswith("wave") for sh in figure(at, 0)["layout"]["shapes"]
    )


def test_deep_links_restore_page_filters_and_runs(monkeypatch, results_dir, bench_run, h100_run):
    monkeypatch.setenv(ENV_RESULTS, str(results_dir))
    monkeypatch.delenv(ENV_STORAGE, raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.query_params.update(
        runs=[bench_run.name, h100_run.name], lat_metric="bw_fraction", lat_rules="0"
    )
    at.switch_page("views/latency.py").run()
    assert_no_failure(at)
    assert at.sidebar.multiselect(key=RUNS_KEY).value == [bench_run.name, h100_run.name]
    assert at.radio(key="lat_metric").value == "bw_fraction"
    assert at.checkbox(key="lat_rules").value is False
    at.radio(key="lat_layout").set_value("one at a time").run()
    at.multiselect(key="lat_policies").set_value(
        [o for o in at.multiselect(key="lat_policies").options if o.endswith("fa3")]
    ).run()
    assert_no_failure(at)
    # What the page shows is in the URL: a reload (a fresh session on it) shows the same.
    params = dict(at.query_params)
    assert params["lat_layout"] == "one at a time" and params["runs"] == [bench_run.name, h100_run.name]
    again = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    again.query_params.update(params)
    again.switch_page("views/latency.py").run()
    assert_no_failure(again)
    assert again.multiselect(key="lat_policies").value == at.multiselect(key="lat_policies").value
    assert again.radio(key="lat_layout").value == "one at a time"
    # Another pick whose series the URL's policies do not name: the default series, not none.
    pick_runs(again, [h100_run.name])
    assert set(again.multiselect(key="lat_policies").value) == {"fa3", "flashinfer-tensor-core"}


def test_export_plan_preview_and_targets_table_without_none(monkeypatch, results_dir, tune_run):
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [tune_run.name])
    goto(at, "views/export.py")
    requests = next(d.value for d in at.dataframe if "tokens_per_piece" in d.value)
    assert list(requests["kv_len"]) == [131072, 2048, 2048]
    assert (requests["splits"] >= 1).all()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["bucket"] == "1-8" and float(metrics["waves"]) > 0
    targets = next(d.value for d in at.dataframe if "expressible" in d.value)
    assert {"flashinfer", "trtllm_gen"} <= set(targets["engine"])
    assert set(targets["expressible"]) <= {"yes", "no"}
    for frame in at.dataframe:
        cells = frame.value.astype(str).to_numpy().ravel().tolist()
        assert "None" not in cells and "nan" not in cells
    assert "None" not in " ".join(all_markdown(at))
    at.text_input(key="export_kv_lens").input("4096," * 20 + "4096").run()
    assert_no_failure(at)
    assert {m.label: m.value for m in at.metric}["bucket"] == "9-64"
    at.text_input(key="export_kv_lens").input("12,-3").run()
    assert_no_failure(at)
    assert "kv_lens" in " ".join(e.value for e in at.error)


def test_auto_refresh_while_a_run_is_going(monkeypatch, messy_results, results_dir, tmp_path):
    from kvtune.dashboard import data, selection

    at = open_app(monkeypatch, messy_results)
    toggle = at.sidebar.toggle(key=selection.REFRESH_KEY)
    assert toggle.value is True and "1 run going" in toggle.label
    toggle.set_value(False).run()
    assert_no_failure(at)
    assert at.query_params["refresh"] == "0"
    # The poll sees a run writing rows.
    cfg = data.DashboardConfig(messy_results, None, "")
    before = selection.poll_signature(cfg)
    running = messy_results / "20260101-000001-bench-r0r0" / "measurements.parquet"
    running.write_bytes(running.read_bytes())
    import os

    os.utime(running, ns=(1, 1))
    assert selection.poll_signature(cfg) != before
    # No run going: the toggle is off unless turned on; no results and no storage: no toggle.
    at = open_app(monkeypatch, results_dir)
    assert at.sidebar.toggle(key=selection.REFRESH_KEY).value is False
    assert at.sidebar.toggle(key=selection.REFRESH_KEY).label == "auto-refresh"
    at = open_app(monkeypatch, tmp_path / "nothing")
    assert not at.sidebar.get("toggle")


def test_strings_from_results_files_are_never_markdown_or_html(monkeypatch, hostile_results):
    from tests.dashboard.conftest import HOSTILE_IMAGE, HOSTILE_LINK

    at = open_app(monkeypatch, hostile_results)
    pick_runs(at, sorted(p.name for p in hostile_results.iterdir()))
    seen = []
    for page in PAGES:
        goto(at, page)
        for body in all_markdown(at):
            outside = strip_code_spans(body)
            assert "](" not in outside and "<img" not in outside and "<a " not in outside, (
                page,
                body,
            )
            seen.append(body)
        for chart in charts(at):
            spec = chart.proto.spec
            assert "<a " not in spec and "<img" not in spec, page
        for block in at.code:
            assert "secret" not in block.value, page  # storage credentials redacted again
    shown = "\n".join(seen)
    assert f"`{HOSTILE_IMAGE}`" in shown  # shown, as text
    assert f"`{HOSTILE_LINK}`" in shown or HOSTILE_LINK in texts(at)
    goto(at, "views/runs.py")
    assert "secret" not in " ".join(at.dataframe[0].value["command"])


def strip_code_spans(markdown: str) -> str:
    """`markdown` without its code spans (CommonMark: a run of n backticks up to the next run of
    exactly n): what is left is what a renderer would interpret."""
    import re

    out, i = [], 0
    for match in re.finditer(r"`+", markdown):
        if match.start() < i:
            continue
        fence = match.group(0)
        close = re.search(rf"(?<!`){fence}(?!`)", markdown[match.end():])
        if close is None:
            continue
        out.append(markdown[i:match.start()])
        i = match.end() + close.end()
    out.append(markdown[i:])
    return "".join(out)


def test_study_page_shows_training_and_validation_side_by_side(monkeypatch, results_dir, tune_run):
    from kvtune.studies.result import load_tuning_result

    buckets = load_tuning_result(tune_run).buckets
    assert any(b.validation for b in buckets), "the fixture tune run should have validated"
    at = open_app(monkeypatch, results_dir)
    pick_runs(at, [tune_run.name])
    goto(at, "views/study.py")
    assert_no_failure(at)
    assert "Training and validation" in texts(at)
    tables = [t.value for t in at.dataframe]
    sets = [t for t in tables if "set" in t.columns]
    assert sets and list(sets[0]["set"]) == ["training", "validation"]
    assert "never seen by the search" in texts(at)

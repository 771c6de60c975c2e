"""Every chart builder of dashboard/charts.py: the traces, axes and rules each figure holds."""

from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest

from kvtune.dashboard import charts, compare, frames
from kvtune.dashboard.thresholds import Threshold
from kvtune.dashboard.timeline_chart import (
    MAX_WAVE_MARKS,
    idle_slot_share,
    use_sm_rows,
    wave_starts_us,
)
from kvtune.harness.device import device_model
from kvtune.harness.sim_model import simulate
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape
from tests.dashboard.test_frames import small_result

H200 = device_model("h200")
SHAPE = AttentionShape()


def points(
    lines=("fa3", "no-split"), dists=("skew80", "uniform"), sizes=(1, 4, 16, 64)
) -> pd.DataFrame:
    out = []
    for li, line in enumerate(lines):
        for dist in dists:
            for b in sizes:
                out.append(
                    {
                        "line": line,
                        "policy": line,
                        "run_id": "r",
                        "distribution": dist,
                        "batch_size": b,
                        "latency_us": 100.0 * (li + 1) * b,
                        "bw_fraction": 0.5,
                        "latency_p10_us": 90.0 * (li + 1) * b,
                        "latency_p90_us": 110.0 * (li + 1) * b,
                        "cases": 1,
                        "max_splits": 4 + li,
                        "split_requests": 1,
                        "grid_size": 64,
                        "num_tasks": 64,
                        "waves": 0.25,
                    }
                )
    return pd.DataFrame(out)


def rule(policy, batch, kind="regime"):
    return Threshold(policy, batch, kind, f"{policy}: rule at {batch}")


def test_latency_figure_has_a_line_per_policy_and_facet_and_log_axes():
    fig = charts.latency_figure(points())
    assert len(fig.data) == 4  # 2 lines x 2 facets
    assert {t.name for t in fig.data} == {"fa3", "no-split"}
    assert sum(t.showlegend for t in fig.data) == 2  # one legend entry per line
    assert {t.xaxis for t in fig.data} == {"x", "x2"}
    assert (
        fig.layout.xaxis.type == "log"
        and fig.layout.xaxis2.type == "log"
        and fig.layout.yaxis.type == "log"
    )
    assert [a.text for a in fig.layout.annotations] == ["skew80", "uniform"]
    fa3 = next(t for t in fig.data if t.name == "fa3")
    assert list(fa3.x) == [1, 4, 16, 64] and fa3.line.color == charts.POLICY_COLORS["fa3"]
    # Hover: splits, CTAs and waves of each point.
    assert (
        "splits" in fa3.hovertemplate
        and "CTAs" in fa3.hovertemplate
        and "waves" in fa3.hovertemplate
    )
    assert fa3.customdata[0][0] == 4 and fa3.customdata[0][2] == 64 and fa3.customdata[0][4] == 0.25
    assert fa3.error_y.array is not None  # p10..p90 bars


def test_threshold_rules_are_vertical_labelled_lines_on_every_facet_inside_the_range():
    rules = [rule("flashinfer-tensor-core", 33), rule("fa3", 993), rule("tuned", 9, "bucket")]
    fig = charts.latency_figure(points(), rules)
    drawn = charts.rule_shapes(fig)
    assert len(drawn) == 4  # 33 and 9 on both facets; 993 lies past B=64
    for shape in drawn:
        assert (
            shape.x0 == shape.x1
            and shape.yref.endswith("domain")
            and (shape.y0, shape.y1) == (0, 1)
        )
    at_33 = [s for s in drawn if s.x0 == 32.5]
    assert {s.xref for s in at_33} == {"x", "x2"}
    assert at_33[0].label.text == "flashinfer-tensor-core: rule at 33"
    assert (
        at_33[0].line.color == charts.POLICY_COLORS["flashinfer-tensor-core"]
        and at_33[0].line.dash == "dash"
    )
    assert next(s for s in drawn if s.x0 == 8.5).line.dash == "dot"  # bucket boundaries are dotted


def test_bandwidth_metric_single_distribution_and_bad_metric():
    fig = charts.latency_figure(points(), metric="bw_fraction", distributions=["uniform"])
    assert len(fig.data) == 2 and fig.layout.yaxis.type == "linear"
    assert fig.layout.yaxis.title.text == "achieved bandwidth / ceiling"
    assert all(t.error_y.array is None for t in fig.data)
    with pytest.raises(ValueError, match="metric"):
        charts.latency_figure(points(), metric="joules")
    empty = charts.latency_figure(points().iloc[0:0])
    assert not empty.data and "no measurements" in empty.layout.annotations[0].text


def test_floor_line_on_latency_and_unit_rule_on_bandwidth_and_normalised_views():
    pts = points()
    floor = pd.DataFrame(
        {
            "line": "floor",
            "run_id": "r",
            "distribution": ["skew80"] * 4 + ["uniform"] * 4,
            "batch_size": [1, 4, 16, 64] * 2,
            "floor_us": [50.0, 60.0, 70.0, 80.0] * 2,
        }
    )
    fig = charts.latency_figure(pts, floor=floor)
    floors = [t for t in fig.data if t.name == "floor"]
    assert len(floors) == 2 and list(floors[0].y) == [50.0, 60.0, 70.0, 80.0]
    assert sum(t.showlegend for t in floors) == 1 and floors[0].line.dash == "dot"
    assert min(fig.layout.yaxis.tickvals) <= 50.0  # the floor is inside the axis
    bw = charts.latency_figure(pts, floor=floor, metric="bw_fraction")
    assert not [t for t in bw.data if t.name == "floor"]  # the floor is a latency
    units = [s for s in bw.layout.shapes if (s.name or "").startswith("unit:")]
    assert len(units) == 2 and all(s.y0 == s.y1 == 1.0 for s in units)
    assert units[0].label.text == "ceiling"
    ratio = compare.normalise(pts, "fa3")
    assert ratio.loc[ratio["line"] == "fa3", "latency_ratio"].eq(1.0).all()
    assert ratio.loc[ratio["line"] == "no-split", "latency_ratio"].eq(2.0).all()
    norm = charts.latency_figure(ratio, metric="latency_ratio")
    assert norm.layout.yaxis.type == "log"
    assert [s.label.text for s in norm.layout.shapes if (s.name or "").startswith("unit:")] == [
        "baseline",
        "baseline",
    ]
    with pytest.raises(ValueError, match="baseline"):
        compare.normalise(pts, "not drawn")


def test_coinciding_threshold_labels_are_staggered():
    assert charts.stagger_slots([32.5, 32.5, 128.5, 132.5, 992.5]) == [0, 1, 0, 1, 0]
    rules = [rule("fa3", 33), rule("flashinfer-tensor-core", 33), rule("trtllm-oversub", 34)]
    fig = charts.latency_figure(points(dists=("skew80",)), rules)
    labels = [(s.label.textposition, s.label.yanchor) for s in charts.rule_shapes(fig)]
    assert len(set(labels)) == 3  # three rules within 4%: three places for their labels


def test_runs_styled_by_dash_and_device_by_marker():
    manifests = [
        {"run_id": "20260101-000000-bench-aaaa", "device": {"name": "h200", "live": False}},
        {"run_id": "20260101-000001-bench-bbbb", "device": {"name": "h100", "live": False}},
        {"run_id": "20260101-000002-bench-cccc", "device": {"name": "h200", "live": False}},
    ]
    names = compare.run_labels(manifests)
    assert names["20260101-000000-bench-aaaa"] == "h200 (sim) · bench-aaaa"
    styles = compare.run_styles(manifests)
    dashes = [styles[m["run_id"]]["dash"] for m in manifests]
    symbols = [styles[m["run_id"]]["symbol"] for m in manifests]
    assert len(set(dashes)) == 3 and symbols[0] == symbols[2] != symbols[1]
    pts = pd.concat(
        [points().assign(run_id=m["run_id"]) for m in manifests[:2]], ignore_index=True
    )
    pts["line"] = pts["run_id"].map(names) + " · " + pts["policy"]
    fig = charts.latency_figure(pts, run_styles=styles, run_names=names)
    by_run = {t.legendgroup: (t.line.dash, t.marker.symbol) for t in fig.data}
    assert by_run["h200 (sim) · bench-aaaa"] == ("solid", "circle")
    assert by_run["h100 (sim) · bench-bbbb"] == ("dash", "square")
    assert {t.legendgrouptitle.text for t in fig.data} == {names[m["run_id"]] for m in manifests[:2]}
    # Colour stays the policy's whatever the run.
    assert {t.line.color for t in fig.data if t.name == "fa3"} == {charts.POLICY_COLORS["fa3"]}
    assert {t.name for t in fig.data} == {"fa3", "no-split"}  # the run is the group's title


def test_ab_table_ratio_noise_band_and_within_noise_flag():
    pts = pd.DataFrame(
        {
            "run_id": ["a", "a", "b", "b"],
            "policy": ["fa3", "no-split", "fa3", "no-split"],
            "distribution": "skew80",
            "batch_size": 32,
            "latency_us": [100.0, 200.0, 102.0, 300.0],
            "noise_p10_us": [95.0, 198.0, 97.0, 297.0],
            "noise_p90_us": [105.0, 202.0, 107.0, 303.0],
        }
    )
    table = compare.ab_table(pts, "a", "b").set_index("policy")
    assert table.loc["fa3", "ratio_B_over_A"] == pytest.approx(1.02)
    assert table.loc["fa3", "ratio_p10"] == pytest.approx(97 / 105)
    assert table.loc["fa3", "ratio_p90"] == pytest.approx(107 / 95)
    assert bool(table.loc["fa3", "within_noise"]) and not bool(table.loc["no-split", "within_noise"])
    assert compare.ab_table(pts, "a", "nobody").empty


def test_log_axis_ticks():
    fig = charts.latency_figure(points(sizes=(1, 3, 48)))
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8, 16, 32, 64]
    assert list(fig.layout.yaxis.tickvals) == [100, 200, 300, 500, 1000, 2000, 3000, 5000, 10000]
    assert charts.round_log_ticks([266.9, 2730.0]) == [200, 300, 500, 1000, 2000, 3000]
    assert charts.power_of_two_ticks([0, float("nan")]) == [] and charts.round_log_ticks([]) == []


def test_policy_colors_are_stable():
    assert charts.policy_color("r1 · fa3") == charts.POLICY_COLORS["fa3"]
    assert (
        charts.policy_color("fixed-split[chunk_tokens=4096]") == charts.POLICY_COLORS["fixed-split"]
    )
    assert charts.policy_color("something-new") == charts.policy_color("something-new")


def sim_frame(policy_name: str, kv_lens):
    plan = policies.get(policy_name).plan(np.asarray(kv_lens), SHAPE, H200)
    return simulate(plan, SHAPE, H200), plan


def test_timeline_figure_one_bar_per_task_one_row_per_slot():
    kv = [131072] + [2048] * 7
    result, plan = sim_frame("no-split", kv)
    fig = charts.timeline_figure(
        result.to_frame(),
        sm_count=H200.sm_count,
        num_slots=result.num_slots,
        kv_lens=kv,
        stage1_us=result.stage1_us,
        time_us=result.time_us,
        title="no-split",
    )
    assert len(fig.data) == 8  # a legend entry (trace) per request for a small batch
    assert sum(len(t.x) for t in fig.data) == plan.num_tasks
    assert fig.data[0].name == "request 0 · 131,072 tok"
    rows = np.concatenate([np.asarray(t.y) for t in fig.data])
    assert rows.min() >= 0 and rows.max() < result.num_slots
    ends = np.concatenate([np.asarray(t.base) + np.asarray(t.x) for t in fig.data])
    assert ends.max() == pytest.approx(
        result.stage1_us - 3.0, rel=0.05
    )  # the launch cost is outside the bars
    # The long request's bars are the tail: they end last.
    long_end = max(np.asarray(fig.data[0].base) + np.asarray(fig.data[0].x))
    assert long_end == pytest.approx(ends.max())
    assert [s.name for s in fig.layout.shapes] == ["end"]  # no merge: nothing is split
    assert fig.layout.yaxis.range[0] == result.num_slots - 0.5


def test_timeline_figure_legend_longest_first_waves_and_the_merge():
    kv = [1024] * 20 + [100_000] + [1024] * 19  # the longest request is not the first
    result, plan = sim_frame("fa3", kv)
    assert result.merge_us > 0
    frame = result.to_frame()
    fig = charts.timeline_figure(
        frame,
        sm_count=H200.sm_count,
        num_slots=result.num_slots,
        stage1_us=result.stage1_us,
        time_us=result.time_us,
        x_max_us=5000.0,
        kv_lens=kv,
    )
    # The longest request leads the legend (and takes the first colour); the 28 shortest share
    # one entry whose bars keep cycled colours.
    assert fig.data[0].name == "request 20 · 100,000 tok"
    assert fig.data[0].marker.color == charts.REQUEST_PALETTE[0]
    assert len(fig.data) == charts.TIMELINE_LEGEND_MAX_REQUESTS + 1
    assert fig.data[-1].name.startswith("28 other requests")
    assert sum(len(t.x) for t in fig.data) == plan.num_tasks
    others = list(fig.data[-1].marker.color)
    assert len(set(others)) > 1
    names = [s.name for s in fig.layout.shapes]
    assert names[-2:] == ["attention done", "end"]
    assert "merge" in fig.layout.shapes[-1].label.text
    waves = wave_starts_us(frame, result.num_slots)
    assert [n for n in names if n.startswith("wave")] == [
        f"wave {k}" for k in range(2, len(waves) + 2)
    ]
    assert len(waves) == min(-(-plan.num_tasks // result.num_slots) - 1, MAX_WAVE_MARKS)
    assert fig.layout.xaxis.range == (0, 5000.0)
    # Without x_max_us the panel scales to its own end.
    own = charts.timeline_figure(
        frame, sm_count=H200.sm_count, num_slots=result.num_slots, time_us=result.time_us,
        waves=False,
    )
    assert own.layout.xaxis.range[1] == pytest.approx(result.time_us * 1.02)
    assert not [s for s in own.layout.shapes if s.name.startswith("wave")]


def test_timeline_rows_per_sm_and_idle_share():
    kv = [131072] + [2048] * 63
    result, _ = sim_frame("fa3", kv)
    frame = result.to_frame()
    by_sm = charts.timeline_figure(
        frame, sm_count=H200.sm_count, num_slots=result.num_slots, rows="sms"
    )
    rows = np.concatenate([np.asarray(t.y) for t in by_sm.data])
    assert rows.max() < H200.sm_count and by_sm.layout.yaxis.range[0] == H200.sm_count - 0.5
    assert use_sm_rows("auto", num_slots=132 * 8, sm_count=132, tasks=10)
    assert not use_sm_rows("auto", num_slots=132, sm_count=132, tasks=100)
    assert use_sm_rows("auto", num_slots=132, sm_count=132, tasks=5000)
    with pytest.raises(ValueError, match="rows"):
        use_sm_rows("cells", num_slots=132, sm_count=132, tasks=1)
    share = idle_slot_share(frame, result.num_slots, result.stage1_us)
    busy = float((frame["end_us"] - frame["start_us"]).sum())
    assert share == pytest.approx(1 - busy / (result.num_slots * result.stage1_us))
    assert 0.0 < share < 1.0


def test_study_and_tuning_figures():
    result = small_result()
    bucket = result.buckets[1]
    fin = charts.finalists_figure(frames.finalists_table(bucket))
    assert len(fin.data) == 1 and list(fin.data[0].x) == ["#0 (chosen)", "#1"]
    assert fin.layout.xaxis.type == "category"  # "#1" is a label, not the number 1
    assert list(fin.data[0].error_y.array) == pytest.approx([0.1, 0.0])
    cases = charts.case_comparison_figure(frames.case_latencies_long(bucket))
    assert [t.name for t in cases.data] == ["tuned", "fa3", "no-split", "oracle"]
    assert cases.layout.yaxis.type == "log"
    speed = charts.bucket_speedup_figure(frames.bucket_speedups(result))
    assert [t.name for t in speed.data] == ["fa3", "no-split"]
    summary = charts.policy_summary_figure(
        pd.DataFrame(
            {
                "line": ["a", "b"],
                "cases": [2, 2],
                "geomean_slowdown": [1.0, 2.0],
                "worst_slowdown": [1.0, 4.0],
                "best_on": [2, 0],
            }
        )
    )
    assert list(summary.data[0].y) == [
        "b",
        "a",
    ]  # slowest at the bottom of the list, fastest on top


def test_study_figures_draw_optunas_plots_or_say_why_not():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(
        lambda t: (
            t.suggest_int("max_waves", 1, 16)
            + (t.suggest_categorical("schedule", ["a", "b"]) == "a")
        ),
        n_trials=6,
    )
    figs = charts.study_figures(study)
    assert set(figs) == {"history", "importances", "parallel", "slice"}
    assert all(not isinstance(f, str) for f in figs.values()), figs
    empty = charts.study_figures(optuna.create_study())
    assert all(isinstance(v, str) and "no completed trial" in v for v in empty.values())
    with pytest.raises(ValueError, match="which"):
        charts.study_figures(study, which=["contour"])


def test_multi_objective_study_draws_a_pareto_front_and_named_per_objective_plots():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        directions=["minimize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=0)
    )
    study.optimize(
        lambda t: (t.suggest_float("max_waves", 1, 16), 17 - t.suggest_float("max_splits", 1, 16)),
        n_trials=8,
    )
    assert charts.objective_names(study) == ["mean score", "worst case"]
    which = ("history", "pareto", "importances", "parallel", "slice")
    figs = charts.study_figures(study, which=which, objective=1)
    assert all(not isinstance(f, str) for f in figs.values()), figs
    history = figs["history"]
    assert "worst case" in history.layout.yaxis.title.text
    pareto = figs["pareto"]
    assert pareto.layout.xaxis.title.text == "mean score"
    assert pareto.layout.yaxis.title.text == "worst case"
    single = optuna.create_study()
    single.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert "multi-objective" in charts.study_figures(single, which=["pareto"])["pareto"]
    with pytest.raises(ValueError, match="objective"):
        charts.study_figures(study, objective=2)

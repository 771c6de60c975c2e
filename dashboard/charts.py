"""Plotly figure builders: pure functions from DataFrames (and Optuna studies) to figures.
This module holds the latency chart and the policy summary; study_charts.py the Study and Export
pages' figures, timeline_chart.py the SM timeline (all importable from here).

Nothing here reads files or touches Streamlit, so every chart is unit-tested on its own: the
traces a figure holds, its axes and its threshold rules are plain attributes of the Figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvtune.dashboard.figure_parts import POLICY_COLORS, policy_color, vertical_rule
from kvtune.dashboard.frames import METRICS
from kvtune.dashboard.text import plain
from kvtune.dashboard.thresholds import Threshold

# The Study page's figures and the SM timeline's live in modules of their own; charts.<name>
# stays their name.
from kvtune.dashboard.study_charts import (
    STUDY_FIGURES,
    bucket_speedup_figure,
    case_comparison_figure,
    finalists_figure,
    objective_names,
    study_figures,
)
from kvtune.dashboard.timeline_chart import (
    REQUEST_PALETTE,
    TIMELINE_LEGEND_MAX_REQUESTS,
    timeline_figure,
)

MAX_FACET_COLUMNS = 3
FLOOR_COLOR = "#555555"
# Threshold rules closer than this on the log batch axis (a ratio) are one cluster: their labels
# are staggered (alternate sides of the rule, then down the facet) instead of printed on top of
# each other.
RULE_CLUSTER_RATIO = 1.12
RULE_LABEL_POSITIONS = ("end", "middle", "start")
RULE_LABEL_XANCHORS = ("right", "center", "left")
FACET_HEIGHT_PX = 380


def _axis_names(index: int) -> tuple[str, str]:
    """('x', 'y') for subplot 1, ('x2', 'y2') for subplot 2, ... (make_subplots' row-major "
    "order)."""
    suffix = "" if index == 1 else str(index)
    return f"x{suffix}", f"y{suffix}"


def latency_figure(
    points: pd.DataFrame,
    thresholds: Sequence[Threshold] = (),
    *,
    metric: str = "latency_us",
    distributions: Sequence[str] | None = None,
    title: str = "",
    floor: pd.DataFrame | None = None,
    run_styles: dict[str, dict] | None = None,
    run_names: dict[str, str] | None = None,
) -> go.Figure:
    """Latency (or bandwidth fraction, or latency over a baseline's) versus batch size: one line
    per `line` of `points`, one facet per distribution, log batch-size axis (and log latency axis),
    and a labelled vertical rule per threshold inside the batch sizes drawn (labels of rules that
    nearly coincide staggered).

    points: latency_points() output (with latency_ratio for that metric: compare.normalise).
    thresholds: Threshold rules (drawn at batch_size - 0.5 on every facet whose batch sizes span
    it). metric: a key of frames.METRICS. distributions: facet order (default: as sorted in points).
    floor: compare.floor_points(), drawn as a grey dotted line per run on the latency view; the
    bandwidth view draws its rule at 1.0 (the ceiling), the normalised view at 1.0 (the baseline).
    run_styles: {run id: {"dash", "symbol"}} (compare.run_styles) to tell runs and devices apart;
    run_names: {run id: name} for the legend's groups. Hover: splits, CTAs, waves.
    """
    if metric not in METRICS:
        raise ValueError(f"metric: {metric!r} not allowed; allowed: {', '.join(METRICS)}")
    dists = (
        list(distributions)
        if distributions is not None
        else sorted(points["distribution"].unique())
        if not points.empty
        else []
    )
    n = max(len(dists), 1)
    cols = min(MAX_FACET_COLUMNS, n)
    rows = math.ceil(n / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[plain(d) for d in dists] or None,
        horizontal_spacing=0.06,
        vertical_spacing=0.12 if rows > 1 else 0.1,
    )
    shown: set[str] = set()
    styles = run_styles or {}
    for k, dist in enumerate(dists, start=1):
        row, col = (k - 1) // cols + 1, (k - 1) % cols + 1
        sub = points[points["distribution"] == dist]
        for line, part in sub.groupby("line", sort=True):
            part = part.sort_values("batch_size")
            run_id = str(part["run_id"].iloc[0]) if "run_id" in part else ""
            group = (run_names or {}).get(run_id) if run_names else None
            fig.add_trace(
                _latency_trace(
                    line, part, metric, showlegend=line not in shown,
                    style=styles.get(run_id), group=group,
                ),
                row=row,
                col=col,
            )
            shown.add(line)
        if metric == "latency_us" and floor is not None and not floor.empty:
            for line, part in floor[floor["distribution"] == dist].groupby("line", sort=True):
                part = part.sort_values("batch_size")
                run_id = str(part["run_id"].iloc[0])
                style = styles.get(run_id, {})
                group = (run_names or {}).get(run_id)
                fig.add_trace(
                    go.Scatter(
                        x=part["batch_size"].to_numpy(),
                        y=part["floor_us"].to_numpy(dtype=float),
                        mode="lines",
                        name=plain(line.rsplit(" · ", 1)[-1]) if group else plain(line),
                        legendgroup=plain(group) if group else plain(line),
                        showlegend=line not in shown,
                        line={"color": FLOOR_COLOR, "width": 1.5,
                              "dash": "dot" if style.get("dash", "solid") == "solid" else style["dash"]},
                        hovertemplate=(
                            f"<b>{plain(line)}</b><br>B=%{{x}}<br>%{{y:,.1f}} us: the batch's "
                            "bytes at the bandwidth ceiling<extra></extra>"
                        ),
                    ),
                    row=row,
                    col=col,
                )
                shown.add(line)
        if metric in ("bw_fraction", "latency_ratio") and not sub.empty:
            xref, yref = _axis_names(k)
            text = "ceiling" if metric == "bw_fraction" else "baseline"
            fig.add_shape(
                type="line", xref=f"{xref} domain", yref=yref, x0=0, x1=1, y0=1.0, y1=1.0,
                line={"color": FLOOR_COLOR, "width": 1.5, "dash": "dot"}, name=f"unit:{text}",
                label={"text": text, "textposition": "end", "font": {"size": 10}},
            )
        if not sub.empty:
            lo, hi = float(sub["batch_size"].min()), float(sub["batch_size"].max())
            inside = sorted((r for r in thresholds if lo < r.rule_x < hi), key=lambda r: r.rule_x)
            for rule, slot in zip(inside, stagger_slots([r.rule_x for r in inside])):
                _add_rule(fig, k, rule, slot)
    log_y = metric in ("latency_us", "latency_ratio")
    x_ticks = power_of_two_ticks(points["batch_size"]) if not points.empty else []
    y_values = points[metric] if metric in points and not points.empty else []
    if metric == "latency_us" and floor is not None and not floor.empty:
        y_values = np.concatenate([np.asarray(y_values, dtype=float), floor["floor_us"].to_numpy(dtype=float)])
    if metric == "latency_ratio" and len(y_values):
        y_values = np.append(np.asarray(y_values, dtype=float), 1.0)
    y_ticks = round_log_ticks(y_values) if log_y and len(y_values) else []
    for k in range(1, rows * cols + 1):
        xname, yname = _axis_names(k)
        xaxis = fig.layout[xname.replace("x", "xaxis", 1)]
        xaxis.update(
            type="log", title_text="batch size (requests)" if k > (rows - 1) * cols else None
        )
        if x_ticks:
            xaxis.update(tickvals=x_ticks, ticktext=[f"{t:,}" for t in x_ticks])
        yaxis = fig.layout[yname.replace("y", "yaxis", 1)]
        yaxis.update(
            type="log" if log_y else "linear",
            title_text=METRICS[metric] if (k - 1) % cols == 0 else None,
        )
        if y_ticks:
            yaxis.update(tickvals=y_ticks, ticktext=[f"{t:,g}" for t in y_ticks])
        if not log_y:
            yaxis.update(rangemode="tozero")
    fig.update_layout(
        title=plain(title) if title else None,
        height=FACET_HEIGHT_PX * rows + 80 + (40 if run_names else 0),
        hovermode="closest",
        legend={
            "title": "run · policy" if run_names else "policy",
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.04 + 0.02 * rows,
            "x": 0,
        },
        margin={"t": 110 + (40 if run_names else 0), "l": 60, "r": 20, "b": 50},
    )
    if not dists:
        fig.add_annotation(
            text="no measurements to draw",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
        )
    return fig


def stagger_slots(xs: Sequence[float]) -> list[int]:
    """A label slot per rule (xs sorted, batch-size units): 0 for a rule with no close neighbour;
    inside a cluster of rules closer than RULE_CLUSTER_RATIO apart, 0, 1, 2, ... in order, so
    coinciding rules get different sides and heights (_add_rule)."""
    slots, previous, slot = [], None, 0
    for x in xs:
        if previous is not None and previous > 0 and x / previous < RULE_CLUSTER_RATIO:
            slot += 1
        else:
            slot = 0
        slots.append(slot)
        previous = x
    return slots


def power_of_two_ticks(values) -> list[int]:
    """Powers of two spanning `values` (batch sizes): the batch-size axis's ticks."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    if arr.size == 0:
        return []
    lo, hi = int(np.floor(np.log2(arr.min()))), int(np.ceil(np.log2(arr.max())))
    return [2**k for k in range(lo, hi + 1)]


def round_log_ticks(values) -> list[float]:
    """Round values (..., 100, 200, 300, 500, 1000, ...) spanning `values`: a log axis's ticks."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    if arr.size == 0:
        return []
    lo, hi = float(arr.min()), float(arr.max())
    ticks = []
    for exponent in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1):
        for mantissa in (1, 2, 3, 5):
            ticks.append(mantissa * 10.0**exponent)
    below = [t for t in ticks if t <= lo]
    above = [t for t in ticks if t >= hi]
    first, last = (below[-1] if below else ticks[0]), (above[0] if above else ticks[-1])
    return [t for t in ticks if first <= t <= last]


def _latency_trace(
    line: str,
    part: pd.DataFrame,
    metric: str,
    showlegend: bool,
    style: dict | None = None,
    group: str | None = None,
) -> go.Scatter:
    custom = np.column_stack(
        [
            part["max_splits"].to_numpy(dtype=float),
            part["split_requests"].to_numpy(dtype=float),
            part["grid_size"].to_numpy(dtype=float),
            part["num_tasks"].to_numpy(dtype=float),
            part["waves"].to_numpy(dtype=float),
            part["cases"].to_numpy(dtype=float),
            part["latency_us"].to_numpy(dtype=float),
            part["bw_fraction"].to_numpy(dtype=float),
        ]
    )
    name = plain(line)
    # Grouped by run (legendgrouptitle): the entry needs only the policy; the hover keeps all.
    entry = plain(line.rsplit(" · ", 1)[-1]) if group else name
    ratio = (
        "<br>%{y:.3f}x the baseline's latency" if metric == "latency_ratio" else ""
    )
    hover = (
        f"<b>{name}</b><br>B=%{{x}}<br>latency %{{customdata[6]:,.1f}} us{ratio}"
        "<br>bandwidth %{customdata[7]:.1%} of ceiling"
        "<br>splits: max %{customdata[0]:.0f}, %{customdata[1]:.0f} requests split"
        "<br>CTAs: %{customdata[2]:,.0f} launched, %{customdata[3]:,.0f} tasks"
        "<br>waves: %{customdata[4]:.2f}<br>cases: %{customdata[5]:.0f}<extra></extra>"
    )
    y = part[metric].to_numpy(dtype=float)
    error_y = None
    if metric == "latency_us":
        upper = part["latency_p90_us"].to_numpy(dtype=float) - y
        lower = y - part["latency_p10_us"].to_numpy(dtype=float)
        if np.nanmax(np.abs(np.concatenate([upper, lower]))) > 0:
            error_y = {
                "type": "data",
                "array": np.clip(upper, 0, None),
                "arrayminus": np.clip(lower, 0, None),
                "thickness": 1,
                "width": 2,
            }
    color = policy_color(line)
    style = style or {}
    extra = {"legendgrouptitle": {"text": plain(group)}} if group else {}
    return go.Scatter(
        x=part["batch_size"].to_numpy(),
        y=y,
        mode="lines+markers",
        name=entry,
        legendgroup=plain(group) if group else name,
        showlegend=showlegend,
        line={"color": color, "width": 2, "dash": style.get("dash", "solid")},
        marker={"size": 7, "color": color, "symbol": style.get("symbol", "circle")},
        **extra,
        customdata=custom,
        hovertemplate=hover,
        error_y=error_y,
    )


def _add_rule(fig: go.Figure, subplot: int, rule: Threshold, slot: int = 0) -> None:
    """A threshold's dashed (regime) or dotted (bucket) rule; its label runs up the rule, on the
    left side for even slots and the right for odd ones, at the top, middle or bottom for each
    further pair (stagger_slots), so that rules at nearly the same batch size keep readable
    labels."""
    xref, yref = _axis_names(subplot)
    color = policy_color(rule.policy)
    vertical_rule(
        fig, rule.rule_x, xref=xref, yref=yref,
        line={"color": color, "width": 1.5, "dash": "dash" if rule.kind == "regime" else "dot"},
        label={
            "text": plain(rule.label),
            "textposition": RULE_LABEL_POSITIONS[(slot // 2) % len(RULE_LABEL_POSITIONS)],
            "textangle": -90,
            "font": {"size": 10, "color": color},
            # The text runs up the rule: xanchor says where along it the text starts (from the
            # top for "end", centred, from the bottom for "start"); yanchor, across the turned
            # text, which side of the rule it sits on (left: bottom, right: top).
            "xanchor": RULE_LABEL_XANCHORS[(slot // 2) % len(RULE_LABEL_POSITIONS)],
            "yanchor": "bottom" if slot % 2 == 0 else "top",
        },
        name=f"{rule.kind}:{rule.policy}:{rule.batch_size}",
    )


def rule_shapes(fig: go.Figure) -> list:
    """The threshold rules drawn on a figure (its line shapes named `<kind>:<policy>:<batch>`)."""
    return [s for s in fig.layout.shapes if s.type == "line" and (s.name or "").count(":") >= 2]


def policy_summary_figure(summary: pd.DataFrame, title: str = "") -> go.Figure:
    """Each policy's geometric-mean slowdown against the fastest policy of every case (1 = always
    the best), as horizontal bars with the worst case in the hover.
    summary: frames.policy_summary()."""
    fig = go.Figure()
    if not summary.empty:
        ordered = summary.sort_values("geomean_slowdown", ascending=False, kind="stable")
        fig.add_trace(
            go.Bar(
                y=[plain(n) for n in ordered["line"]],
                x=ordered["geomean_slowdown"],
                orientation="h",
                name="geomean slowdown",
                marker_color=[policy_color(n) for n in ordered["line"]],
                customdata=np.column_stack(
                    [ordered["worst_slowdown"], ordered["best_on"], ordered["cases"]]
                ),
                hovertemplate=(
                    "<b>%{y}</b><br>geomean %{x:.2f}x the fastest per case<br>worst "
                    "%{customdata[0]:.2f}x"
                    "<br>fastest on %{customdata[1]:.0f} of %{customdata[2]:.0f} "
                    "cases<extra></extra>"
                ),
            )
        )
    fig.add_vline(x=1.0, line={"color": "#444", "width": 1, "dash": "dot"})
    fig.update_layout(
        title=title or None,
        height=max(220, 40 * len(summary) + 120),
        xaxis_title="latency / fastest policy's latency, geometric mean over cases",
        margin={"t": 50 if title else 20, "l": 20, "r": 20, "b": 50},
    )
    fig.update_yaxes(automargin=True)
    return fig


__all__ = [
    "POLICY_COLORS",
    "REQUEST_PALETTE",
    "STUDY_FIGURES",
    "TIMELINE_LEGEND_MAX_REQUESTS",
    "bucket_speedup_figure",
    "case_comparison_figure",
    "finalists_figure",
    "latency_figure",
    "objective_names",
    "policy_color",
    "policy_summary_figure",
    "power_of_two_ticks",
    "round_log_ticks",
    "rule_shapes",
    "stagger_slots",
    "study_figures",
    "timeline_figure",
]

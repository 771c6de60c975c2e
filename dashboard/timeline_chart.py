"""The SM timeline as a Gantt chart, and the numbers read off it (wave starts, idle-slot share).

Pure functions from the simulator's timeline frame (SimResult.to_frame(): task, request, split,
kv_head, cta, sm, slot, start_us, stream_start_us, end_us, bytes) to a Plotly figure; nothing here
reads files or touches Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from kvtune.dashboard.figure_parts import SPARE_COLORS, vertical_rule

# Requests in the legend, longest first; the rest share one legend entry ("N other requests").
TIMELINE_LEGEND_MAX_REQUESTS = 12
# A hybrid launch's CTAs by kind: prefill tiles (compute-bound) and decode pieces.
KIND_COLORS = {"prefill": "#1f77b4", "decode": "#ff7f0e"}
# Colours by length rank (the longest request is red): ten distinct hues, then muted ones.
REQUEST_PALETTE = (
    "#d62728",
    "#1f77b4",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
) + SPARE_COLORS[:10]
MAX_WAVE_MARKS = 16
ROWS = ("slots", "sms")
# Above this many CTA slots per SM or tasks, `auto` rows are SMs: a row per slot would be thinner
# than a pixel at B=512 (8 KV heads, 4,096 CTAs and more).
AUTO_SM_ROWS_SLOTS_PER_SM = 2
AUTO_SM_ROWS_TASKS = 2_000


def wave_starts_us(timeline: pd.DataFrame, num_slots: int) -> list[float]:
    """When wave 2, 3, ... begins (us since launch): the start of the (k * num_slots)-th task to
    start, for a static grid and a persistent one alike (a wave is num_slots tasks, one per CTA
    slot). At most MAX_WAVE_MARKS."""
    if timeline.empty or num_slots < 1:
        return []
    starts = np.sort(timeline["start_us"].to_numpy(dtype=float))
    idx = np.arange(num_slots, len(starts), num_slots)[:MAX_WAVE_MARKS]
    return [float(starts[i]) for i in idx]


def idle_slot_share(timeline: pd.DataFrame, num_slots: int, span_us: float | None = None) -> float:
    """The share (0..1) of CTA-slot time left idle during the attention launch: 1 - busy slot
    time / (num_slots x span). span_us: the launch's span (default: the last task's end)."""
    if timeline.empty or num_slots < 1:
        return float("nan")
    busy = float((timeline["end_us"] - timeline["start_us"]).sum())
    span = float(span_us if span_us else timeline["end_us"].max())
    if span <= 0:
        return float("nan")
    return max(0.0, 1.0 - busy / (num_slots * span))


def use_sm_rows(rows: str, *, num_slots: int, sm_count: int, tasks: int) -> bool:
    """Whether `rows` ("auto", "slots" or "sms") draws a row per SM."""
    if rows not in ("auto", *ROWS):
        raise ValueError(f"rows: {rows!r} not allowed; allowed: auto, {', '.join(ROWS)}")
    if rows != "auto":
        return rows == "sms"
    per_sm = num_slots // max(sm_count, 1)
    return per_sm > AUTO_SM_ROWS_SLOTS_PER_SM or tasks > AUTO_SM_ROWS_TASKS


def timeline_figure(
    timeline: pd.DataFrame,
    *,
    sm_count: int,
    num_slots: int,
    title: str = "",
    stage1_us: float | None = None,
    time_us: float | None = None,
    x_max_us: float | None = None,
    kv_lens: Sequence[int] | None = None,
    rows: str = "slots",
    waves: bool = True,
) -> go.Figure:
    """The simulator's timeline as a Gantt chart: one bar per task from its start to its end,
    coloured by request (by length rank: the longest first in colour and legend), one row per CTA
    slot (SM m's slot s is row m * (num_slots / sm_count) + s, so an SM's slots sit together) or,
    with rows="sms" (or "auto" on big grids, use_sm_rows), one row per SM with its slots overlaid.

    stage1_us / time_us: end of the attention launch / of the merge, drawn as rules. x_max_us: a
    common time axis for side-by-side charts (None: this chart's own). kv_lens: per-request tokens
    for the hover text, legend and colour order. waves: mark where wave 2, 3, ... starts.
    """
    slots_per_sm = max(1, num_slots // max(sm_count, 1))
    frame = timeline.copy()
    by_sm = use_sm_rows(rows, num_slots=num_slots, sm_count=sm_count, tasks=len(frame))
    frame["row"] = frame["sm"] if by_sm else frame["sm"] * slots_per_sm + frame["slot"]
    frame["duration_us"] = frame["end_us"] - frame["start_us"]
    lens = np.asarray(kv_lens) if kv_lens is not None else None
    frame["tokens"] = lens[frame["request"].to_numpy()] if lens is not None else -1
    requests = np.unique(frame["request"].to_numpy())
    # Longest first (ties by request index): colours and legend entries follow this order.
    if lens is not None:
        order = sorted(requests, key=lambda r: (-int(lens[r]), int(r)))
    else:
        order = list(requests)
    rank = {int(r): i for i, r in enumerate(order)}
    palette = np.asarray(REQUEST_PALETTE)
    hover = (
        "request %{customdata[0]} (%{customdata[5]:,} tokens)"
        "<br>split %{customdata[1]}, KV head %{customdata[2]}"
        "<br>SM %{customdata[3]}, slot %{customdata[4]}<br>%{base:,.1f} - %{customdata[6]:,.1f} us"
        "<br>%{customdata[7]:,.2f} MB<extra></extra>"
    )

    def custom(part: pd.DataFrame) -> np.ndarray:
        return np.column_stack(
            [
                part["request"],
                part["split"],
                part["kv_head"],
                part["sm"],
                part["slot"],
                part["tokens"],
                part["end_us"],
                part["bytes"] / 1e6,
            ]
        )

    def bar(part: pd.DataFrame, name: str, color, showlegend: bool = True) -> go.Bar:
        return go.Bar(
            y=part["row"],
            x=part["duration_us"],
            base=part["start_us"],
            orientation="h",
            name=name,
            marker={"color": color, "line": {"width": 0}, "opacity": 0.75 if by_sm else 1.0},
            customdata=custom(part),
            hovertemplate=hover,
            showlegend=showlegend,
        )

    fig = go.Figure()
    if "kind" in frame.columns:
        # A hybrid launch: what matters is which CTAs ran prefill tiles and which decode pieces.
        for kind, color in KIND_COLORS.items():
            part = frame[frame["kind"] == kind]
            if not part.empty:
                fig.add_trace(bar(part, f"{kind} CTAs ({len(part):,})", color))
        legend_requests = rest = []
    else:
        legend_requests = order[:TIMELINE_LEGEND_MAX_REQUESTS]
        rest = order[TIMELINE_LEGEND_MAX_REQUESTS:]
    for req in legend_requests:
        part = frame[frame["request"] == req]
        name = f"request {req}" + (f" · {int(lens[req]):,} tok" if lens is not None else "")
        fig.add_trace(bar(part, name, palette[rank[int(req)] % len(palette)]))
    if rest:
        # The shorter requests share a legend entry; cycled colours keep neighbours apart.
        part = frame[frame["request"].isin(rest)]
        colors = palette[part["request"].map(rank).to_numpy() % len(palette)].tolist()
        shortest = f" · {int(lens[rest[-1]]):,}-{int(lens[rest[0]]):,} tok" if lens is not None else ""
        fig.add_trace(bar(part, f"{len(rest)} other requests{shortest}", colors))
    if waves:
        for k, start in enumerate(wave_starts_us(frame, num_slots), start=2):
            vertical_rule(
                fig, start, name=f"wave {k}",
                line={"color": "#999", "width": 1, "dash": "dot"},
                label={"text": f"wave {k}", "textposition": "start", "font": {"size": 9},
                       "textangle": -90, "xanchor": "left"},
            )
    if stage1_us is not None and time_us is not None and time_us > stage1_us + 1e-9:
        # The merge launch follows the attention launch: mark where it starts, label the end.
        vertical_rule(fig, stage1_us, name="attention done",
                      line={"color": "#444", "width": 1, "dash": "dot"})
    if time_us is not None:
        merge = (
            f" (merge {time_us - stage1_us:,.0f} us)"
            if stage1_us is not None and time_us > stage1_us + 1e-9
            else ""
        )
        vertical_rule(fig, time_us, name="end", line={"color": "#444", "width": 1, "dash": "dash"},
                      label={"text": f"end {time_us:,.0f} us{merge}", "textposition": "end",
                             "textangle": 0, "xanchor": "right", "yanchor": "top",
                             "font": {"size": 10}})
    x_max = x_max_us or (time_us or float(frame["end_us"].max() if not frame.empty else 1.0)) * 1.02
    n_rows = sm_count if by_sm else num_slots
    y_title = (
        f"SM ({sm_count}; its {slots_per_sm} slot(s) overlaid)"
        if by_sm
        else f"CTA slot ({sm_count} SMs x {slots_per_sm})"
    )
    fig.update_layout(
        title=title or None,
        barmode="overlay",
        bargap=0,
        height=680,
        xaxis={"title_text": "time since launch (us)", "range": [0, x_max]},
        yaxis={"title_text": y_title, "range": [n_rows - 0.5, -0.5]},
        # Below the plot, three entries a row, so that the legend does not squeeze the bars.
        legend={"orientation": "h", "yanchor": "top", "y": -0.1, "x": 0,
                "entrywidth": 0.33, "entrywidthmode": "fraction", "font": {"size": 10},
                "title": {"text": ("CTAs by kind" if "kind" in frame.columns
                                   else "requests, longest first"), "side": "top"}},
        margin={"t": 40, "l": 60, "r": 20, "b": 40},
    )
    return fig


__all__ = [
    "MAX_WAVE_MARKS",
    "REQUEST_PALETTE",
    "ROWS",
    "TIMELINE_LEGEND_MAX_REQUESTS",
    "idle_slot_share",
    "timeline_figure",
    "use_sm_rows",
    "wave_starts_us",
]

"""The hybrid-batch figure (issue 15): latency versus decode batch size, one panel per (context,
chunk) pair, one line per policy, and the max(prefill alone, decode alone) bound dashed.

Input is harness.hybrid_summary.hybrid_frame of the picked runs' rows.
"""

from __future__ import annotations

from pathlib import PurePath

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

BOUND_NAME = "max(prefill alone, decode alone)"
LEGEND_MAX_CHARS = 44


def legend_name(label: str) -> str:
    """A series label short enough for the legend (the hover keeps it whole): a `path=` value
    becomes its file name, and what is still longer than LEGEND_MAX_CHARS loses its middle.
    Why: a tuned file's label (`hybrid-tuned:path=<dir>/<file>`) otherwise takes half the
    figure's width."""
    parts = []
    for part in str(label).split(":"):
        key, sep, value = part.partition("=")
        parts.append(f"{key}={PurePath(value).name}" if sep and key == "path" else part)
    text = ":".join(parts)
    if len(text) <= LEGEND_MAX_CHARS:
        return text
    keep = (LEGEND_MAX_CHARS - 1) // 2
    return text[:keep] + "…" + text[-(LEGEND_MAX_CHARS - 1 - keep):]


def hybrid_figure(frame: pd.DataFrame, policies=None) -> go.Figure:
    """Rows: context tokens; columns: chunk tokens; x: decodes (log 2); y: latency (us)."""
    if policies is not None:
        frame = frame[frame["policy"].isin(list(policies))]
    contexts = sorted(frame["context_tokens"].unique())
    chunks = sorted(frame["chunk_tokens"].unique())
    fig = make_subplots(rows=max(1, len(contexts)), cols=max(1, len(chunks)), shared_xaxes=True,
                        subplot_titles=[f"context {c:,} · chunk {k:,}" for c in contexts
                                        for k in chunks])
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    colors = {p: palette[i % len(palette)] for i, p in enumerate(sorted(frame["policy"].unique()))}
    for i, ctx in enumerate(contexts, start=1):
        for j, chunk in enumerate(chunks, start=1):
            panel = frame[(frame["context_tokens"] == ctx) & (frame["chunk_tokens"] == chunk)]
            first = i == 1 and j == 1
            for policy, part in panel.groupby("policy"):
                part = part.sort_values("num_decodes")
                fig.add_trace(go.Scatter(
                    x=part["num_decodes"], y=part["latency_us"], mode="lines+markers",
                    name=legend_name(policy), legendgroup=policy, showlegend=first,
                    line={"color": colors[policy]},
                    customdata=part[["speedup_vs_serial", "over_bound"]].to_numpy(),
                    hovertemplate=(f"{policy}<br>decodes %{{x}}<br>%{{y:.1f}} us<br>"
                                   "x serial %{customdata[0]:.3f}<br>/ bound %{customdata[1]:.3f}"
                                   "<extra></extra>")), row=i, col=j)
            # Runs without the prefill-alone / decode-alone rows have no bound: no line, and no
            # legend entry for one.
            bound = panel.groupby("num_decodes")["bound_us"].first().dropna().sort_index()
            if len(bound):
                fig.add_trace(go.Scatter(x=bound.index, y=bound.to_numpy(), mode="lines",
                                         name=BOUND_NAME, legendgroup="bound", showlegend=first,
                                         line={"color": "black", "dash": "dash"}), row=i, col=j)
            fig.update_xaxes(type="log", dtick=0.30103, row=i, col=j,
                             title_text="decodes" if i == len(contexts) else None)
            fig.update_yaxes(title_text="latency (us)" if j == 1 else None, row=i, col=j)
    # Tall enough for one legend line per series (many when runs of several setups are picked).
    legend_px = 24 * (len(colors) + 1) + 160  # the legend sits inside the plot area
    fig.update_layout(height=max(260 * max(1, len(contexts)) + 80, legend_px), margin={"t": 60})
    return fig


__all__ = ["BOUND_NAME", "hybrid_figure"]

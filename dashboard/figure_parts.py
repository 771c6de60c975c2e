"""What the chart modules share: the spare colours (policies without a colour of their own, and
the timeline's requests after the first ten) and full-height rules (threshold rules, timeline
stage ends, wave marks)."""

from __future__ import annotations

import plotly.graph_objects as go

SPARE_COLORS = (
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
    "#e6550d",
    "#31a354",
    "#756bb1",
    "#636363",
    "#9c9ede",
    "#cedb9c",
    "#e7ba52",
    "#e7969c",
)


def vertical_rule(fig: go.Figure, x: float, *, name: str, line: dict, label: dict | None = None,
                   xref: str = "x", yref: str = "y") -> None:
    """A line at `x` over the whole height of the plot (yref's domain), optionally labelled."""
    extra = {"label": label} if label else {}
    fig.add_shape(type="line", xref=xref, yref=f"{yref} domain", x0=x, x1=x, y0=0, y1=1,
                  line=line, name=name, **extra)


__all__ = ["SPARE_COLORS", "vertical_rule"]

"""What the chart modules share: the policy colours (the same on every page), the spare colours
(policies without a colour of their own, and the timeline's requests after the first ten) and
full-height rules (threshold rules, timeline stage ends, wave marks)."""

from __future__ import annotations

import plotly.graph_objects as go

# One colour per policy, the same on every page. Baselines keep their colour in every run.
POLICY_COLORS = {
    "flashinfer-tensor-core": "#d62728",
    "flashinfer-cuda-core": "#ff7f0e",
    "fa3": "#1f77b4",
    "trtllm": "#8c564b",
    "trtllm-oversub": "#9467bd",
    "sglang-triton": "#e377c2",
    "vllm-triton": "#bcbd22",
    "fixed-split": "#17becf",
    "no-split": "#7f7f7f",
    "parametric": "#2ca02c",
    "tuned": "#2ca02c",
    "oracle": "#000000",
}
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


def policy_color(name: str) -> str:
    """The colour of policy `name` (a label like `fixed-split[chunk_tokens=4096]` or
    `<run> · fa3` takes its policy's colour); unknown names get a stable spare colour."""
    base = str(name).rsplit(" · ", 1)[-1]
    base = base.split("[", 1)[0].split("#", 1)[0]
    if base in POLICY_COLORS:
        return POLICY_COLORS[base]
    return SPARE_COLORS[sum(map(ord, base)) % len(SPARE_COLORS)]


def vertical_rule(fig: go.Figure, x: float, *, name: str, line: dict, label: dict | None = None,
                   xref: str = "x", yref: str = "y") -> None:
    """A line at `x` over the whole height of the plot (yref's domain), optionally labelled."""
    extra = {"label": label} if label else {}
    fig.add_shape(type="line", xref=xref, yref=f"{yref} domain", x0=x, x1=x, y0=0, y1=1,
                  line=line, name=name, **extra)


__all__ = ["POLICY_COLORS", "SPARE_COLORS", "policy_color", "vertical_rule"]

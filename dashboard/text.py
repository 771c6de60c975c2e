"""Strings from results files shown as text, never as Markdown or HTML.

Manifests, measurement rows, tuning results and study names are written by whoever made the
results folder; the dashboard may be opened on a folder someone else made. Streamlit renders
Markdown in st.markdown / st.caption / st.info / st.error / st.subheader ..., and Plotly renders a
subset of HTML (`<a href>`, `<b>`, ...) in titles, legend names and labels. A name such as
`![x](http://host/x.png)` would make the viewer's browser fetch that host. So every such string
goes through `code()` (a Markdown code span, shown literally) or `plain()` (HTML-escaped, for
Plotly) before it reaches a page.
"""

from __future__ import annotations

import html
import math
import re

import pandas as pd

EMPTY = "—"
_BACKTICKS = re.compile(r"`+")


def _as_text(value) -> str:
    if value is None:
        return EMPTY
    text = " ".join(str(value).split())
    return text or EMPTY


def code(value) -> str:
    """`value` as a Markdown code span: shown literally (no link, image, emphasis, HTML, LaTeX or
    Streamlit directive), whatever it holds. Backticks inside are kept: the span's fence is one
    backtick longer than the longest run inside (CommonMark). None and "" show as an em dash."""
    text = _as_text(value)
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    if text.startswith("`") or text.endswith("`"):
        text = f" {text} "
    return f"{fence}{text}{fence}"


def plain(value) -> str:
    """`value` HTML-escaped for Plotly text (titles, legend names, labels, hover): Plotly shows
    `<a href=...>` as a link, this shows it as the characters it is."""
    return html.escape(_as_text(value), quote=False)


def cell(value):
    """A table cell: None (and NaN) as an em dash instead of the word None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return EMPTY
    return value


def without_none(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with None / NaN cells shown as an em dash (never the word None, which is how a
    table shows a missing value). Only columns holding one change (to text); the others keep
    their type, so they still sort as numbers."""
    if frame.empty:
        return frame
    out = frame.copy()
    for column in out.columns[out.isna().any()]:
        out[column] = out[column].astype(object).map(cell)
    return out


__all__ = ["EMPTY", "cell", "code", "plain", "without_none"]

"""Figures of the Study and Export pages: the finalists, tuned versus every baseline per case and
per bucket, and Optuna's own plots of a bucket's study (a multi-objective study's Pareto front and
its per-objective plots with named objectives). Pure functions, unit-tested on their own.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from kvtune.dashboard.figure_parts import policy_color
from kvtune.dashboard.text import plain


def finalists_figure(finalists: pd.DataFrame, title: str = "") -> go.Figure:
    """The finalists' score (tuned / best baseline, lower is better) as points with p10..p90 bars;
    the chosen one highlighted. finalists: frames.finalists_table()."""
    fig = go.Figure()
    if not finalists.empty:
        chosen = finalists["chosen"].astype(bool).to_numpy()
        labels = [
            f"#{int(i)}" + (" (chosen)" if c else "") for i, c in zip(finalists["finalist"], chosen)
        ]
        text = [
            f"min_tokens_per_cta={r.min_tokens_per_cta}, max_waves={r.max_waves}, "
            f"max_splits={r.max_splits},"
            f" ctas_per_sm={r.ctas_per_sm}, {r.schedule}, {r.ctas} CTAs"
            for r in finalists.itertuples()
        ]
        fig.add_trace(
            go.Scatter(
                x=labels,
                y=finalists["score_median"],
                mode="markers",
                name="finalists",
                marker={"size": 11, "color": np.where(chosen, "#2ca02c", "#7f7f7f")},
                error_y={
                    "type": "data",
                    "array": finalists["score_p90"] - finalists["score_median"],
                    "arrayminus": finalists["score_median"] - finalists["score_p10"],
                },
                text=text,
                hovertemplate="%{x}: median %{y:.4f} (p10..p90 bar)<br>%{text}<extra></extra>",
            )
        )
    fig.add_hline(
        y=1.0,
        line={"color": "#d62728", "dash": "dash", "width": 1},
        annotation_text="best baseline",
        annotation_position="top left",
    )
    fig.update_layout(
        title=title or None,
        height=360,
        yaxis_title="score (tuned / best baseline)",
        # Labels such as "#0" would otherwise be read as numbers and the chosen one dropped.
        xaxis={"title_text": "finalist", "type": "category"},
        margin={"t": 60, "l": 60, "r": 20, "b": 50},
    )
    return fig


def bucket_speedup_figure(speedups: pd.DataFrame, title: str = "") -> go.Figure:
    """Speedup of the tuned heuristic over each baseline, per bucket: grouped bars (geometric mean
    over the bucket's cases, worst case in the hover), a rule at 1 (no gain).
    speedups: frames.bucket_speedups()."""
    fig = go.Figure()
    for name, part in speedups.groupby("baseline", sort=True):
        fig.add_trace(
            go.Bar(
                x=[plain(b) for b in part["bucket"]],
                y=part["geomean_speedup"],
                name=plain(name),
                marker_color=policy_color(name),
                customdata=np.column_stack([part["worst_speedup"], part["cases"]]),
                hovertemplate=(
                    f"<b>tuned vs {plain(name)}</b><br>bucket %{{x}}<br>geomean %{{y:.3f}}x"
                    "<br>worst case %{customdata[0]:.3f}x over %{customdata[1]:.0f} "
                    "cases<extra></extra>"
                ),
            )
        )
    fig.add_hline(y=1.0, line={"color": "#444", "width": 1, "dash": "dot"})
    fig.update_layout(
        title=title or None,
        barmode="group",
        height=380,
        xaxis_title="bucket (batch sizes)",
        yaxis_title="speedup of tuned (baseline / tuned)",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        margin={"t": 80, "l": 60, "r": 20, "b": 50},
    )
    return fig


def case_comparison_figure(cases: pd.DataFrame, title: str = "") -> go.Figure:
    """Tuned versus every baseline on each case of a bucket: grouped bars of latency (log axis),
    one trace per policy. cases: frames.case_latencies_long()."""
    fig = go.Figure()
    for policy, part in cases.groupby("policy", sort=False):
        fig.add_trace(
            go.Bar(
                x=[plain(c) for c in part["case"]],
                y=part["latency_us"],
                name=plain(policy),
                marker_color=policy_color(policy),
                hovertemplate=f"<b>{plain(policy)}</b><br>%{{x}}<br>%{{y:,.1f}} us<extra></extra>",
            )
        )
    fig.update_layout(
        title=title or None,
        barmode="group",
        height=420,
        yaxis_type="log",
        yaxis_title="latency (us)",
        xaxis_title="case",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        margin={"t": 80, "l": 60, "r": 20, "b": 90},
    )
    return fig


def _completed_trials(study) -> list:
    import optuna

    return [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]


def objective_names(study) -> list[str]:
    """The names of a study's objectives: the ones stored with the study (metric_names), else
    kvtune's: `mean score` (geometric mean of tuned / best baseline) and, for a multi-objective
    study (`kvtune tune --objective mean,worst`), `worst case`."""
    stored = getattr(study, "metric_names", None)
    count = len(study.directions)
    if stored and len(stored) == count:
        return [str(n) for n in stored]
    kvtune_names = ["mean score", "worst case"]
    return kvtune_names[:count] if count <= 2 else [f"objective {i}" for i in range(count)]


STUDY_FIGURES = ("history", "pareto", "importances", "parallel", "slice")


def study_figures(
    study,
    which: Iterable[str] = ("history", "importances", "parallel", "slice"),
    objective: int = 0,
) -> dict:
    """Optuna's Plotly visualisations of one bucket's study: {name: Figure or the reason (str) it
    cannot be drawn}. Importances use PED-ANOVA (fast, no extra dependency); they need two
    completed trials whose parameters vary.

    A multi-objective study draws its per-objective plots (history, importances, parallel, slice)
    for `objective` (an index into objective_names(), named on the axes), and `pareto` its Pareto
    front over the first two objectives. `pareto` of a single-objective study is a reason."""
    import optuna.visualization as vis
    from optuna.importance import PedAnovaImportanceEvaluator

    names = objective_names(study)
    multi = len(names) > 1
    if not 0 <= objective < len(names):
        raise ValueError(f"objective: {objective} out of range; allowed: 0..{len(names) - 1}")
    target = {}
    if multi:
        target = {"target": lambda t: t.values[objective], "target_name": names[objective]}
    else:
        target = {"target_name": names[0]}
    out: dict = {}
    done = _completed_trials(study)
    builders = {
        "history": lambda: vis.plot_optimization_history(study, **target),
        "pareto": lambda: vis.plot_pareto_front(study, target_names=names[:2]),
        "importances": lambda: vis.plot_param_importances(
            study, evaluator=PedAnovaImportanceEvaluator(), **target
        ),
        "parallel": lambda: vis.plot_parallel_coordinate(study, **target),
        "slice": lambda: vis.plot_slice(study, **target),
    }
    for name in which:
        if name not in builders:
            raise ValueError(f"which: {name!r} not allowed; allowed: {', '.join(builders)}")
        if name == "pareto" and not multi:
            out[name] = "a Pareto front needs a multi-objective study (--objective mean,worst)"
            continue
        if not done:
            out[name] = "no completed trial yet"
            continue
        if name == "importances" and len(done) < 2:
            out[name] = "parameter importances need at least two completed trials"
            continue
        try:
            fig = builders[name]()
        except Exception as exc:  # noqa: BLE001 - Optuna raises various errors on degenerate studies
            out[name] = f"Optuna could not draw this plot ({' '.join(str(exc).split())[:300]})"
            continue
        fig.update_layout(
            height=420 if name != "parallel" else 460, margin={"t": 60, "l": 60, "r": 20, "b": 50}
        )
        out[name] = fig
    return out


__all__ = [
    "STUDY_FIGURES",
    "bucket_speedup_figure",
    "case_comparison_figure",
    "finalists_figure",
    "objective_names",
    "study_figures",
]

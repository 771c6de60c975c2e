"""Pure table transformations between what data.py loads and what charts.py draws.

Every function takes plain data (manifests, measurement DataFrames, TuningResult) and returns a
DataFrame; none reads a file or touches Streamlit.
"""

from __future__ import annotations

import json
import zlib

import numpy as np
import pandas as pd

from kvtune.harness.redact import redact_url

# Columns of one point of the latency chart, aggregated over the cases (seeds) of a batch size.
HOVER_COLUMNS = ("max_splits", "split_requests", "grid_size", "num_tasks", "waves")
METRICS = {
    "latency_us": "latency (us)",
    "bw_fraction": "achieved bandwidth / ceiling",
    "latency_ratio": "latency / baseline's latency",
}
MAX_LABEL_CHARS = 48


def device_text(manifest: dict) -> str:
    """'simulated (h200)' for a model, the GPU's name for a live device, '?' when unknown."""
    device = manifest.get("device") or {}
    name = device.get("name") if isinstance(device, dict) else str(device)
    if manifest.get("simulated") or (isinstance(device, dict) and device.get("live") is False):
        return f"simulated ({name or '?'})"
    return name or "?"


def shape_text(shape: dict) -> str:
    """'32 q / 8 KV heads, head_dim 128, page 16, bf16' for an AttentionShape dict."""
    try:
        return (
            f"{shape['num_qo_heads']} q / {shape['num_kv_heads']} KV heads, "
            f"head_dim {shape['head_dim']}, page {shape['page_size']}, {shape['dtype']}"
            + (f", KV {shape['kv_dtype']}" if shape.get("kv_dtype") not in (None, shape["dtype"])
               else "")
        )
    except (KeyError, TypeError):
        return str(shape)


def _cold_text(manifest: dict) -> str:
    env = manifest.get("environment") or {}
    cold = env.get("cold_l2") if isinstance(env, dict) else None
    if cold is None:
        return "n/a (model)" if manifest.get("simulated") else "?"
    return "cold L2" if cold else "hot L2"


def runs_table(manifests: list[dict]) -> pd.DataFrame:
    """One row per run: id, status, kind, device, backend, timer, cold/hot, started, suite, rows,
    tuning result present, command (newest first, as given)."""
    rows = []
    for m in manifests:
        env = m.get("environment") if isinstance(m.get("environment"), dict) else {}
        rows.append(
            {
                "run": m.get("run_id", "?"),
                # A file that cannot be read is part of the status: "complete, 108 rows" would
                # promise rows no page can show.
                "status": str(m.get("status", "?"))
                + (" · files unreadable" if m.get("problems") else ""),
                "kind": m.get("kind", "?"),
                "device": device_text(m),
                "backend": m.get("backend", "?"),
                "timer": env.get("timer") or "?",
                "L2": _cold_text(m),
                "started": m.get("started_at", ""),
                "suite": m.get("suite", ""),
                "rows": m.get("rows"),
                "tuning": bool(m.get("has_tuning")),
                "command": redact_url(m.get("command") or ""),
                "error": "; ".join(
                    [str(m.get("error"))] * bool(m.get("error")) + list(m.get("problems") or ())
                ),
            }
        )
    columns = [
        "run",
        "status",
        "kind",
        "device",
        "backend",
        "timer",
        "L2",
        "started",
        "suite",
        "rows",
        "tuning",
        "command",
        "error",
    ]
    return pd.DataFrame(rows, columns=columns)


def policy_labels(frame: pd.DataFrame) -> pd.Series:
    """A display label per row: the policy's name, plus what differs when one name was measured
    with several parameter sets (e.g. `fixed-split[chunk_tokens=4096]`)."""
    if frame.empty:
        return pd.Series([], dtype=object, index=frame.index)
    names = frame["policy"].astype(str)
    params = (
        frame["policy_params"].astype(str)
        if "policy_params" in frame
        else pd.Series("", index=frame.index)
    )
    labels = names.copy()
    for name in names.unique():
        mask = names == name
        distinct = params[mask].unique()
        if len(distinct) <= 1:
            continue
        decoded = {p: _decode(p) for p in distinct}
        keys = sorted({k for d in decoded.values() for k in d})
        varying = [
            k
            for k in keys
            if len({json.dumps(d.get(k), sort_keys=True) for d in decoded.values()}) > 1
        ]
        for p, d in decoded.items():
            text = ",".join(f"{k}={_short(d.get(k))}" for k in varying)
            label = f"{name}[{text}]"
            if len(label) > MAX_LABEL_CHARS:
                label = f"{name}#{zlib.crc32(p.encode()):08x}"
            labels[mask & (params == p)] = label
    return labels


def _decode(text: str) -> dict:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {"params": text}
    return value if isinstance(value, dict) else {"params": value}


def _short(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def mark_tuned(frame: pd.DataFrame, result) -> pd.DataFrame:
    """A tuning run's rows with its winners renamed: a row measured with the plan rule of the params
    a bucket chose, on a batch size of that bucket, outside the baseline phase, becomes policy
    `tuned` with the whole tuned table as its params (what kernels.policies.get("tuned", **params)
    plans with, rule included). The trials' rule is the result's: `parametric` rows of the
    bucket's params, or for a fixed-chunk result (tuned on a one-chunk backend such as
    flashinfer) `fixed-split` rows of chunk_tokens = the bucket's min_tokens_per_cta in static
    order. Trials that did not win keep their name. result: the run's TuningResult."""
    if frame.empty or "policy" not in frame or "policy_params" not in frame:
        return frame
    tuned_params = json.dumps(result.tuned_params(), sort_keys=True)
    chosen = {b.name: b for b in result.buckets}
    rule = getattr(result, "rule", "parametric")
    trial_name = "fixed-split" if rule == "fixed-chunk" else "parametric"
    out = frame.copy()
    # A bucket may be won by a per-batch candidate (issue 12's rule families): its rows are
    # `adaptive-chunk` or `makespan-chunk` rows of the bucket's params and family knobs.
    candidates = out["policy"].isin([trial_name, *FAMILY_POLICIES.values()])
    if "phase" in out:
        candidates &= out["phase"] != "baseline"
    if not candidates.any():
        return out
    winners = np.zeros(len(out), dtype=bool)
    decoded = {p: _decode(p) for p in out.loc[candidates, "policy_params"].unique()}
    has_bucket_col = "bucket" in out
    for i, (is_candidate, params, size, bucket_name) in enumerate(
        zip(
            candidates,
            out["policy_params"],
            out["batch_size"],
            out["bucket"] if has_bucket_col else [None] * len(out),
        )
    ):
        if not is_candidate:
            continue
        bucket = chosen.get(bucket_name) if bucket_name is not None else None
        if bucket is None:
            bucket = next((b for b in result.buckets if b.min_batch <= size <= b.max_batch), None)
        if bucket is None or not bucket.min_batch <= size <= bucket.max_batch:
            continue
        family = getattr(bucket, "family", "") or ""
        if family in FAMILY_POLICIES:
            family_params = {**bucket.params.to_dict(),
                             "max_chunk_tokens": getattr(bucket, "max_chunk_tokens", None)}
            if family == "makespan":
                family_params["piece_cost_tokens"] = getattr(bucket, "piece_cost_tokens", None)
            winners[i] = (out["policy"].iat[i] == FAMILY_POLICIES[family]
                          and decoded[params] == family_params)
        elif family in ("", "fixed-chunk", "parametric"):
            winners[i] = (out["policy"].iat[i] == trial_name
                          and _measured_with(decoded[params], bucket.params, rule))
        # "defer": the engine's own planner ships; no trial row is the bucket's winner.
    out.loc[winners, "policy"] = "tuned"
    out.loc[winners, "policy_params"] = tuned_params
    return out


# The policy name of a per-batch family's finalist rows (kernels.parametric).
FAMILY_POLICIES = {"adaptive": "adaptive-chunk", "makespan": "makespan-chunk"}


def _measured_with(row_params: dict, params, rule: str) -> bool:
    """Whether a trial row's params are `params` planned with `rule`. A fixed-chunk row is
    compared on what that rule plans (the chunk, static order): the backend's split_policy may
    state its occupancy otherwise (e.g. flashinfer's 2 CTAs per SM, capped by the device alike)."""
    if rule != "fixed-chunk":
        return row_params == params.to_dict()
    return (row_params.get("chunk_tokens") == params.min_tokens_per_cta
            and row_params.get("schedule", "static") == "static")


# A tuning run measures hundreds of configurations (Optuna's trials, the finalists, the oracle's
# per-request split counts). They are not series of their own: per case, the fastest trial
# configuration is the `best trial` series and the fastest oracle configuration the `oracle`
# series; the configuration the study chose is `tuned` (mark_tuned).
BEST_TRIAL = "best trial"
ORACLE = "oracle"
GROUPED_SERIES = (BEST_TRIAL, ORACLE)
_PHASE_SERIES = {"trial": BEST_TRIAL, "finalist": BEST_TRIAL, "oracle": ORACLE}


def series_of(frame: pd.DataFrame) -> pd.Series:
    """Per row, the grouped series it belongs to (`best trial`, `oracle`) or None for a named
    policy. A row's phase (studies/records.py) decides: oracle-phase rows are the oracle's
    configurations (its seeds included), trial and finalist rows that are not the chosen
    configuration (`tuned`) are trials. Bench runs have no phase: every row is named."""
    if "phase" not in frame:
        return pd.Series(None, index=frame.index, dtype=object)
    series = frame["phase"].map(_PHASE_SERIES).astype(object)
    chosen = (frame["policy"] == "tuned") & (series == BEST_TRIAL)
    return series.where(~chosen & series.notna(), None)


def ok_rows_with_lines(
    frame: pd.DataFrame, by_run: bool = False, run_names: dict[str, str] | None = None
) -> pd.DataFrame:
    """The rows whose status is ok, with `policy_label` (policy_labels, or the grouped series
    `best trial` / `oracle`), `grouped` (whether the label is such a series) and `line` (the legend
    name: the label, prefixed with `<run name> · ` when by_run; run_names maps run ids to names,
    compare.run_labels, and defaults to the run id) added.

    A grouped series keeps one row per (run, case): its fastest configuration."""
    if frame.empty or "status" not in frame:
        return frame.iloc[0:0].assign(
            policy_label=pd.Series(dtype=object),
            grouped=pd.Series(dtype=bool),
            line=pd.Series(dtype=object),
        )
    ok = frame[frame["status"] == "ok"].copy()
    if "run_id" not in ok:
        ok["run_id"] = ""
    series = series_of(ok)
    grouped = series.notna()
    if grouped.any() and "case_id" in ok:
        part = ok[grouped].assign(_series=series[grouped])
        fastest = part.groupby(["run_id", "case_id", "_series"], sort=False)["latency_us"].idxmin()
        keep = ~grouped
        keep[fastest.to_numpy()] = True
        ok, series, grouped = ok[keep], series[keep], grouped[keep]
    if not grouped.any():  # a bench run: every row is a named policy
        labels = policy_labels(ok)
    else:
        labels = pd.Series(series, index=ok.index, dtype=object)
        if (~grouped).any():
            labels[~grouped] = policy_labels(ok[~grouped])
    ok["policy_label"] = labels
    ok["grouped"] = grouped.to_numpy()
    if by_run:
        names = ok["run_id"].astype(str)
        if run_names:
            names = names.map(lambda r: run_names.get(r, r))
        ok["line"] = names + " · " + ok["policy_label"]
    else:
        ok["line"] = ok["policy_label"]
    return ok


def line_policies(ok: pd.DataFrame) -> pd.DataFrame:
    """One row per (line, run_id, policy, policy_params) of ok_rows_with_lines() output: which
    stored policy each legend line draws (grouped series left out)."""
    cols = ["line", "run_id", "policy", "policy_params"]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    if "grouped" in ok:  # a grouped series is many configurations: no regime of its own
        ok = ok[~ok["grouped"].astype(bool)]
    present = [c for c in cols if c in ok]
    return ok[present].drop_duplicates().reset_index(drop=True)


def latency_points(
    frame: pd.DataFrame, by_run: bool = False, run_names: dict[str, str] | None = None
) -> pd.DataFrame:
    """The latency chart's points: median over the cases (seeds) of every
    (distribution, policy label, batch size), from rows whose status is ok.

    Columns: line (legend name: the policy label, prefixed with the run when by_run),
    policy, distribution, batch_size, latency_us, bw_fraction, latency_p10_us, latency_p90_us
    (p10/p90 over the cases, or the measurement's own p10/p90 for one case), noise_p10_us and
    noise_p90_us (the measurements' own p10/p90, median over the cases), cases, and the
    hover columns max_splits, split_requests, grid_size, num_tasks, waves (medians).
    """
    columns = [
        "line",
        "policy",
        "run_id",
        "distribution",
        "batch_size",
        "latency_us",
        "bw_fraction",
        "latency_p10_us",
        "latency_p90_us",
        "noise_p10_us",
        "noise_p90_us",
        "cases",
        *HOVER_COLUMNS,
    ]
    ok = ok_rows_with_lines(frame, by_run, run_names)
    if ok.empty:
        return pd.DataFrame(columns=columns)
    for col in ("bw_fraction", "p10_us", "p90_us", *HOVER_COLUMNS):
        if col not in ok:
            ok[col] = np.nan
    keys = ["line", "distribution", "batch_size"]
    grouped = ok.groupby(keys, sort=True, observed=True)
    out = grouped.agg(
        policy=("policy_label", "first"),
        run_id=("run_id", "first"),
        latency_us=("latency_us", "median"),
        bw_fraction=("bw_fraction", "median"),
        p10_us=("p10_us", "median"),
        p90_us=("p90_us", "median"),
        cases=("latency_us", "size"),
        **{col: (col, "median") for col in HOVER_COLUMNS},
    )
    # Vectorised quantiles (a Python lambda per group is slow on large runs).
    out["latency_lo"] = grouped["latency_us"].quantile(0.1)
    out["latency_hi"] = grouped["latency_us"].quantile(0.9)
    out = out.reset_index()
    single = out["cases"] == 1
    out["latency_p10_us"] = np.where(single, out["p10_us"], out["latency_lo"])
    out["latency_p90_us"] = np.where(single, out["p90_us"], out["latency_hi"])
    out["noise_p10_us"], out["noise_p90_us"] = out["p10_us"], out["p90_us"]
    return (
        out[columns]
        .sort_values(["line", "distribution", "batch_size"], kind="stable")
        .reset_index(drop=True)
    )


def policy_summary(
    frame: pd.DataFrame, by_run: bool = False, run_names: dict[str, str] | None = None
) -> pd.DataFrame:
    """How each line (policy) fares against the best policy of every case it was measured on:
    slowdown = latency / the case's fastest latency (1 = best on that case).

    Columns: line, cases, geomean_slowdown, worst_slowdown, best_on (cases where it was fastest),
    sorted best first. A case is (run, case_id); ok rows only.
    """
    columns = ["line", "cases", "geomean_slowdown", "worst_slowdown", "best_on"]
    ok = ok_rows_with_lines(frame, by_run, run_names)
    if ok.empty or "case_id" not in ok:
        return pd.DataFrame(columns=columns)
    ok = ok[ok["latency_us"] > 0]
    best = ok.groupby(["run_id", "case_id"])["latency_us"].transform("min")
    ok = ok.assign(slowdown=ok["latency_us"] / best, log_slowdown=np.log(ok["latency_us"] / best))
    ok["is_best"] = ok["slowdown"] <= 1.0 + 1e-12
    out = (
        ok.groupby("line")
        .agg(
            cases=("slowdown", "size"),
            geomean_slowdown=("log_slowdown", "mean"),
            worst_slowdown=("slowdown", "max"),
            best_on=("is_best", "sum"),
        )
        .reset_index()
    )
    out["geomean_slowdown"] = np.exp(out["geomean_slowdown"])
    out["best_on"] = out["best_on"].astype(int)
    return out[columns].sort_values("geomean_slowdown", kind="stable").reset_index(drop=True)


def status_counts(frame: pd.DataFrame) -> dict[str, int]:
    """{status: rows} of a measurement frame (ok, failed, unsupported, ...)."""
    if frame.empty or "status" not in frame:
        return {}
    return {str(k): int(v) for k, v in frame["status"].value_counts().items()}


def heuristic_notes(frame: pd.DataFrame, kernel_sha256: str | None) -> list[str]:
    """The notes `kvtune bench` prints for its heuristic series (harness.summary): a file tuned
    on another card than the rows planned for, or measured here on the Triton kernel after
    being tuned with another decode kernel (`kernel_sha256`: this checkout's
    kernels.fingerprint.decode_kernel_sha256), another backend or an unrecorded one. Only rows
    whose plan notes name a heuristic file are read."""
    from kvtune.harness.summary import heuristic_notes as summary_notes

    if frame.empty or "plan_notes" not in frame:
        return []
    named = frame["plan_notes"].astype(str).str.contains('"tuned_', regex=False)
    cols = [c for c in ("series", "policy", "backend", "plan_notes") if c in frame]
    records = frame.loc[named, cols].drop_duplicates().to_dict("records")
    return summary_notes(records, kernel_sha256)


def benches_a_heuristic_file(frame: pd.DataFrame) -> bool:
    """Whether the rows hold a heuristic file's series (policy "tuned" with heuristic_path)."""
    if frame.empty or "policy" not in frame or "heuristic_path" not in frame:
        return False
    return bool(((frame["policy"] == "tuned") & frame["heuristic_path"].notna()).any())


def with_split_counts(frame: pd.DataFrame, splits_by_run: dict) -> pd.DataFrame:
    """`frame` with each row's `splits` from `splits_by_run` ({run_id: frame of case_id, series,
    splits}, data.split_counts), matched on run, case and series; rows of other runs get none."""
    if "run_id" not in frame or frame.empty:
        return frame
    parts = []
    for run_id, rows in frame.groupby("run_id", sort=False):
        extra = splits_by_run.get(run_id)
        if extra is None or extra.empty or "splits" not in extra:
            parts.append(rows)
            continue
        if "series" not in extra:
            extra = extra.assign(series=extra["policy"])
        elif "policy" in extra:
            extra = extra.assign(series=extra["series"].fillna(extra["policy"]))
        keyed = extra.drop_duplicates(["case_id", "series"])[["case_id", "series", "splits"]]
        parts.append(rows.drop(columns=["splits"], errors="ignore")
                     .merge(keyed, on=["case_id", "series"], how="left"))
    return pd.concat(parts, ignore_index=True) if parts else frame


def heuristic_verdict_lines(frame: pd.DataFrame,
                            names: dict | None = None) -> list[tuple[str, int]]:
    """The verdict `kvtune bench` prints for each heuristic series against each baseline of the
    same run (harness.heuristic_verdict: identical launches apart, as the noise band), as (line,
    how many of the heuristic's own launches were slower beyond the noise); with several runs
    (`names`: {run_id: label}) each line starts with its run's label."""
    from kvtune.harness.heuristic_verdict import heuristic_verdicts, verdict_line

    if frame.empty or "policy" not in frame or not (frame["policy"] == "tuned").any():
        return []
    groups = frame.groupby("run_id", sort=False) if "run_id" in frame else [(None, frame)]
    lines = []
    for run_id, rows in groups:
        prefix = f"{names[run_id]}: " if names and run_id in names else ""
        lines += [(prefix + verdict_line(v), v.slower)
                  for v in heuristic_verdicts(rows.to_dict("records"))]
    return lines


def bucket_table(result) -> pd.DataFrame:
    """The tuned heuristic of a TuningResult: one row per bucket with its five params, its score
    (geometric mean of tuned / best baseline; lower is better), worst case and trials."""
    rows = []
    for b in sorted(result.buckets, key=lambda b: b.min_batch):
        rows.append(
            {
                "bucket": b.name,
                "min_batch": b.min_batch,
                "max_batch": b.max_batch,
                **b.params.to_dict(),
                "score_geomean": b.score,
                "worst": b.worst,
                "trials": b.n_trials,
                "regret_geomean": b.regret_geomean,
                "study": b.study_name,
            }
        )
    return pd.DataFrame(rows)


def bucket_speedups(result) -> pd.DataFrame:
    """Per bucket and baseline: the speedup of tuned over the baseline (baseline / tuned latency),
    geometric mean and worst over the bucket's cases. Columns: bucket, min_batch, baseline,
    geomean_speedup, worst_speedup, cases."""
    rows = []
    for b in sorted(result.buckets, key=lambda b: b.min_batch):
        names = sorted({n for c in b.cases for n in c.baselines_us})
        for name in names:
            ratios = [
                c.baselines_us[name] / c.tuned_us
                for c in b.cases
                if name in c.baselines_us and c.tuned_us > 0 and c.baselines_us[name] > 0
            ]
            if not ratios:
                continue
            rows.append(
                {
                    "bucket": b.name,
                    "min_batch": b.min_batch,
                    "baseline": name,
                    "geomean_speedup": float(np.exp(np.mean(np.log(ratios)))),
                    "worst_speedup": float(min(ratios)),
                    "cases": len(ratios),
                }
            )
    return pd.DataFrame(
        rows,
        columns=["bucket", "min_batch", "baseline", "geomean_speedup", "worst_speedup", "cases"],
    )


def finalists_table(bucket) -> pd.DataFrame:
    """A bucket's finalists: params, score median and p10/p90, relative spread ((p90-p10)/median),
    CTAs, and which one was chosen."""
    rows = []
    for i, f in enumerate(bucket.finalists):
        spread = (f.score_p90 - f.score_p10) / f.score_median if f.score_median else float("nan")
        rows.append(
            {
                "finalist": i,
                "chosen": f.chosen,
                **f.params.to_dict(),
                "score_median": f.score_median,
                "score_p10": f.score_p10,
                "score_p90": f.score_p90,
                "spread": spread,
                "ctas": f.ctas,
            }
        )
    return pd.DataFrame(rows)


def case_table(bucket) -> pd.DataFrame:
    """A bucket's cases: tuned latency, every baseline's latency, and the speedup of tuned over
    each baseline (baseline / tuned: above 1 means tuned is faster), plus the oracle if measured."""
    rows = []
    for c in bucket.cases:
        row = {"case": c.case_id, "batch_size": c.batch_size, "tuned_us": c.tuned_us}
        for name, us in sorted(c.baselines_us.items()):
            row[f"{name}_us"] = us
        for name, us in sorted(c.baselines_us.items()):
            row[f"speedup_vs_{name}"] = us / c.tuned_us if c.tuned_us > 0 else float("nan")
        if c.oracle_us is not None:
            row["oracle_us"] = c.oracle_us
        rows.append(row)
    return pd.DataFrame(rows)


def case_latencies_long(bucket) -> pd.DataFrame:
    """A bucket's cases in long form (case, batch_size, policy, latency_us) with `tuned` first,
    then the baselines by name, then `oracle` when measured (what the case comparison chart
    draws)."""
    rows = []
    for c in bucket.cases:
        rows.append(
            {
                "case": c.case_id,
                "batch_size": c.batch_size,
                "policy": "tuned",
                "latency_us": c.tuned_us,
            }
        )
        for name, us in sorted(c.baselines_us.items()):
            rows.append(
                {"case": c.case_id, "batch_size": c.batch_size, "policy": name, "latency_us": us}
            )
        if c.oracle_us is not None:
            rows.append(
                {
                    "case": c.case_id,
                    "batch_size": c.batch_size,
                    "policy": "oracle",
                    "latency_us": c.oracle_us,
                }
            )
    return pd.DataFrame(rows, columns=["case", "batch_size", "policy", "latency_us"])


__all__ = [
    "BEST_TRIAL",
    "GROUPED_SERIES",
    "HOVER_COLUMNS",
    "METRICS",
    "ORACLE",
    "bucket_speedups",
    "bucket_table",
    "case_latencies_long",
    "case_table",
    "device_text",
    "finalists_table",
    "heuristic_notes",
    "latency_points",
    "line_policies",
    "mark_tuned",
    "ok_rows_with_lines",
    "policy_labels",
    "policy_summary",
    "runs_table",
    "series_of",
    "shape_text",
    "status_counts",
]

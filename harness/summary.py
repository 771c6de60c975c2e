"""Measurement rows as a summary a person reads: one line per case, one column per series.

Formats: `table` (terminal), `markdown`, and the long forms `csv` and `json` (one record per
case and series, every number in its own column). The series is the `series` column when the
rows have it (the policy spec as typed, or `tuned:<file stem>`), else the policy name.
"""

from __future__ import annotations

import json
import math

from kvtune.harness.interference import QuietCheck
from kvtune.kernels.fingerprint import HASH_FORMAT

FORMATS = ("table", "csv", "json", "markdown")
# A measurement whose interference-guard bracket read below this ratio after its retries
# (harness/interference.py) is marked in the table.
QUIET_RATIO_MIN = 1.0 - QuietCheck().tolerance
CASE_COLUMNS = ["distribution", "batch_size", "seed"]


def series_of(row: dict) -> str:
    return str(row.get("series") or row.get("policy"))


def summary_records(rows: list[dict]) -> list[dict]:
    """One record per (case, series): median and p10/p90 latency (us), achieved TB/s, fraction
    of the ceiling (= floor / latency, the floor being bytes / ceiling), status, and the
    interference guard's quiet ratio (nan where no guard ran: the simulator, the CPU)."""
    out = []
    for r in rows:
        ok = r.get("status") == "ok"
        bw = r.get("achieved_bytes_per_s", math.nan) if ok else math.nan
        out.append({
            **{k: r.get(k) for k in CASE_COLUMNS},
            "case_id": r.get("case_id"),
            "series": series_of(r),
            "status": r.get("status"),
            "median_us": r.get("latency_us", math.nan) if ok else math.nan,
            "p10_us": r.get("p10_us", math.nan) if ok else math.nan,
            "p90_us": r.get("p90_us", math.nan) if ok else math.nan,
            "achieved_tb_per_s": bw / 1e12 if bw == bw else math.nan,
            "ceiling_fraction": r.get("bw_fraction", math.nan) if ok else math.nan,
            "quiet_ratio": _number(r.get("quiet_ratio")) if ok else math.nan,
            "message": "" if ok else str(r.get("message", ""))[:200],
        })
    return out


def disturbed_count(rows: list[dict]) -> int:
    """Measured rows whose guard bracket stayed below QUIET_RATIO_MIN after the retries."""
    return sum(1 for rec in summary_records(rows) if rec["quiet_ratio"] < QUIET_RATIO_MIN)


def _plan_notes(row: dict) -> dict:
    """A row's plan notes as a dict (the rows store them as JSON text); {} when absent or not
    JSON."""
    notes = row.get("plan_notes")
    if isinstance(notes, str):
        try:
            notes = json.loads(notes)
        except ValueError:
            return {}
    return notes if isinstance(notes, dict) else {}


def other_card_notes(rows: list[dict]) -> list[str]:
    """One line per heuristic series whose file was tuned on another device than the one the
    rows planned for (plan notes `tuned_on` "<card> (planning for <device>)", kernels/tuned
    heuristics): its splits were chosen for that card and for the kernel of then, and a kernel
    change alone can move the best split (docs/KERNEL_NOTES.md, "Register-capped twins for fp8
    and one KV head"). Empty when every file was tuned on the device it plans for."""
    seen = {}
    for r in rows:
        tuned_on = str(_plan_notes(r).get("tuned_on", ""))
        if "(planning for " in tuned_on:
            seen.setdefault(series_of(r), tuned_on)
    return [f"{series} was tuned on {where.replace(' (planning for ', ', planned here for ')[:-1]}"
            ": its splits were chosen for that card and the kernel of then; tune it again on "
            "this card (kvtune tune) before trusting its verdicts here"
            for series, where in seen.items()]


def other_kernel_notes(rows: list[dict], kernel_sha256: str | None) -> list[str]:
    """One line per heuristic series measured on the Triton backend whose file was tuned with
    another Triton decode kernel than `kernel_sha256` (this checkout's
    kernels.fingerprint.decode_kernel_sha256), with another backend, or before the kernel was
    recorded (plan notes `tuned_kernel` "<backend>:<hash>", studies.export.tuned_kernel): a
    kernel change alone can move the best split. Empty when every file matches."""
    seen = {}
    for r in rows:
        if r.get("backend") != "triton":
            continue
        tuned = _plan_notes(r).get("tuned_kernel")
        if tuned and tuned != f"triton:{kernel_sha256}":
            seen.setdefault(series_of(r), tuned)
    out = []
    for series, tuned in seen.items():
        backend, _, sha = tuned.partition(":")
        if backend != "triton":
            why = f"was tuned on the {backend} backend, not this Triton kernel"
        elif sha == "unrecorded":
            why = "was tuned before kvtune recorded the decode kernel it measured"
        elif not sha.startswith(HASH_FORMAT):
            why = (f"records its decode kernel in an older hash format ({sha}, which differed "
                   "between Python releases for the same code), so whether it is this kernel "
                   "is unknown")
        else:
            why = f"was tuned with another Triton decode kernel ({sha}; this one {kernel_sha256})"
        out.append(f"{series} {why}: a kernel change alone can move the best split; tune it "
                   "again (kvtune tune) before trusting its verdicts on this kernel")
    return out


def heuristic_notes(rows: list[dict], kernel_sha256: str | None) -> list[str]:
    """Every note on the rows' heuristic series: tuned on another card (other_card_notes), then
    with another decode kernel or backend (other_kernel_notes); what `kvtune bench` prints and
    the dashboard shows."""
    return other_card_notes(rows) + other_kernel_notes(rows, kernel_sha256)


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _cell(rec: dict) -> str:
    if rec["status"] != "ok":
        return f"!{rec['status']}"
    text = f"{rec['median_us']:,.1f}"
    if rec["p10_us"] == rec["p10_us"] and rec["p90_us"] == rec["p90_us"]:
        text += f" [{rec['p10_us']:,.1f}-{rec['p90_us']:,.1f}]"
    if rec["achieved_tb_per_s"] == rec["achieved_tb_per_s"]:
        text += f" {rec['achieved_tb_per_s']:.2f}TB/s"
    if rec["ceiling_fraction"] == rec["ceiling_fraction"]:
        text += f" {rec['ceiling_fraction']:.0%}"
    if rec["quiet_ratio"] < QUIET_RATIO_MIN:
        text += f" ~disturbed {rec['quiet_ratio']:.2f}"
    return text


def format_rows(rows: list[dict], fmt: str = "table") -> str:
    """The rows in format `fmt` (one of FORMATS); ValueError names the allowed formats."""
    import pandas as pd

    if fmt not in FORMATS:
        raise ValueError(f"format: {fmt!r} unknown; allowed: {', '.join(FORMATS)}")
    records = summary_records(rows)
    if fmt == "json":
        return json.dumps(records, indent=1, default=lambda x: None)
    frame = pd.DataFrame(records)
    if fmt == "csv":
        return frame.to_csv(index=False) if records else ""
    if not records:
        return "(no rows)"
    frame["cell"] = [_cell(r) for r in records]
    order = list(dict.fromkeys(frame["series"]))
    table = frame.pivot_table(index=CASE_COLUMNS, columns="series", values="cell",
                              aggfunc="first", sort=False)[order]
    legend = ("latency_us: median [p10-p90], achieved TB/s, fraction of the ceiling "
              "(= floor / latency); !status = not measured; ~disturbed q = measured while the "
              "interference guard's probe read q of its quiet speed")
    if fmt == "markdown":
        return legend + "\n\n" + table.reset_index().to_markdown(index=False) \
            if _has_tabulate() else legend + "\n\n" + _markdown(table.reset_index())
    with pd.option_context("display.max_rows", 1000, "display.width", 250,
                           "display.max_columns", 50, "display.max_colwidth", 60):
        return legend + "\n" + table.to_string()


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


def _markdown(frame) -> str:
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)


__all__ = ["FORMATS", "QUIET_RATIO_MIN", "disturbed_count", "format_rows",
           "heuristic_notes", "other_card_notes", "other_kernel_notes", "series_of",
           "summary_records"]

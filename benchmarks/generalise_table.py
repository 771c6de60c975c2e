"""The per-bucket table of benchmarks/generalise_gpu.sh, from its results folders.

    python benchmarks/generalise_table.py RESULTS_DIR [--out FILE.json] [--markdown FILE.md]

Reads every tune run (summary.json: train score, validation score, vs the engine default) and
every bench run whose rows carry a `tuned:<stem>` series (`kvtune bench --heuristic`): per case
the heuristic's latency against the engine planner (series `flashinfer-tensor-core`) and against
the best of the fixed-chunk grid (series `fixed-split:chunk_tokens=N`), grouped by the exported
file's buckets. Then the issue's targets per backend:
  flashinfer: never > 2% slower than its own planner on any case; within 2% of the per-case best
              fixed chunk in geomean and 5% worst; >= 1.15x over its own planner in geomean
              over batch 8..256;
  triton:     within 3% of the per-case best chunk in geomean, 10% worst.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

PLANNER = "flashinfer-tensor-core"
CHUNK_PREFIX = "fixed-split:chunk_tokens="
TARGETS = {
    "flashinfer": {"max_vs_default": 1.02, "chunk_geomean": 1.02, "chunk_worst": 1.05,
                   "min_speedup_geomean": 1.15},
    "triton": {"chunk_geomean": 1.03, "chunk_worst": 1.10},
}


def geomean(values) -> float:
    values = [v for v in values if not math.isnan(v)]
    return float(np.exp(np.mean(np.log(values)))) if values else math.nan


def _bucket_of(buckets: list[dict], batch: int) -> str:
    for b in buckets:
        if batch <= b["max_batch"]:
            return f"{b['min_batch']}-{b['max_batch']}"
    b = buckets[-1]
    return f"{b['min_batch']}-{b['max_batch']}"


def tune_rows(root: Path) -> list[dict]:
    out = []
    for summary_path in sorted(root.rglob("summary.json")):
        s = json.loads(summary_path.read_text())
        for b in s.get("buckets", []):
            v = b.get("validation") or {}
            vs = v.get("vs_default") or {}
            out.append({"study": s.get("study"), "backend": s.get("backend"), "bucket": b["name"],
                        "family": b.get("family") or s.get("rule"), "train_score": b.get("score"),
                        "train_worst": b.get("worst"), "validation_cases": v.get("cases"),
                        "validation_score": v.get("score_geomean"), "validation_worst": v.get("worst"),
                        "vs_default_geomean": vs.get("geomean"), "vs_default_worst": vs.get("worst")})
    return out


def bench_rows(root: Path) -> list[dict]:
    out = []
    for parquet in sorted(root.rglob("measurements.parquet")):
        rows = pd.read_parquet(parquet)
        if "series" not in rows or "heuristic_path" not in rows:
            continue
        rows = rows[rows["status"] == "ok"]
        lat = rows.pivot_table(index=["case_id", "batch_size"], columns="series", values="latency_us",
                               aggfunc="median")
        frac = rows.pivot_table(index=["case_id", "batch_size"], columns="series", values="bw_fraction",
                                aggfunc="median") if "bw_fraction" in rows else None
        chunks = [c for c in lat.columns if str(c).startswith(CHUNK_PREFIX)]
        backend = str(rows["backend"].iloc[0]) if len(rows) else "?"
        for label in [c for c in lat.columns if str(c).startswith("tuned:")]:
            path = Path(rows[rows["series"] == label]["heuristic_path"].iloc[0])
            if not path.exists():  # results.tgz unpacked elsewhere: the export sits in its root
                path = root / path.name
            doc = json.loads(path.read_text())
            for (case, batch), r in lat.iterrows():
                best_chunk = min((r[c] for c in chunks if not math.isnan(r[c])), default=math.nan)
                out.append({"heuristic": label, "file": str(path), "backend": backend,
                            "suite": parquet.parent.name, "case_id": case, "batch_size": int(batch),
                            "bucket": _bucket_of(doc["buckets"], int(batch)),
                            "vs_default": r[label] / r[PLANNER] if PLANNER in r else math.nan,
                            "vs_best_chunk": r[label] / best_chunk,
                            "bw_fraction": (float(frac.loc[(case, batch), label])
                                            if frac is not None and label in frac else math.nan)})
    return out


def summarise(cases: list[dict]) -> tuple[list[dict], list[dict]]:
    """(per heuristic and bucket, per heuristic with the targets) from bench_rows."""
    frame = pd.DataFrame(cases)
    per_bucket, verdicts = [], []
    if frame.empty:
        return per_bucket, verdicts
    for (label, bucket), g in frame.groupby(["heuristic", "bucket"], sort=False):
        per_bucket.append({"heuristic": label, "bucket": bucket, "cases": len(g),
                           "speedup_vs_default_geomean": 1 / geomean(g["vs_default"]),
                           "slowest_vs_default": float(g["vs_default"].max()),
                           "vs_best_chunk_geomean": geomean(g["vs_best_chunk"]),
                           "vs_best_chunk_worst": float(g["vs_best_chunk"].max()),
                           "bw_fraction_median": float(g["bw_fraction"].median())})
    for (label, backend), g in frame.groupby(["heuristic", "backend"], sort=False):
        kind = "flashinfer" if "flashinfer" in backend else "triton"
        t = TARGETS[kind]
        chunk_g, chunk_w = geomean(g["vs_best_chunk"]), float(g["vs_best_chunk"].max())
        checks = {"chunk_geomean": chunk_g <= t["chunk_geomean"], "chunk_worst": chunk_w <= t["chunk_worst"]}
        if kind == "flashinfer":
            in_range = g[(g["batch_size"] >= 8) & (g["batch_size"] <= 256)]
            checks["never_slower_than_default"] = float(g["vs_default"].max()) <= t["max_vs_default"]
            checks["speedup_over_default"] = 1 / geomean(in_range["vs_default"]) >= t["min_speedup_geomean"]
        verdicts.append({"heuristic": label, "backend": backend, "cases": len(g),
                         "vs_best_chunk_geomean": chunk_g, "vs_best_chunk_worst": chunk_w,
                         "speedup_vs_default_geomean": 1 / geomean(g["vs_default"]),
                         "slowest_vs_default": float(g["vs_default"].max()),
                         "checks": checks, "met": all(checks.values())})
    return per_bucket, verdicts


def markdown(tunes, per_bucket, verdicts) -> str:
    lines = ["## Tuning (train vs validation)", "",
             "| study | bucket | family | train score | validation score | validation worst | vs default |",
             "|---|---|---|---|---|---|---|"]
    f = lambda v: "-" if v is None or math.isnan(v) else f"{v:.3f}"
    for r in tunes:
        lines.append(f"| {r['study']} | {r['bucket']} | {r['family'] or '-'} | {f(r['train_score'])} | "
                     f"{f(r['validation_score'])} | {f(r['validation_worst'])} | {f(r['vs_default_geomean'])} |")
    lines += ["", "## Exported heuristics on the validation cases", "",
              "| heuristic | bucket | cases | x vs default (geomean) | slowest vs default | vs best chunk geomean | vs best chunk worst | fraction of copy bandwidth (median) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in per_bucket:
        lines.append(f"| {r['heuristic']} | {r['bucket']} | {r['cases']} | {f(r['speedup_vs_default_geomean'])} | "
                     f"{f(r['slowest_vs_default'])} | {f(r['vs_best_chunk_geomean'])} | {f(r['vs_best_chunk_worst'])} | "
                     f"{f(r['bw_fraction_median'])} |")
    lines += ["", "## Targets", ""]
    for v in verdicts:
        lines.append(f"- {v['heuristic']} ({v['backend']}): {'MET' if v['met'] else 'NOT MET'} "
                     + ", ".join(f"{k}={'ok' if ok else 'FAIL'}" for k, ok in v["checks"].items()))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--out")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    root = Path(args.root)
    tunes, cases = tune_rows(root), bench_rows(root)
    per_bucket, verdicts = summarise(cases)
    text = markdown(tunes, per_bucket, verdicts)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps({"tune": tunes, "buckets": per_bucket, "targets": verdicts},
                                             indent=1, default=str))
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

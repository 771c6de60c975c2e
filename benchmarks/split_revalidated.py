"""Apply `kvtune tune --revalidate --split-failing`'s split to a file that was re-validated
without it, from the measurements the file already holds (no GPU, nothing measured again).

Each bucket the re-validation deferred (`reason` starting "revalidation:") is replaced by its two
halves at studies/hybrid_revalidate.py split_edge, each decided by split_bucket (the tune's
ship-or-defer rule and the re-validation's noise) on the rows of its own cases in the bucket's
`validation`. The output is what `--split-failing` would have written from the same
measurements; FILE is not changed.

    python benchmarks/split_revalidated.py FILE OUT.json
"""

from __future__ import annotations

import argparse
import json
import sys

from kvtune.harness.runner import CaseRun
from kvtune.kernels.plan import AttentionShape
from kvtune.studies import hybrid_revalidate as rv
from kvtune.studies.hybrid_validation import overall_summary
from kvtune.workloads.hybrid import HYBRID_SUITES
from kvtune.workloads.suites import get_suite


def split_file(doc: dict, source: str) -> dict:
    shape = AttentionShape(**doc["shape"])
    index = {c.case_id: c for name in HYBRID_SUITES for c in get_suite(name, shape=shape).cases}
    shipped, deferred = list(doc["buckets"]), []
    for b in doc["deferred_buckets"]:
        if not str(b.get("reason", "")).startswith("revalidation:"):
            deferred.append(b)
            continue
        entry = {k: v for k, v in b.items() if k not in ("tuned_params", "reason", "revalidated")}
        entry["params"] = b["tuned_params"]
        cases = [CaseRun(r["case_id"], index[r["case_id"]].batch())
                 for r in b["validation"]["cases"]]
        parts = rv.split_bucket(entry, b["validation"], cases) or [b]
        for p in parts:
            (deferred if (p.get("validation") or {}).get("deferred", True) else shipped).append(p)
    measured = [r["case_id"] for b in shipped + deferred if b.get("revalidated")
                for r in b["validation"]["cases"]]
    how = doc["validation"]["how"] + "; failing buckets split (benchmarks/split_revalidated.py)"
    return {**doc, "buckets": shipped, "deferred_buckets": deferred,
            "validation": overall_summary(shipped, deferred, how, sorted(set(measured)), []),
            "split_from": source}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("out")
    args = ap.parse_args(argv)
    try:
        doc = rv.load_hybrid_file(args.file)
    except ValueError as exc:
        print(f"split_revalidated: error: {exc}", file=sys.stderr)
        return 2
    out = split_file(doc, args.file)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, default=float)
    for b in out["buckets"]:
        v = b["validation"]["tuned_vs_serial"]
        print(f"ships {rv.bucket_name(b)}: x{v['geomean']:.3f}, worst x{v['worst']:.3f}")
    for b in out["deferred_buckets"]:
        print(f"defers {rv.bucket_name(b)}: {b.get('reason')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Summarise a run directory's guard outcomes and hybrid decisions (eleventh session calls).

    python3 benchmarks/gpu_calls/s11_guard_summary.py RESULTS_DIR

Prints, per run under RESULTS_DIR: rows, how many were quiet, how many paid retries, the longest
streak of disturbed rows without a retry (the guard's give-up, harness/interference.py), and the
bucket decisions of a hybrid heuristic file (partial or complete).
"""
import glob
import json
import sys

import pandas as pd

root = sys.argv[1]
for run in sorted(glob.glob(f"{root}/*/")):
    parts = sorted(glob.glob(f"{run}**/*.parquet", recursive=True))
    if parts:
        df = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
        if "quiet_ratio" in df:
            # Quiet: the kept bracket within the guard's default tolerance (0.10).
            q = df["quiet_ratio"].isna() | (df["quiet_ratio"] >= 0.9)
            r = df.get("interference_retries", pd.Series(0, index=df.index)).fillna(0)
            streak = best = 0
            for quiet, retries in zip(q, r):
                streak = streak + 1 if (not quiet and retries == 0) else 0
                best = max(best, streak)
            ratio = df["quiet_ratio"].dropna()
            print(f"{run}: {len(df)} rows, quiet {int(q.sum())}, with retries {int((r > 0).sum())}, "
                  f"retries total {int(r.sum())}, longest disturbed-without-retry streak {best}, "
                  f"quiet ratio median {ratio.median():.3f}" if len(ratio) else f"{run}: {len(df)} rows")
    for f in sorted(glob.glob(f"{run}hybrid_heuristic*.json")):
        doc = json.load(open(f))
        print(f"  {f.split('/')[-1]}: unfinished {doc.get('unfinished_buckets')}, "
              f"resumed_from {doc.get('resumed_from')}")
        for b in doc.get("buckets", []) + doc.get("deferred_buckets", []):
            v = b.get("validation") or {}
            print(f"    {b['min_decodes']}-{b['max_decodes']}|{b['min_prefill_tokens']}-"
                  f"{b['max_prefill_tokens']}: {'DEFER ' + str(b.get('reason')) if 'tuned_params' in b else 'ship'}"
                  f" train {b['score_vs_serial']:.3f} val {json.dumps({k: v[k] for k in list(v)[:6]}, default=str)[:300]}")

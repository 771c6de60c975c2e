#!/usr/bin/env bash
# Session 9, call 6 (issue 15): call 3's two remaining cases where the tuned file read more than
# 2% slower than serial (B64 + 2048 tokens at 20K: 0.969x; B64 + 1024 at 16K: 0.979x), measured
# again three times each through the product, as call 4 did for the 0.844x one.
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Ninth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for cc in "2048 20480" "1024 16384"; do
  set -- $cc
  for i in 1 2 3; do
    timeout 50 python3 -m kvtune bench --distribution hybrid --batch-sizes 64 \
      --param chunk_tokens=$1 --param context_tokens=$2 \
      --policies hybrid-serial,hybrid-tuned:path=benchmarks/gpu_calls/s9_hybrid_heuristic.json \
      --backend triton --timer events --stopping quiet_retries=1 --no-progress --out $OUT/res \
      > /dev/null 2>&1
    echo "chunk $1 context $2 run $i rc $?"
  done
done
python3 - <<'PY'
import glob, os, pandas as pd
for d in sorted(glob.glob(os.environ["OUT"] + "/res/*/measurements.parquet")):
    r = pd.read_parquet(d)
    print(r["case_id"].iloc[0], " ".join(f"{s[:12]}={l:.1f}(q{q:.2f})" for s, l, q in
                                         zip(r["series"], r["latency_us"], r["quiet_ratio"])))
PY
date -u

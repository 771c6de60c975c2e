#!/usr/bin/env bash
# Session 24, call 7 (H100): the fp8 decode heuristic (benchmarks/gpu_calls/s12_fp8_heuristic.json,
# tuned on an H200 in the twelfth session, on prod-mix) on traffic and a card it was not tuned
# on: the `traces` suite with e4m3 pages on this H100, with today's kernel (the capped twins of
# this session), beside FlashInfer's fp8 planner on the same kernel, two alternated rounds per
# case (kvtune bench --rounds 2; CUDA-graph replays, cold L2; every output checked first).
# Prints per batch bucket the geomean of FlashInfer's planner time over the heuristic's and the
# worst case.
#   bash benchmarks/gpu_calls/s24_call7.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${BENCH_S:-300} python3 -m kvtune bench --suite traces --kv-dtype fp8_e4m3 --backend triton \
  --policies flashinfer-tensor-core --heuristic benchmarks/gpu_calls/s12_fp8_heuristic.json \
  --timer graph --rounds 2 --no-progress --format csv \
  --stopping min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1 \
  --out /tmp/tr > $OUT/bench.csv 2> $OUT/bench.err
echo "bench rc=$?"; tail -3 $OUT/bench.err
cp /tmp/tr/*/manifest.json $OUT/ 2>/dev/null; cp /tmp/tr/*/measurements.parquet $OUT/ 2>/dev/null
python3 - <<'PY'
import glob, numpy as np, pandas as pd
f = glob.glob("/tmp/tr/*/measurements.parquet")
if not f:
    raise SystemExit("no measurements")
d = pd.read_parquet(f[0])
print("rows", len(d), "not ok", int((d.status != "ok").sum()), "timer", d.timer.unique(),
      "ceiling TB/s", d.ceiling_bytes_per_s.dropna().unique()[:2] / 1e12)
t = d.pivot_table(index=["case_id", "batch_size"], columns="series", values="latency_us")
fi = t["flashinfer-tensor-core"]; tu = t[[c for c in t.columns if c.startswith("tuned")][0]]
r = (fi / tu).rename("fi_over_tuned").reset_index()
for lo, hi in ((1, 8), (9, 32), (33, 128), (129, 512)):
    s = r[(r.batch_size >= lo) & (r.batch_size <= hi)].fi_over_tuned
    if len(s):
        print(f"B {lo}-{hi}: {len(s)} cases, geomean {np.exp(np.log(s).mean()):.3f}, "
              f"worst {s.min():.3f}, slower than FI by >2%: {(s < 0.98).sum()}")
print("all:", len(r), "geomean %.3f worst %.3f" % (np.exp(np.log(r.fi_over_tuned).mean()),
                                                  r.fi_over_tuned.min()))
PY
date -u

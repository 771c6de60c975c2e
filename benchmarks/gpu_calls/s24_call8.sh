#!/usr/bin/env bash
# Session 24, call 8 (H100): call 7's one case slower than FlashInfer's planner (arxiv B=48
# seed 1: FlashInfer's plan unsplit, 384 programs; the fp8 file splits 33 requests, 648
# programs), and its neighbours, with the product's kernel rule and again with the fp8
# register-capped twin taken out of decode_config.CAPPED_TWIN in that process (everything else
# equal): is the third program per SM, which holds the unsplit plan's 384 programs in one
# wave, what turned the file's split into a loss? kvtune bench --rounds 2, CUDA-graph replays.
#   bash benchmarks/gpu_calls/s24_call8.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
ARGS="bench --distribution arxiv --batch-sizes 40,48,56 --seeds 0,1 --kv-dtype fp8_e4m3
  --backend triton --policies flashinfer-tensor-core
  --heuristic benchmarks/gpu_calls/s12_fp8_heuristic.json --timer graph --rounds 2 --no-progress
  --format csv --stopping min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1"
for mode in product no-fp8-cap; do
  timeout 120 python3 - $mode $ARGS --out /tmp/$mode > $OUT/$mode.csv 2> $OUT/$mode.err <<'PY'
import sys
mode, argv = sys.argv[1], sys.argv[2:]
if mode == "no-fp8-cap":
    from kvtune.kernels import decode_config as dc
    entry = dc.CONFIG_TABLE[(128, 1, "many")]
    del dc.CAPPED_TWIN[(128, 1, entry)]
from kvtune.cli import main
sys.exit(main(argv))
PY
  echo "$mode rc=$?"; tail -1 $OUT/$mode.err
done
python3 - <<'PY'
import glob, pandas as pd
for mode in ("product", "no-fp8-cap"):
    d = pd.read_parquet(glob.glob(f"/tmp/{mode}/*/measurements.parquet")[0])
    t = d.pivot_table(index="case_id", columns="series", values="latency_us")
    n = d.pivot_table(index="case_id", columns="series", values="num_tasks")
    t["fi/tuned"] = t.iloc[:, 0] / t.iloc[:, 1]
    print(mode, "not ok", int((d.status != "ok").sum()))
    print(pd.concat([t.round(1), n.add_prefix("tasks ")], axis=1).to_string())
PY
date -u

#!/usr/bin/env bash
# Session 27, call 2 (H200): (1) the refined capped-twin rule (commit 8a75374, verified on the CPU
# only) timed as a whole: the MHA 32/32 fp8 matrix variant (43, full product, 262,144 tokens)
# beside FlashInfer's fp8 decode, and the s26 fp8 file on the held-out trace seeds 2-3 beside
# FlashInfer's fp8 planner on the Triton kernel (two alternated rounds, CUDA-graph replays);
# (2) call 1's H200 hybrid file (s27_hybrid_heuristic_h200_fallback.json) on the 15 hybrid
# batches no suite holds, beside kvtune's serial step, two alternated rounds (CUDA events).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p /tmp/m2
timeout 60 python3 benchmarks/bench_kernels.py --sections shapes --settle-s 0 --time-limit-s 50 \
  --full --variants 43 --out /tmp/m2/full-v43 2>&1 \
  | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-230
rm -f /tmp/m2/full-v43/bench_log.txt; tar -C /tmp/m2 -czf $OUT/call2.tgz .
stop=min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1
for t in azure-conv azure-code mooncake arxiv sharegpt; do
  timeout 40 python3 -m kvtune bench --distribution $t --seeds 2,3 \
    --batch-sizes 8,16,32,48,64,96,128,192,256 --kv-dtype fp8_e4m3 --backend triton \
    --policies flashinfer-tensor-core --heuristic benchmarks/gpu_calls/s26_fp8_heuristic.json \
    --timer graph --rounds 2 --no-progress --format csv --stopping $stop \
    --out /tmp/m2/heldout > /tmp/m2/heldout-$t.csv 2> /tmp/m2/heldout-$t.err
  echo "$t rc=$?"; tail -n 1 /tmp/m2/heldout-$t.err
  tar -C /tmp/m2 -czf $OUT/call2.tgz .
done
date -u
ROUNDS=2 bash benchmarks/gpu_calls/hybrid_held_out.sh \
  benchmarks/gpu_calls/s27_hybrid_heuristic_h200_fallback.json /tmp/m2/hyb 120
tar -C /tmp/m2 -czf $OUT/call2.tgz .
date -u

#!/usr/bin/env bash
# Session 28, call 6 (H200, right after call 5): benchmarks/gpu_calls/uniform_fp8_check.sh
# at the other two of its four totals (262,144 and 393,216 tokens): the s26 fp8 file on uniform batches
# beside FlashInfer's fp8 planner on the Triton kernel, CUDA-graph replays, two alternated rounds.
# Since tuned_planner.UNIFORM_SPREAD the CPU replay plans FlashInfer's launch in all of them.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
stop=min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1
for total in 262144 393216; do
  timeout 75 python3 -m kvtune bench --distribution uniform --param total_tokens=$total \
    --batch-sizes 33,40,48,64,96,128 --kv-dtype fp8_e4m3 --backend triton \
    --policies flashinfer-tensor-core --heuristic benchmarks/gpu_calls/s26_fp8_heuristic.json \
    --timer graph --rounds 2 --no-progress --stopping $stop --out /tmp/u6 2>&1 \
    | grep -v Warning | grep -i "tuned\|rows\|uniform" | cut -c1-240
done
tar -C /tmp/u6 -czf $OUT/u6.tgz .
date -u

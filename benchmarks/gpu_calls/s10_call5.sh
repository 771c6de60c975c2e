#!/usr/bin/env bash
# Session 10, call 5 (issue 16): call 3's second part again, which ran out of its 400 s with the
# interference guard's default 5 retries per measurement on a disturbed machine: the fp8
# heuristic tuned on prod-mix fp8 with the -vp kernel and judged on traces fp8 (generalise_gpu.sh
# direction b, Triton, CUDA-graph replays; baselines in the same run: FlashInfer's own fp8
# planner's plan and the chunk grid 512..16384), now with one guard retry.
# Run on the device machine from the repository root, with .whl/ (carry [".whl"]); writes $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
GENERALISE_KV_DTYPE=fp8_e4m3 GENERALISE_TIMER=graph GENERALISE_DIRECTIONS=b \
  GENERALISE_QUIET_RETRIES=1 timeout 560 bash benchmarks/generalise_gpu.sh $OUT/gen triton \
  > /dev/null 2>&1
echo "generalise rc $?"
grep -v Warning $OUT/gen/generalise.log | grep -E "^==|bucket" | tail -20
cat $OUT/gen/table.md 2>/dev/null | tail -30
date -u

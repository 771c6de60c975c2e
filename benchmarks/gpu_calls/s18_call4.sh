#!/usr/bin/env bash
# Session 18, call 4 (H100): the page-1 matrix variant (10) with the new page-1 entry
# bn128-w4-s3 and its same-bits twin bn128-w4-s2 chosen by occupancy_twin (commit after call 3),
# against FlashInfer at 262,144 tokens (the cases call 3 set the rule on among them) and
# 196,608 tokens (none of them).
#   bash benchmarks/gpu_calls/s18_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for tokens in 262144 196608; do
  timeout 150 python3 benchmarks/bench_kernels.py --sections shapes --variants 10 \
    --total-tokens $tokens --settle-s 0 --time-limit-s 140 --out $OUT/v10_$tokens 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | tee -a $OUT/matrix.log
  rm -f $OUT/v10_$tokens/results.json $OUT/v10_$tokens/shapes.md $OUT/v10_$tokens/bench_log.txt
  date -u | tee -a $OUT/matrix.log
done

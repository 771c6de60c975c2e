#!/usr/bin/env bash
# Session 17, call 7 (H100): the page-64 matrix variant (11) with the large-page entry
# (bn128-w8-s3-pa, no twin; commit after call 6) against FlashInfer at 262,144 and 196,608 tokens.
#   bash benchmarks/gpu_calls/s17_call7.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for tokens in 262144 196608; do
  timeout 110 python3 benchmarks/bench_kernels.py --sections shapes --variants 11 \
    --total-tokens $tokens --settle-s 0 --time-limit-s 100 --out $OUT/v11_$tokens 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | tee -a $OUT/matrix.log
  rm -f $OUT/v11_$tokens/results.json $OUT/v11_$tokens/shapes.md $OUT/v11_$tokens/bench_log.txt
  date -u | tee -a $OUT/matrix.log
done

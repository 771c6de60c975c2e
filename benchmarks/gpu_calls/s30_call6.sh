#!/usr/bin/env bash
# Session 30, call 6 (H200): head_dim 256 at page 1 with its new small-page entry bn64-w4-s3
# (set on call 5's five bf16 cases): the whole product on the matrix's bf16 page-1 variant (twelve
# cases, seven not among call 5's) and the fp16 page-1 variant (held out), bench_kernels
# --sections shapes against FlashInfer 0.5.3 on the same plans (paced CUDA events, cold L2,
# checked against float64 first; copy measured in each process).
#   bash benchmarks/gpu_calls/s30_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/m8
for v in 63 66; do
  timeout 75 python3 benchmarks/bench_kernels.py --sections shapes --full --variants $v \
    --settle-s 0 --time-limit-s 66 --out /tmp/m8/full-v$v 2>&1 | grep 'cases ok\|rror' | head -3
  rm -f /tmp/m8/full-v$v/bench_log.txt
  tar -C /tmp/m8 -czf $OUT/matrix.tgz .
  date -u
done

#!/usr/bin/env bash
# Session 30, call 9 (H200, the last device seconds): page 1 on g16 and yi-6b (64 q / 4 KV heads, G = 16,
# G = 8; bf16) with the small-page "many-large-group" entry bn128-w4-s3 set on call 8, against
# FlashInfer 0.5.3 on the same plans (bench_kernels --sections shapes, as call 6).
#   bash benchmarks/gpu_calls/s30_call9.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/m10
for v in 45 27; do
  timeout 42 python3 benchmarks/bench_kernels.py --sections shapes --full --variants $v \
    --settle-s 0 --time-limit-s 36 --out /tmp/m10/full-v$v 2>&1 | grep 'cases ok\|rror' | head -3
  rm -f /tmp/m10/full-v$v/bench_log.txt
  tar -C /tmp/m10 -czf $OUT/matrix.tgz .
done

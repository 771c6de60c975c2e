#!/usr/bin/env bash
# Session 30, call 7 (H200, the session's last device seconds): page 1 on g16 (64 q / 4 KV heads, G = 16,
# bf16; not in the matrix timed before: the small-page "many-large-group" entry), the product against
# FlashInfer 0.5.3 on the same plans (bench_kernels --sections shapes, as call 6).
#   bash benchmarks/gpu_calls/s30_call7.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/m9
timeout 60 python3 benchmarks/bench_kernels.py --sections shapes --full --variants 45 \
  --settle-s 0 --time-limit-s 52 --out /tmp/m9/full-v45 2>&1 | grep 'cases ok\|rror' | head -3
rm -f /tmp/m9/full-v45/bench_log.txt
tar -C /tmp/m9 -czf $OUT/matrix.tgz .
date -u

#!/usr/bin/env bash
# Ready for a GPU call (written in session 24, not run: the session's device time ran out):
# issue 16's matrix for fp8 pages on shapes the fp8 kernel choices
# were never timed on against FlashInfer: qwen2.5-7b (G = 7, full variant 25), g16 (64 q / 4 KV,
# 52) and MHA 32/32 (43), 262,144 tokens, FlashInfer's fp8 decode on the same plans
# (bench_kernels.py --full --sections shapes; the paced matrix timer; checked first).
#   bash benchmarks/gpu_calls/fp8_matrix_other_shapes.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p /tmp/m
for v in 25 52 43; do
  timeout 60 python3 benchmarks/bench_kernels.py --sections shapes --full --variants $v \
    --settle-s 0 --time-limit-s 52 --out /tmp/m/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-200
  rm -f /tmp/m/v$v/bench_log.txt
  date -u
done
tar -C /tmp/m -czf $OUT/matrix.tgz .

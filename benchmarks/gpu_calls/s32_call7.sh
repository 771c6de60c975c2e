#!/usr/bin/env bash
# Thirty-second session, call 7 (H200): call 6 on fp8 head_dim 256 (pages 1, 16, 64) and head_dim
# 64 page 64 (same tools, same read configurations).
#   bash benchmarks/gpu_calls/s32_call7.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
r=bn32-w4-s3,bn64-w4-s3,bn128-w4-s3,bn64-w4-s4
for v in 70 69 71 62; do
  matrix_run read-v$v 50 --full --variants $v --read-ceiling --read-configs $r
done

#!/usr/bin/env bash
# Thirty-second session, call 9 (H200): 16-bit rows of head_dim 64 and 256 (256 and 1,024 KV
# bytes per token and head, where the calibration's 512 never varied), to judge on the CPU a
# simulator per-CTA cap that scales with those bytes (SimConstants.inflight_exponent), chosen
# on this session's fp8 rows. bench_kernels --sections shapes --full (FlashInfer 0.5.3 on the
# same plan; paced CUDA events, cold L2, checked first).
#   bash benchmarks/gpu_calls/s32_call9.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
for v in 55 64 54 65; do
  matrix_run full-v$v 45 --full --variants $v
done

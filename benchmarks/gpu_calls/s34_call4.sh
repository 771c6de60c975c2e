#!/usr/bin/env bash
# Thirty-fourth session, call 4 (issue 16): call 3's held-out miss, one KV head at head_dim 256
# (gemma-2b, 8/1/256): bf16 p16 ran 0.77-0.94x FlashInfer on 6 of 12 cases with the table's
# 16-bit "one-per-sm" head_dim-256 entry bn32-w4-s4-pa, an entry predicted in the first
# sessions and never timed. Configurations of that key on the missed plans and two it passed
# (profile_decode.py --configs --flashinfer: paced CUDA events, cold L2, checked against
# float64 first; FlashInfer 0.5.3 on the same plan). Then fp8 on the same shape, where two cases
# ran 1.336x / 1.385x FlashInfer with bn64-w4-s4-pa-vp-l2 (the "one-per-sm" fp8 entry, the
# "many" kernel, also never timed on one KV head).
#   bash benchmarks/gpu_calls/s34_call4.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
SWEEP_TIMEOUT_S=160 config_sweep 8/1/256 bf16 16 \
  bn32-w4-s4-pa,bn32-w4-s3-pa,bn64-w4-s2,bn64-w4-s3,bn64-w8-s2,bn64-w8-s3-pa,bn64-w8-s4-pa,bn128-w8-s2-pa \
  uniform:8:2048 skew80:64:2048 skew80:256:2048 skew80:64:balanced uniform:64:balanced \
  skew80:256:balanced
SWEEP_TIMEOUT_S=160 config_sweep 8/1/256 fp8_e4m3 16 \
  bn64-w4-s4-pa-vp-l2,bn64-w4-s3-pa-vp-l2,bn64-w4-s4-pa-vp,bn64-w8-s3-pa-vp,bn128-w8-s3-pa-vp,bn32-w4-s4-pa-vp \
  uniform:8:balanced skew80:256:2048 uniform:8:2048 skew80:64:2048
print_sweep

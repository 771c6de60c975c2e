#!/usr/bin/env bash
# Thirty-third session, call 3: -l2 (the task's page ids prefetched into L2) on cases call 2 did
# not time. Call 2 (uniform B=64 balanced-2x): fp8 head_dim 256 bn64-w4-s4-pa-vp 301.2 -> 272.0
# us at page 4, 291.4 -> 267.7 at 16, 270.0 -> 262.9 at 64, 263.3 -> 262.8 at 1; llama3-8b,
# llama3-70b-tp8, head_dim 64 fp8 and llama3-8b bf16 within -1.3..+1.0%. Here: fp8 head_dim 256
# skewed and other batches at page 16, its shallow twin s3, page 1 skewed; 16-bit head_dim 256
# (entry without page-ahead); fp8 page 1 at G = 4 and 7 and head_dim 64. Each configuration is
# checked against float64 first; FlashInfer 0.5.3 on the same plan in the same process
# (profile_decode.py --configs --flashinfer: paced CUDA events, cold L2).
#   bash benchmarks/gpu_calls/s33_call3.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
v=bn64-w4-s4-pa-vp,bn64-w4-s4-pa-vp-l2,bn64-w4-s3-pa-vp,bn64-w4-s3-pa-vp-l2
config_sweep hd256 fp8_e4m3 16 $v skew80:8:balanced skew80:64:balanced skew80:256:balanced \
  uniform:8:2048 uniform:256:balanced
config_sweep hd256 fp8_e4m3 1 bn64-w4-s4-pa-vp,bn64-w4-s4-pa-vp-l2 skew80:64:balanced
config_sweep hd256 bf16 16 bn64-w4-s2,bn64-w4-s2-l2 uniform:64:balanced skew80:64:balanced
config_sweep qwen2.5-7b fp8_e4m3 1 bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-l2 uniform:64:balanced
config_sweep llama3-8b fp8_e4m3 1 bn128-w4-s2-pa-vp-r128,bn128-w4-s2-pa-vp-l2-r128 \
  uniform:64:balanced
config_sweep hd64 fp8_e4m3 1 bn128-w4-s3-pa-vp-r120,bn128-w4-s3-pa-vp-l2-r120 uniform:64:balanced
print_sweep

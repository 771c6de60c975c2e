#!/usr/bin/env bash
# Thirty-fourth session, call 8 (issue 16): fp8 head_dim 256 with one KV head (call 7: gemma-2-9b
# at tensor parallelism 8, 2/1/256, 3/12 at 1.4x FlashInfer with the "many" kernel
# bn64-w4-s4-pa-vp-l2; call 4: bn128-w8-s3-pa-vp 1.2-1.35x faster than it on one-program-per-SM
# plans of 8/1/256). Candidates for the fp8 head_dim-256 "one-per-sm" key on 2/1/256 page 16:
# bn128-w8-s3-pa-vp (158 registers x 256 threads, 143 KB: one per SM; local compile), its -l2
# form, its two-stage twin under a 128-register cap (two per SM), bn64-w8-s4-pa-vp (two per SM).
# profile_decode --configs --flashinfer: paced CUDA events, cold L2, checked against float64.
#   bash benchmarks/gpu_calls/s34_call8.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
SWEEP_TIMEOUT_S=150 config_sweep 2/1/256 fp8_e4m3 16 \
  bn64-w4-s4-pa-vp-l2,bn128-w8-s3-pa-vp,bn128-w8-s3-pa-vp-l2,bn128-w8-s2-pa-vp-r128,bn64-w8-s4-pa-vp \
  uniform:8:2048 uniform:8:balanced skew80:8:balanced skew80:256:2048
print_sweep

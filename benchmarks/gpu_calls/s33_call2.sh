#!/usr/bin/env bash
# Thirty-third session, call 2: the page ids prefetched into L2 at each task's start (new config
# suffix -l2, KernelConfig.page_ids_l2) against the same configuration without it. Call 1's
# Nsight Compute profiles (fp8 head_dim 256, bn64-w4-s4-pa-vp, uniform B=64 balanced-2x) put
# the page-size cost on one instruction at the loop's top that waits (long scoreboard) for the
# one-block-ahead page-id load: 5,650 samples at page 4, 1,024 at page 64 (of 29-34k); DRAM
# throughput 73% at page 4 against 81-84% at pages 1 and 64. Each configuration is checked
# against float64 first; FlashInfer 0.5.3 on the same plan in the same process
# (profile_decode.py --configs --flashinfer: paced CUDA events, cold L2, product launch order).
#   bash benchmarks/gpu_calls/s33_call2.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
v=bn64-w4-s4-pa-vp,bn64-w4-s4-pa-vp-l2
for page in 1 4 16 64; do
  config_sweep hd256 fp8_e4m3 $page $v uniform:64:balanced
done
config_sweep llama3-8b fp8_e4m3 16 bn128-w4-s2-pa-vp-r128,bn128-w4-s2-pa-vp-l2-r128 \
  uniform:64:balanced
config_sweep llama3-8b fp8_e4m3 4 bn128-w4-s2-pa-vp-r128,bn128-w4-s2-pa-vp-l2-r128 \
  uniform:64:balanced
config_sweep llama3-8b fp8_e4m3 16 bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-l2 skew80:64:balanced
config_sweep llama3-70b-tp8 fp8_e4m3 16 bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-l2 skew80:64:2048
config_sweep hd64 fp8_e4m3 16 bn128-w4-s3-pa-vp-r120,bn128-w4-s3-pa-vp-l2-r120 uniform:64:balanced
config_sweep llama3-8b bf16 16 bn64-w4-s4-pa,bn64-w4-s4-pa-l2 uniform:64:balanced
print_sweep

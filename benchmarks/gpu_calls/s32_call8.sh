#!/usr/bin/env bash
# Thirty-second session, call 8 (H200): G = 8 fp8 (yi-6b page 16), where calls 1 and 6 found
# decode.py at 0.69-0.81 of copy and 0.79-0.95 of the paged read (0.83-0.93 of copy): is it the
# configuration? The product's two (bn128-w4-s2-pa-vp-r128 on the fixed-2048 plans,
# bn128-w4-s3-pa-vp on balanced-2x) beside smaller tiles and eight warps, on four plans.
# profile_decode.py --configs --flashinfer (paced CUDA events, cold L2, checked first).
#   bash benchmarks/gpu_calls/s32_call8.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
c=bn128-w4-s2-pa-vp-r128,bn128-w4-s3-pa-vp,bn64-w4-s4-pa-vp,bn64-w4-s3-pa-vp,bn128-w8-s3-pa-vp,bn64-w8-s4-pa-vp
config_sweep yi-6b fp8_e4m3 16 $c uniform:64:2048 uniform:64:balanced skew80:64:2048 \
  skew80:64:balanced
print_sweep

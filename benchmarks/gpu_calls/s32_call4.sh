#!/usr/bin/env bash
# Thirty-second session, call 4 (H200): call 3 found the paged read of fp8 head_dim 256 uniform
# B=64 balanced-2x at 0.96-0.98 of copy at every page size, where decode.py reads 0.83 (page 4)
# and 0.85 (page 16) against 0.92-0.93 at pages 1 and 64. Which part of the loop is it: the V
# pairs (-vp), V widened in registers (-vw), plain V, or the page ids one block ahead (-pa)?
# Same plans at pages 4, 16, 64. Then fp8 head_dim 64 page 16, whose balanced-2x plans read
# 0.68-0.84 of their read ceiling: the entry without -vp and with -vw.
# profile_decode.py --configs --flashinfer (paced CUDA events, cold L2, checked first).
#   bash benchmarks/gpu_calls/s32_call4.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
c=bn64-w4-s4-pa-vp,bn64-w4-s4-pa,bn64-w4-s4-pa-vw,bn64-w4-s4,bn64-w4-s3-pa
for page in 4 16 64; do
  config_sweep hd256 fp8_e4m3 $page $c uniform:64:balanced
done
config_sweep hd64 fp8_e4m3 16 \
  bn128-w4-s3-pa-vp-r120,bn128-w4-s3-pa-r120,bn128-w4-s3-pa-vw-r120,bn128-w4-s3-pa-vw \
  skew80:64:balanced uniform:64:balanced
print_sweep

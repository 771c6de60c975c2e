#!/usr/bin/env bash
# Ready for the next session with device time (H200; written in the thirty-first session, not run):
# page sizes 2-15, which no call has timed. Pages below 16 tokens take SMALL_PAGE_TABLE's entries
# (set at page 1): llama3-8b bf16 runs bn128-w4-s3 or its shallow twin bn128-w4-s2 there, where
# page 16 runs bn64-w4-s4-pa or bn64-w4-s3-pa. Each plan at pages 2, 4 and 8 with those four
# configurations, FlashInfer 0.5.3 before and after on the same plan (profile_decode.py
# --configs --flashinfer: paced CUDA events, cold L2; each configuration checked against float64
# first; launches in the product's order). Then fp8 head_dim 256 uniform B=64 balanced-2x at
# pages 1, 4, 16 and 64 with bn64-w4-s4-pa-vp (the thirty-first session: 263.5 us at page 1,
# 291 at 16, 271.5 at 64: why page 16 reads less is not known).
#   bash benchmarks/gpu_calls/s32_call2.sh (ran as the thirty-second session call 2)
source benchmarks/gpu_calls/common.sh
kvtune_install
c=bn128-w4-s3,bn128-w4-s2,bn64-w4-s4-pa,bn64-w4-s3-pa
for page in 2 4 8; do
  config_sweep llama3-8b bf16 $page $c uniform:64:2048 uniform:64:balanced skew80:64:balanced
done
for page in 1 4 16 64; do
  config_sweep hd256 fp8_e4m3 $page bn64-w4-s4-pa-vp uniform:64:balanced
done
print_sweep

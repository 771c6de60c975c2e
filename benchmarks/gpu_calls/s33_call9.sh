#!/usr/bin/env bash
# Thirty-third session, call 9: does -l2 cost the fp8 head_dim-256 shallow twin on 1,024 equal
# tasks of 2,048 keys? Call 3 read bn64-w4-s3-pa-vp 268.5 us against its -l2 form 277.4 on
# uniform B=8 fixed-2048 (page 16); call 4's matrix ran the -l2 twin at 263.3 there and 278.4 on
# uniform B=64 fixed-2048 (the same task structure). Both plans, both configurations, three
# times alternated (profile_decode.py --configs --flashinfer: paced CUDA events, cold L2,
# checked against float64 first).
#   bash benchmarks/gpu_calls/s33_call9.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
for round in 1 2 3; do
  config_sweep hd256 fp8_e4m3 16 bn64-w4-s3-pa-vp,bn64-w4-s3-pa-vp-l2 uniform:8:2048 \
    uniform:64:2048
done
print_sweep

#!/usr/bin/env bash
# Thirty-fourth session, call 6 (issue 16): (a) the new head_dim-256 "one-per-sm" pair is in
# SEVERAL_ROUNDS_TWIN (commit of this script): on skew80 B=64 balanced-2x the product now runs
# the twin. That case at page 16 (set on, call 5) and, held out, at pages 64 and 1
# (profile_decode --configs product,... --flashinfer). (b) The same table key serves plans that
# assume one program per SM on shapes of several KV heads (FA3's persistent plan,
# ctas_per_sm 1): head_dim 256 bf16 page 16 (16 q / 8 KV heads), every (256, 2) candidate on
# FA3's plan (bench_kernels --sections shape-configs), the old entry bn32-w4-s4-pa and the new
# bn64-w8-s3-pa among them. Paced CUDA events, cold L2, checked against float64 first.
#   bash benchmarks/gpu_calls/s34_call6.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
for page in 16 64 1; do
  SWEEP_TIMEOUT_S=120 config_sweep 8/1/256 bf16 $page product,bn64-w8-s3-pa,bn64-w8-s2-pa \
    skew80:64:balanced
done
print_sweep
grep -o '"launch_config": "[^"]*"' $OUT/configs.jsonl
timeout 300 python3 benchmarks/bench_kernels.py --sections shape-configs --full --variants 64 \
  --sweep-cases uniform:64:fa3,skew80:64:fa3,skew80:8:fa3 --settle-s 0 --out $OUT/sc 2>&1 \
  | grep '^config\|suggested\|rror'

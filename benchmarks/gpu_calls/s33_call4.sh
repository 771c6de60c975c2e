#!/usr/bin/env bash
# Thirty-third session, call 4: the product with the -l2 fp8 head_dim-256 entries (commit of
# this script) on the matrix's fp8 head_dim-256 variants: page 16 (variant 70; calls 2-3 set the
# entries on 7 of its cases' plans or equivalents), page 64 (71) and page 1 (69), each case
# against FlashInfer 0.5.3 on the same plan in the same process (bench_kernels.py --sections
# shapes: paced CUDA events, cold L2, each output checked against float64 first). Then pages 2
# and 8 (outside the matrix) on uniform B=64 balanced-2x, the case that missed 1.4x there.
#   bash benchmarks/gpu_calls/s33_call4.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
matrix_run full-v70 110 --full --variants 70   # hd256 fp8 p16
matrix_run full-v71 100 --full --variants 71   # hd256 fp8 p64
matrix_run full-v69 100 --full --variants 69   # hd256 fp8 p1
for page in 2 8; do
  config_sweep hd256 fp8_e4m3 $page bn64-w4-s4-pa-vp,bn64-w4-s4-pa-vp-l2 uniform:64:balanced
done
print_sweep

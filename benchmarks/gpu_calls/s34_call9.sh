#!/usr/bin/env bash
# Thirty-fourth session, call 9 (issue 16): the fp8 head_dim-256 "one-per-sm" pair set in call 8
# (bn128-w8-s3-pa-vp with the capped twin bn128-w8-s2-pa-vp-r128, in SEVERAL_ROUNDS_TWIN; commit
# of this script) on the matrix of 2/1/256 (the shape call 8 set it on, 4 of its 12 cases) and,
# held out, 8/1/256, fp8 page 16. bench_kernels --sections shapes: paced CUDA events, cold L2,
# FlashInfer 0.5.3 on the same plan in the same process, checked against float64 first.
#   bash benchmarks/gpu_calls/s34_call9.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
matrix_run fp8_one_kv_256 150 --heads 2/1/256,8/1/256 --variants 1,3

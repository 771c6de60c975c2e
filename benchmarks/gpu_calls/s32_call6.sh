#!/usr/bin/env bash
# Thirty-second session, call 6 (H200): the paged-read ceiling beside the product's launch on
# the fp8 shape-matrix variants call 3 did not cover: llama3-8b p16, llama3-70b-tp8 p16 (one KV
# head), qwen2.5-7b p1 (G = 7), g16 p16, head_dim 64 p1, MHA 32/32 p16. bench_kernels
# --sections shapes --full --read-ceiling (FlashInfer 0.5.3's fp8 decode on the same plan;
# paced CUDA events, cold L2; the read: the plan's K/V bytes through the page table, no
# attention, best of four configurations, tasks in the product's launch order, each checked
# against float64 sums first).
#   bash benchmarks/gpu_calls/s32_call6.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
r=bn32-w4-s3,bn64-w4-s3,bn128-w4-s3,bn64-w4-s4
for v in 7 16 24 52 60 43; do
  matrix_run read-v$v 60 --full --variants $v --read-ceiling --read-configs $r
done

#!/usr/bin/env bash
# Thirty-fourth session, call 7 (issue 16): held-out shapes for the new head_dim-256 rules and
# the fp8 head_dim-256 entries: gemma-2-9b at tensor parallelism 8 and 4 (2/1/256: one KV
# head, G = 2; 4/2/256: two KV heads), bf16 and fp8 at page 16; then 8/1/256 fp16 page 16 again
# with the final rule (call 5 ran it before SEVERAL_ROUNDS_TWIN). bench_kernels --sections
# shapes: paced CUDA events, cold L2, FlashInfer 0.5.3 on the same plan in the same process,
# every kernel checked against float64 first.
#   bash benchmarks/gpu_calls/s34_call7.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
matrix_run heldout_gemma2_tp 260 --heads 2/1/256,4/2/256
matrix_run one_kv_256_fp16 120 --full --heads 8/1/256 --variants 4

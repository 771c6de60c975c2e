#!/usr/bin/env bash
# Thirty-fourth session, call 3 (issue 16): the matrix on shapes no rule of decode_config.py was
# set on (bench_kernels.py --heads, new this session): qwen2.5-14b 40/8/128 (G = 5),
# llama3-70b at tensor parallelism 4 16/2/128 (G = 8, two KV heads), gemma-2b 8/1/256 (one KV
# head at head_dim 256), gemma-7b 16/16/256 (MHA at head_dim 256), llama3.2-3b 24/8/128
# (G = 3), llama3-70b on one GPU 64/8/128; bf16 and fp8 KV at page 16; uniform and skew80,
# B = 8/64/256, fixed-2048 and balanced-2x, 262,144 tokens. Paced CUDA events, cold L2,
# FlashInfer 0.5.3 on the same plan in the same process, every kernel checked against float64.
#   bash benchmarks/gpu_calls/s34_call3.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
matrix_run heldout_heads 480 --heads 40/8/128,16/2/128,8/1/256,16/16/256,24/8/128,64/8/128

#!/usr/bin/env bash
# Ready for the next session with device time (H200; written in the thirty-first session, not
# run: its device time was spent): SHORT_TASK_TWIN narrowed after that session's call 8 (several
# KV heads only; tasks of one length up to 4,096 keys or of any lengths up to 2,048) on the
# held-out fp8 variants call 8 ran it on: qwen2.5-7b page 1 (G = 7), yi-6b page 16 (G = 8),
# llama3-70b-tp8 page 16 (one KV head: back to the entry's rules); and MHA 32/32 page 16 (G = 1,
# never timed with the rule). llama3-8b's launches are those of call 8. bench_kernels --sections
# shapes against FlashInfer 0.5.3's fp8 decode on the same plans (paced CUDA events, cold L2,
# checked against float64 first). The first process compiles FlashInfer.
#   bash benchmarks/gpu_calls/s32_call1.sh (ran as the thirty-second session call 1)
source benchmarks/gpu_calls/common.sh
kvtune_install
matrix_run full-v24 45 --full --variants 24   # qwen2.5-7b fp8 p1
matrix_run full-v34 25 --full --variants 34   # yi-6b fp8 p16
matrix_run full-v16 25 --full --variants 16   # llama3-70b-tp8 fp8 p16
matrix_run full-v43 40 --full --variants 43   # mha-32 fp8 p16

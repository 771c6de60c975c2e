#!/usr/bin/env bash
# Thirty-fourth session, call 5 (issue 16): the head_dim-256 "one-per-sm" entry is now
# bn64-w8-s3-pa with the shallow twin bn64-w8-s2-pa (commit of this script; call 4 set it on
# 8/1/256 bf16 page 16). (a) Both and the product's launch (`product`: twins and side split as
# prepare_decode picks them) on the plans of shorter tasks and the side-split case; (b) the
# matrix of the shape with the product: bf16 p16 (the cases call 4 set the entry on), and held
# out fp16 p16, bf16 p64 and bf16 p1. Paced CUDA events, cold L2, FlashInfer 0.5.3 on the same
# plan in the same process, every kernel checked against float64 first.
#   bash benchmarks/gpu_calls/s34_call5.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
SWEEP_TIMEOUT_S=160 config_sweep 8/1/256 bf16 16 bn64-w8-s3-pa,bn64-w8-s2-pa,product \
  skew80:64:balanced uniform:64:balanced skew80:256:balanced uniform:8:balanced \
  skew80:8:balanced skew80:64:2048
print_sweep
grep -o '"config": "product"[^}]*"launch_config": "[^"]*"' $OUT/configs.jsonl | grep -o '"launch_config": "[^"]*"'
matrix_run heldout_one_kv_256 300 --full --heads 8/1/256 --variants 1,4,2,0

#!/usr/bin/env bash
# Session 30, call 1 (H200): the two checks the twenty-ninth session left unrun. (1) The final
# longest-first twin rule on llama3-70b-tp8 matrix variants it was not set on
# (longest_first_heldout_check.sh: 196,608 tokens, page 1, fp16; bench_kernels --sections shapes
# against FlashInfer 0.5.3 on the same plans). (2) The hybrid steps' decode launch in the plan's
# order and longest first (hybrid_launch_order_check.sh: the 15 held-out batches with the shipped
# H200 file beside kvtune's serial step, two alternated rounds per case, 55 s per command).
#   bash benchmarks/gpu_calls/s30_call1.sh
bash benchmarks/gpu_calls/longest_first_heldout_check.sh
ROUNDS=2 LIMIT_S=55 bash benchmarks/gpu_calls/hybrid_launch_order_check.sh "$OUT" 2>&1 \
  | grep -v "^Looking\|WARNING"
date -u

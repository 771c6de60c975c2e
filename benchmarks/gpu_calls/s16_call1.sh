#!/usr/bin/env bash
# Session 16, call 1 (H100): the tail merge against the default chunked merge, alternated, then
# the llama3-70b-tp8 matrix variant with --merge tail against FlashInfer (same plan).
bash benchmarks/gpu_calls/merge_tail_ab.sh 200 3 2>&1 | tee $OUT/call1.log

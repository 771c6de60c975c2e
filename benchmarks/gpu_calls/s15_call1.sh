#!/usr/bin/env bash
# Session 15, call 1 (issue 16), on an H100: benchmarks/gpu_calls/merge_ab.sh as written in
# session 14: the product's merge against kernels/merge_chunked.py on six cases (many short splits,
# one request split ~100 ways, a mix), then the shape matrix's variants 1 (llama3-70b-tp8) and 5
# (G=16) with the chunked merge against FlashInfer with the same plan.
#   bash benchmarks/gpu_calls/s15_call1.sh [MATRIX_SECONDS]
bash "$(dirname "$0")/merge_ab.sh" "${1:-200}" 2>&1 | tee $OUT/merge_ab.log

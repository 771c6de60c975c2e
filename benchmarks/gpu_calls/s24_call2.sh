#!/usr/bin/env bash
# Session 24, call 2 (H100, same warm machine as call 1): call 1 had the capped twins faster
# on most cases; this times them over the rest of the shape matrix's cases. (1) llama3-8b fp8:
# the entry bn128-w4-s3-pa-vp, its caps -r168 and -r152, FlashInfer's fp8 decode on the same
# plan; (2) llama3-70b-tp8 fp8, the same; (3) llama3-70b-tp8 bf16: twin bn128-w8-s2-pa, -r80,
# deep entry bn128-w8-s3-pa on the matrix cases call 1 did not time. profile_decode.py
# --configs (matrix's paced timer, then 30 paced pairs; checked against float64 first).
#   bash benchmarks/gpu_calls/s24_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
FP8=bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-r168,bn128-w4-s3-pa-vp-r152
while read -r shape dist batch chunk; do
  timeout 80 python3 benchmarks/profile_decode.py --shape $shape --kv-dtype fp8_e4m3 \
    --dist $dist --batch $batch --chunk $chunk --flashinfer --configs $FP8 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/fp8_caps.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
llama3-8b uniform 8 balanced
llama3-8b uniform 64 balanced
llama3-8b uniform 256 balanced
llama3-8b uniform 8 2048
llama3-8b uniform 64 2048
llama3-8b uniform 256 2048
llama3-8b skew80 256 balanced
llama3-8b skew80 8 2048
llama3-8b skew80 64 2048
llama3-70b-tp8 uniform 8 balanced
llama3-70b-tp8 uniform 256 balanced
llama3-70b-tp8 skew80 64 balanced
llama3-70b-tp8 skew80 256 balanced
llama3-70b-tp8 uniform 64 2048
llama3-70b-tp8 skew80 256 2048
CASES
date -u
ONE=bn128-w8-s2-pa,bn128-w8-s2-pa-r80,bn128-w8-s3-pa
while read -r dist batch chunk; do
  timeout 60 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --dist $dist \
    --batch $batch --chunk $chunk --configs $ONE 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/capped.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
uniform 64 balanced
skew80 8 balanced
uniform 8 2048
uniform 64 2048
uniform 256 2048
skew80 8 2048
skew80 64 2048
skew80 256 2048
CASES
date -u

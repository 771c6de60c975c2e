#!/usr/bin/env bash
# Session 24, call 1 (H100): the two ready register-cap probes of session 23, one call.
# (1) benchmarks/gpu_calls/capped_twin_one_kv_head.sh: llama3-70b-tp8 bf16, the twin
#     bn128-w8-s2-pa against its 80-register cap -r80 (same bits, three programs per SM) and the
#     deep entry, four cases. (2) the first three cases of benchmarks/gpu_calls/
#     fp8_gap_configs.sh (llama3-8b fp8: skew80 B=8 and B=64 balanced-2x, skew80 B=256
#     fixed-2048), every head_dim-128 fp8 candidate plus -fl2 and the capped twin -r168, with
#     FlashInfer's fp8 decode on the same plan before and after. profile_decode.py --configs:
#     the matrix's paced timer, then 30 paced event pairs; every config checked against float64
#     first.
#   bash benchmarks/gpu_calls/s24_call1.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
ONE=bn128-w8-s2-pa,bn128-w8-s2-pa-r80,bn128-w8-s3-pa
while read -r dist batch chunk; do
  timeout 80 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --dist $dist \
    --batch $batch --chunk $chunk --configs $ONE 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/capped.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
skew80 64 balanced
skew80 256 balanced
uniform 256 balanced
uniform 8 balanced
CASES
date -u
FP8=bn128-w4-s3-pa-vp,bn128-w4-s4-pa-vp,bn64-w4-s4-pa-vp,bn64-w4-s3-pa-vp,bn128-w8-s3-pa-vp
FP8=$FP8,bn128-w8-s4-pa-vp,bn256-w8-s3-pa-vp,bn128-w4-s3-pa-vp-fl2,bn128-w4-s3-pa-vp-r168
while read -r shape dist batch chunk; do
  timeout 150 python3 benchmarks/profile_decode.py --shape $shape --kv-dtype fp8_e4m3 \
    --dist $dist --batch $batch --chunk $chunk --flashinfer --configs $FP8 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/fp8_gap.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
llama3-8b skew80 8 balanced
llama3-8b skew80 64 balanced
llama3-8b skew80 256 2048
CASES
date -u

#!/usr/bin/env bash
# Session 26, call 4 (H200): the one fp8 case of the twenty-fifth session's matrix below 1.4x
# FlashInfer's fp8 decode (MHA 32/32, uniform B=8 balanced-2x: 1.344x with the capped twin).
# Seven fp8 head_dim-128 configurations on it and on three neighbours (profile_decode.py: each
# checked against float64 first, FlashInfer's fp8 decode on the same plan as the baseline).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
C=bn128-w4-s3-pa-vp-r168,bn128-w4-s3-pa-vp,bn128-w4-s4-pa-vp,bn64-w4-s4-pa-vp,bn64-w4-s3-pa-vp,bn128-w8-s3-pa-vp,bn64-w8-s4-pa-vp
while read -r dist batch chunk; do
  timeout 80 python3 benchmarks/profile_decode.py --shape mha-32 --kv-dtype fp8_e4m3 \
    --dist $dist --batch $batch --chunk $chunk --configs $C --flashinfer 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/rows.jsonl | python3 benchmarks/profile_rows.py
  date -u
done <<'CASES'
uniform 8 balanced
uniform 8 2048
uniform 64 balanced
skew80 8 balanced
CASES

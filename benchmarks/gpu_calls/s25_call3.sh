#!/usr/bin/env bash
# Session 25, call 3 (NVIDIA H200): the configurations behind calls 1-2's misses of 0.95x
# FlashInfer (profile_decode.py --configs, the matrix's paced timer, FlashInfer on the same plan,
# 262,144 tokens; every configuration checked first). (1) llama3-8b page 64, all twelve matrix
# cases: LARGE_PAGE_TABLE's bn128-w8-s3-pa (set on the H100, 3 of 12 here) against the page-16
# entry, its twin and the other head_dim-128 tiles. (2) The page-16 misses: skew80 B=64 on
# llama3-8b, yi-6b, g16 and llama3-70b-tp8, hd64 uniform B=64 balanced-2x, hd256 skew80 B=64
# balanced-2x, MHA skew80 B=8 balanced-2x, each with its entry, twins and neighbours.
#   bash benchmarks/gpu_calls/s25_call3.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
P64=bn128-w8-s3-pa,bn64-w4-s4-pa,bn64-w4-s3-pa,bn128-w4-s2,bn128-w4-s3,bn128-w8-s2-pa,bn128-w8-s4-pa,bn64-w8-s4-pa
while read -r dist batch chunk; do
  timeout 60 python3 benchmarks/profile_decode.py --shape llama3-8b --page 64 --dist $dist \
    --batch $batch --chunk $chunk --configs $P64 --flashinfer 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/rows.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
uniform 8 2048
uniform 8 balanced
uniform 64 2048
uniform 64 balanced
uniform 256 2048
uniform 256 balanced
skew80 8 2048
skew80 8 balanced
skew80 64 2048
skew80 64 balanced
skew80 256 2048
skew80 256 balanced
CASES
date -u
H128=bn64-w4-s4-pa,bn64-w4-s3-pa,bn128-w8-s3-pa,bn128-w4-s2,bn128-w8-s2-pa,bn64-w8-s4-pa
while read -r shape dist batch chunk configs; do
  timeout 60 python3 benchmarks/profile_decode.py --shape $shape --dist $dist \
    --batch $batch --chunk $chunk --configs $configs --flashinfer 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/rows.jsonl | python3 benchmarks/profile_rows.py
done <<CASES
llama3-8b skew80 64 balanced $H128
llama3-8b skew80 64 2048 $H128
yi-6b skew80 64 2048 $H128
g16 skew80 64 2048 $H128
g16 skew80 64 balanced $H128
llama3-70b-tp8 skew80 64 2048 bn128-w8-s3-pa,bn128-w8-s2-pa,bn128-w8-s2-pa-r80,bn128-w8-s4-pa,bn64-w4-s4-pa
hd64 uniform 64 balanced bn128-w4-s3-pa,bn128-w4-s4-pa,bn128-w4-s2,bn256-w8-s2,bn256-w8-s3-pa
hd256 skew80 64 balanced bn64-w4-s2,bn64-w4-s2-r168,bn32-w4-s3-pa,bn32-w4-s4-pa,bn64-w8-s3-pa
mha-32 skew80 8 balanced $H128
CASES
date -u

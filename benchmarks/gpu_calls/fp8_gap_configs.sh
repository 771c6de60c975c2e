#!/usr/bin/env bash
# Ready for a GPU call on an H100 (written in session 23, not yet run): issue 16's fp8 cases
# where the Triton kernel is furthest from the paged read of its own plan (s23 call 6:
# llama3-8b fp8 skew80 B=8 balanced-2x at 0.775 of the read, 1.376x FlashInfer's fp8 decode;
# 1.4x needs 0.789 of it) and the next two that 1.4x could still reach (skew80 B=64
# balanced-2x: needs 0.971 of the read, at 0.927; skew80 B=256 fixed-2048: needs 0.940, at
# 0.915); and llama3-70b-tp8 fp8 uniform B=8 balanced-2x, its one case below 1.4x (1.344).
# Every head_dim-128 fp8 candidate of kernels/decode_config.CANDIDATES, the flattened loop and
# the entry's register-capped twin -r168 (same bits; local sm_90 compile: 168 registers, no
# spill, 73.7 KB, so three programs per SM where the entry fits two: 272 tasks would then run in
# one round instead of 264 + 8; with it in ONE_WAVE_TWIN the rule would switch exactly four
# matrix launches, computed on the CPU: skew80 B=8 balanced-2x of llama3-8b fp8 and skew80 B=64
# balanced-2x of llama3-70b-tp8 fp8, both at 262,144 and 196,608 tokens, in-order finish
# 1.65-1.69 longest tasks), checked against float64 first, FlashInfer's fp8 decode on the
# same plan before and after (profile_decode.py --configs --flashinfer: the matrix's paced
# timer, then 30 paced pairs).
#   bash benchmarks/gpu_calls/fp8_gap_configs.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
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
llama3-70b-tp8 uniform 8 balanced
llama3-70b-tp8 skew80 64 balanced
CASES
date -u

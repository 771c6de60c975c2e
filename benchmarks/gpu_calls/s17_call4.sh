#!/usr/bin/env bash
# Session 17, call 4 (H100): head_dim 256 (16 q / 8 KV heads), the entry bn64-w4-s2 against its
# 168-register twin bn64-w4-s2-r168 (same bits, three programs per SM) on every matrix case at
# 262,144 tokens not run in call 3, and on all twelve at 196,608 tokens (cases that no rule has
# been fitted on), to choose where the twin may run.
#   bash benchmarks/gpu_calls/s17_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
while read -r tokens dist batch chunk; do
  timeout 60 python3 benchmarks/profile_decode.py --shape hd256 --dist $dist --batch $batch \
    --chunk $chunk --total-tokens $tokens --configs bn64-w4-s2,bn64-w4-s2-r168 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/hd256.jsonl
done <<'CASES'
262144 uniform 8 2048
262144 uniform 256 2048
262144 uniform 64 balanced
262144 uniform 256 balanced
262144 skew80 8 2048
262144 skew80 64 2048
262144 skew80 256 2048
262144 skew80 256 balanced
196608 uniform 8 2048
196608 uniform 8 balanced
196608 uniform 64 2048
196608 uniform 64 balanced
196608 uniform 256 2048
196608 uniform 256 balanced
196608 skew80 8 2048
196608 skew80 8 balanced
196608 skew80 64 2048
196608 skew80 64 balanced
196608 skew80 256 2048
196608 skew80 256 balanced
CASES
date -u

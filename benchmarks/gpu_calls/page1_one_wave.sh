#!/usr/bin/env bash
# Ready for a GPU call (written in session 17, not yet run): page 1 (SGLang's token pages), the
# matrix's one remaining 16-bit miss (llama3-8b uniform B=64 balanced-2x, 0.949 of FlashInfer:
# 512 programs on three per SM, a second wave 29% full). Same-bits alternatives of the
# page-1 entry bn128-w4-s2 (168 registers, 74 KB shared: 3 per SM): bn128-w4-s1 (41 KB, no
# pipelining), bn128-w4-s1-r128 (four per SM if ptxas holds 128 registers: one wave), and
# bn128-w4-s3; FlashInfer on the same plan; the matrix cases with about 2-4 programs per SM.
# If one wins where the launch spills into a second wave and loses elsewhere, it is a
# decode_config.ONE_WAVE_TWIN candidate (then time the rule over the page-1 matrix variant 10
# at 262,144 and 196,608 tokens).
#   bash benchmarks/gpu_calls/page1_one_wave.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
while read -r dist batch chunk; do
  timeout 90 python3 benchmarks/profile_decode.py --shape llama3-8b --page 1 --dist $dist \
    --batch $batch --chunk $chunk --flashinfer \
    --configs bn128-w4-s2,bn128-w4-s1,bn128-w4-s1-r128,bn128-w4-s3 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/page1.jsonl
done <<'CASES'
uniform 64 balanced
uniform 8 balanced
skew80 8 balanced
skew80 64 balanced
uniform 64 2048
CASES
date -u

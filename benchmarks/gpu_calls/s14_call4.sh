#!/usr/bin/env bash
# Session 14, call 4 (issue 16), on an H100: the merge at 2 warps with a 16-row block (and a
# two-stage pipeline over the blocks) instead of 4 warps and 64 rows.
# 1. profile_decode.py --time --split-cost: stage 1 alone, the product's merge alone, and the merge
#    before this change (64 rows, 4 warps, 1 stage) and two other settings in the same process,
#    each checked against the product's merge; llama3-70b-tp8 uniform B=256 balanced-2x (bf16,
#    fp8), and two skew80 B=8 fixed-2048 cases whose long request is split 80-100 ways.
# 2. the shape matrix's llama3-70b-tp8 variants (1: bf16, 12: fp8 KV) against FlashInfer with the
#    same plan, as in call 2.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
P="python3 benchmarks/profile_decode.py --time --split-cost"
timeout 40 $P --shape llama3-70b-tp8 --dist uniform --batch 256 --chunk balanced --config bn128-w8-s2-pa 2>&1 | grep '^{\|Error'
timeout 40 $P --shape llama3-70b-tp8 --kv-dtype fp8_e4m3 --dist uniform --batch 256 --chunk balanced --config bn128-w4-s3-pa-vp 2>&1 | grep '^{\|Error'
timeout 40 $P --shape llama3-70b-tp8 --dist skew80 --batch 8 --chunk 2048 --config bn128-w8-s2-pa 2>&1 | grep '^{\|Error'
timeout 40 $P --shape llama3-8b --dist skew80 --batch 8 --chunk 2048 --config bn64-w4-s3-pa 2>&1 | grep '^{\|Error'
date -u
timeout ${1:-190} python3 benchmarks/bench_kernels.py --sections env,copy,shapes \
  --variants ${2:-1,12} --settle-s 0 --time-limit-s $(( ${1:-190} - 20 )) \
  --out $OUT/shapes 2>&1 | grep -v Warning | tail -30
echo "rc ${PIPESTATUS[0]}"
date -u

#!/usr/bin/env bash
# Session 17, call 6 (H100): the configuration sweep (every head_dim-128 16-bit candidate) on
# llama3-8b with pages of 64 tokens (call 2's matrix: skew80 B=8 and B=64 balanced-2x at 0.929
# and 0.941 of FlashInfer, which runs pages of 64 faster than pages of 16) and of 1 token
# (uniform B=64 balanced-2x 0.949), on those cases and two where the entries reach FlashInfer.
#   bash benchmarks/gpu_calls/s17_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 330 python3 benchmarks/bench_kernels.py --sections copy,shape-configs --variants 11,10 \
  --sweep-cases skew80:8:balanced-2x,skew80:64:balanced-2x,uniform:64:balanced-2x,uniform:64:fixed-2048 \
  --settle-s 0 --time-limit-s 310 --out $OUT/sweep 2>&1 | grep -v Warning | tail -60
rm -f $OUT/sweep/results.json
date -u

#!/usr/bin/env bash
# Session 19, call 8 (H100): the product path with the Gluon prefill tile as the default:
# `kvtune bench` on hybrid batches with the triton backend (its correctness gate checks every
# row against the float64 reference before timing), bf16 and an fp8 cache (16-bit prefill copy).
#   bash benchmarks/gpu_calls/s19_call8.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 150 python3 -m kvtune bench --distribution hybrid --param chunk_tokens=2048 \
  --batch-sizes 16,64 --policies hybrid-serial,hybrid-streams,pod --backend triton \
  --out $OUT/r 2>&1 | tail -12
timeout 100 python3 -m kvtune bench --distribution hybrid --param chunk_tokens=2048 \
  --batch-sizes 16 --policies hybrid-serial --backend triton --kv-dtype fp8_e4m3 \
  --out $OUT/r8 2>&1 | tail -5
date -u

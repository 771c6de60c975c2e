#!/usr/bin/env bash
# Session 14, call 2 (issue 16): the shape matrix on an H100, the first time on this card; the
# config table and the twin rule were set on H200 rows only, so every case here is held out from
# them. Variants 0 (llama3-8b), 1 (llama3-70b-tp8), 5 (64q/4kv, G=16), 9 (llama3-8b fp8 KV),
# 12 (llama3-70b-tp8 fp8 KV), 4 (MHA 32/32), 2 (qwen2.5-7b), in that order: uniform and skew80 x
# B = 8, 64, 256 x fixed-2048 and balanced-2x, 262,144 tokens. Triton against FlashInfer's
# tensor-core decode with the same plan, same process (bench_kernels: CUDA events, cold L2, the
# latency-probe guard), every case checked against the float64 reference first.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${1:-560} python3 benchmarks/bench_kernels.py --sections env,copy,shapes \
  --variants ${2:-0,1,5,9,12,4,2} --settle-s 20 --time-limit-s $(( ${1:-560} - 60 )) \
  --out $OUT/shapes 2>&1 | grep -v Warning | tail -60
echo "rc ${PIPESTATUS[0]}"
date -u

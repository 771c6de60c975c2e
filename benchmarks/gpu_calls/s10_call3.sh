#!/usr/bin/env bash
# Session 10, call 3 (issue 16), fp8 e4m3 KV with V read as element pairs (-vp):
# 1. the shape matrix's fp8 variants (9 llama3-8b, 12 llama3-70b-tp8) with the table set from
#    call 1's sweep (bn128-w4-s3-pa-vp at head_dim 128, both regimes) against FlashInfer's fp8
#    decode with the same plan, same process (bench_kernels: CUDA events, cold L2, guard);
# 2. the fp8 heuristic tuned again on the faster kernel and judged on cases it was not tuned on:
#    generalise_gpu.sh direction b (tune on prod-mix fp8, validate and bench on traces fp8),
#    Triton, CUDA-graph replays, FlashInfer's own fp8 planner and the chunk grid as baselines
#    (fifth session call 7 ran the same with the plain fp8 kernel).
# Run on the device machine from the repository root, with .whl/ (carry [".whl"]); writes $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 150 python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 9,12 \
  --settle-s 20 --time-limit-s 120 --out $OUT/shapes 2>&1 | tail -32
date -u
GENERALISE_KV_DTYPE=fp8_e4m3 GENERALISE_TIMER=graph GENERALISE_DIRECTIONS=b \
  timeout 400 bash benchmarks/generalise_gpu.sh $OUT/gen triton > /dev/null 2>&1
echo "generalise rc $?"
grep -v Warning $OUT/gen/generalise.log | grep -E "^==|bucket|ships|defer|x vs|target|\|" | tail -40
cat $OUT/gen/table.md 2>/dev/null | tail -30
date -u

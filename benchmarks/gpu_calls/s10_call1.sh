#!/usr/bin/env bash
# Session 10, call 1 (issue 16): fp8 V read as int16 element pairs (-vp, KernelConfig.v_pairs).
# 1. check (fp8 only): every fp8 case with the table's configuration (now -vp), the plain loop and
#    -vw against the float64 reference of the dequantised cache; batch invariance; the query range.
#    The first hardware run of the -vp inline asm (prmt byte order, pack=2 operand order).
# 2. shape-configs (fp8 only): every CANDIDATES entry of (64|128|256, 1 byte) on the fp8 sweep
#    cases, the previous plain table entries included as the same-call baseline.
# 3. shapes, variants 9 (llama3-8b fp8) and 12 (llama3-70b-tp8 fp8): the table (now -vp) against
#    FlashInfer's fp8 tensor-core decode with the same plan, same process.
# Timer: CUDA events, cold L2, bench_kernels' stopping rule, under the latency-probe guard.
# Run on the device machine from the repository root, with .whl/ (carry [".whl"]); writes $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
git log -1 --format=%h 2>/dev/null
timeout 330 python3 benchmarks/bench_kernels.py --sections env,copy,check,shape-configs \
  --config-kv fp8 --settle-s 30 --time-limit-s 280 --out $OUT/sweep 2>&1 \
  | grep -E "copy:|settle|FAILED|check:|^config|suggested|section|limit|Error|error" | head -150
date -u
timeout 230 python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 9,12 \
  --settle-s 0 --time-limit-s 200 --out $OUT/shapes 2>&1 | tail -60
date -u

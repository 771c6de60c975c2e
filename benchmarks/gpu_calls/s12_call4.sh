#!/usr/bin/env bash
# Session 12, call 4 (issue 15): the colocated step launched in order (one stream, programmatic
# dependent launch: HybridConfig.ordered_launch, commit below) against the same step on two
# streams, beside kvtune's serial step and the shipped hybrid file, on the hybrid suite's first
# 36 sweep cases (context 4K and 8K), three interleaved rounds per case
# (benchmarks/bench_colocated_order.py). Timer: CUDA-event pairs, cold L2; every variant checked
# against the float64 reference first.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${1:-330} python3 benchmarks/bench_colocated_order.py --max-cases 36 --rounds 3 \
  --heuristic benchmarks/gpu_calls/s11_hybrid_heuristic.json --budget-s $(( ${1:-330} - 50 )) \
  --out $OUT/co 2>&1 | grep -v Warning | grep -v "^\[" | tail -45 | cut -c1-300
echo "rc ${PIPESTATUS[0]}"
date -u

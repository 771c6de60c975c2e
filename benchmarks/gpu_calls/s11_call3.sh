#!/usr/bin/env bash
# Session 11, calls 3 and 4 (issue 16): the fp8 heuristic tuned on the -vp kernel over two
# device calls (benchmarks/gpu_calls/s11_fp8_tune.sh: a new study in call 3, the same command
# with --resume in call 4 once results/s11/fp8 is carried back), then exported and benched on
# traces fp8 beside FlashInfer's fp8 planner and the chunk grid.
#   bash benchmarks/gpu_calls/s11_call3.sh TUNE_LIMIT_S BENCH_LIMIT_S
# Run on the device machine from the repository root, with .whl/ (and results/s11 in call 4).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
bash benchmarks/gpu_calls/s11_fp8_tune.sh results/s11/fp8 "${1:-520}" "${2:-0}"
python3 benchmarks/gpu_calls/s11_guard_summary.py results/s11/fp8/tune 2>&1 | cut -c1-300
date -u
cd results/s11 && tar czf $OUT/fp8.tgz fp8

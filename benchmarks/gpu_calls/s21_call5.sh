#!/usr/bin/env bash
# Session 21, call 5 (H100): the file of call 4 (s21_hybrid_heuristic_h100_fallback.json: the
# split file plus two buckets shipped by their serial fallback) on the 15 batches no suite holds,
# beside kvtune's serial step and the twentieth session's split file in the same processes.
#   bash benchmarks/gpu_calls/s21_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
bash benchmarks/gpu_calls/hybrid_held_out.sh \
  benchmarks/gpu_calls/s21_hybrid_heuristic_h100_fallback.json $OUT 150 \
  hybrid-tuned:path=benchmarks/gpu_calls/s20_hybrid_heuristic_h100_split.json
date -u

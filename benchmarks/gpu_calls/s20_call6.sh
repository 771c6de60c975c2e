#!/usr/bin/env bash
# Session 20, call 6 (H100): the re-validated H100 file with its failing bucket split at 2048 prefill
# tokens (s20_hybrid_heuristic_h100_split.json, benchmarks/split_revalidated.py) on the
# 15 held-out batches of benchmarks/gpu_calls/hybrid_held_out.sh, with the colocated policy
# beside them; `kvtune bench` (CUDA events, cold L2, one guard retry), every row checked against
# the float64 reference before it is timed.
#   bash benchmarks/gpu_calls/s20_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
# The same kvtune bench commands as the call ran at its commit (docs/PERFORMANCE.md), now
# through hybrid_held_out.sh.
file=benchmarks/gpu_calls/s20_hybrid_heuristic_h100_split.json
bash benchmarks/gpu_calls/hybrid_held_out.sh $file $OUT 150 hybrid-colocated
cd $OUT && tar czf bench.tgz bench && rm -rf bench
date -u

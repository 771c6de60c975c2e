#!/usr/bin/env bash
# Session 13, call 8 (issue 15): call 7's sweep part on the 17 cases its time budget left
# (skip 55): serial, colocated on two streams and in order, the H100 hybrid file. Same timer.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
cd benchmarks && timeout ${1:-200} python3 bench_colocated_order.py --skip-cases 55 --max-cases 17 \
  --rounds 2 --heuristic gpu_calls/s13_hybrid_heuristic_h100.json --budget-s $(( ${1:-200} - 40 )) \
  --out $OUT/co 2>&1 | grep -v Warning | grep -v '^  check' | cut -c1-300 | tail -24
date -u

#!/usr/bin/env bash
# Session 14, call 1 (issue 15): does a persistent prefill grid smaller than one program per SM
# help the colocated step where the decodes weigh more? bench_colocated_order.py --shares: for the
# paper sweep's 4K and 8K cases (0-35), serial, two streams, ordered (one persistent prefill
# program per SM, the default) and ordered with 0.75 / 0.5 / 0.25 x SMs persistent prefill
# programs (the tail stays one per SM); every variant checked against the float64 reference,
# then 5 CUDA-graph replays checked bitwise, then two interleaved timing rounds.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
cd benchmarks
timeout ${1:-540} python3 bench_colocated_order.py --skip-cases ${2:-0} --max-cases ${3:-36} \
  --rounds 2 --replays 5 --shares 0.75,0.5,0.25 \
  --budget-s $(( ${1:-540} - 90 )) --out $OUT/co 2>&1 | grep -v Warning | grep -v '^  check\|^  replay ' \
  | cut -c1-300 | tail -100
echo "rc co ${PIPESTATUS[0]}"
date -u

#!/usr/bin/env bash
# Session 13, call 3 (issue 15): the rest of the paper sweep (cases 13-72: 4K with 1024/2048-token
# chunks, 8K, 16K, 20K) through bench_colocated_order.py: serial (decodes through decode.py),
# colocated on two streams, colocated in order (the default since this
# session's second commit), and the shipped hybrid file (tuned on an H200 in session 11); every
# variant checked against the float64 reference, then 30 CUDA-graph replays checked bitwise,
# then two interleaved timing rounds. Every log line kept.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
cd benchmarks
timeout ${1:-520} python3 bench_colocated_order.py --skip-cases ${2:-12} --max-cases ${3:-60} \
  --rounds 2 --replays 30 --heuristic gpu_calls/s11_hybrid_heuristic.json \
  --budget-s $(( ${1:-520} - 80 )) --out $OUT/co 2>&1 | grep -v Warning | grep -v '^  check\|^  replay ' \
  | cut -c1-300 | tail -90
echo "rc co ${PIPESTATUS[0]}"
date -u

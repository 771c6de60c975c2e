#!/usr/bin/env bash
# Session 20, call 2 (H100): the Gluon persistent prefill grid of the colocated schedule
# (ordered-wg64s3) against the Triton grid (ordered), serial and the H100 tuned file, on the
# sweep's 2048-token chunks at 4K context (cases 12-17) and on 16K context (cases 36-53),
# rounds interleaved; the first part's variants replayed twice before timing.
#   bash benchmarks/gpu_calls/s20_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
H=benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json
timeout 200 python3 benchmarks/bench_colocated_order.py --skip-cases 12 --max-cases 6 \
  --rounds 2 --replays 2 --no-two-streams --colocated-wgmma 64:3 --heuristic $H \
  --budget-s 150 --out $OUT/a 2>&1 | grep -v "Warning\|  check\|  replay" | grep "^\[\|summary\|cases" | tail -10
timeout 330 python3 benchmarks/bench_colocated_order.py --skip-cases 36 --max-cases 18 \
  --rounds 2 --no-two-streams --colocated-wgmma 64:3 --heuristic $H \
  --budget-s 270 --out $OUT/b 2>&1 | grep -v "Warning\|  check\|  replay" | grep "^\[\|cases" | tail -20
date -u

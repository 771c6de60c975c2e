#!/usr/bin/env bash
# Session 20, call 1 (H100): the colocated schedule's persistent prefill grid through the Gluon
# tile (HybridConfig.colocated_wgmma, kernels/prefill_wgmma.py PERSISTENT):
# 1. prefill_wgmma_check.py --policy hybrid-colocated: Gluon persistent grid vs the Triton grid
#    vs float64 on 13 batches, counters back to zero after each step;
# 2. bench_colocated_order.py on the 4K-context sweep (cases 0-17): serial, ordered (Triton
#    grid), ordered-wg64s2 / -wg64s3 / -wg128s2 (Gluon grid), the H100 tuned file; CUDA graph
#    replays (bit for bit, counters zero) before timing.
#   bash benchmarks/gpu_calls/s20_call1.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 150 python3 benchmarks/prefill_wgmma_check.py --policy hybrid-colocated --block-n 64 \
  --stages 2 --out $OUT/check 2>&1 | grep -v Warning | tail -15
timeout 400 python3 benchmarks/bench_colocated_order.py --max-cases 18 --rounds 3 --replays 5 \
  --colocated-wgmma 64:2,64:3,128:2 \
  --heuristic benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json --budget-s 330 \
  --out $OUT/co 2>&1 | grep -v "Warning\|  check\|  replay" | tail -45
date -u

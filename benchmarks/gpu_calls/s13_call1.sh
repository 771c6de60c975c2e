#!/usr/bin/env bash
# Session 13, call 1 (issues 15, 16): (a) fp8 hybrid steps with single-token decodes through
# kernels/decode.py (commit 73208f6) against the same steps with the hybrid kernel's decode items
# (-items), bf16 beside; (b) the colocated step in launch order (the version whose tail leaves
# last), its CUDA-graph replays checked bitwise with NaN-filled scratch, beside two streams and
# serial, with the shipped hybrid file. Every log line kept.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
cd benchmarks
timeout ${1:-230} python3 bench_hybrid_fp8.py --budget-s $(( ${1:-230} - 60 )) --out $OUT/fp8 2>&1 | grep -v Warning | cut -c1-300 | tail -60
echo "rc fp8 ${PIPESTATUS[0]}"
date -u
timeout ${2:-280} python3 bench_colocated_order.py --max-cases ${3:-12} --rounds 2 --replays 100 \
  --heuristic gpu_calls/s11_hybrid_heuristic.json --budget-s $(( ${2:-280} - 70 )) --out $OUT/co 2>&1 \
  | grep -v Warning | cut -c1-300 | tail -120
echo "rc co ${PIPESTATUS[0]}"
date -u

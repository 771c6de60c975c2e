#!/usr/bin/env bash
# Session 21, call 2 (H100): the colocated step with its decodes through kernels/decode.py in
# configurations small enough for two decode programs beside each persistent prefill program
# (bench_colocated_order.py --decode-kernel, new), on the 4K-context sweep (cases 0-17):
# serial, ordered (hybrid decode items), ordered-dk-L for decode.py's default bn64-w4-s4-pa
# (104 KB: one fits beside the 112 KB prefill tile) and bn32-w4-s4-pa / bn64-w4-s2-pa /
# bn32-w4-s3-pa (38-54 KB), and two with the Gluon 64x64x2 prefill grid (82 KB).
#   bash benchmarks/gpu_calls/s21_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 520 python3 benchmarks/bench_colocated_order.py --max-cases ${MAX_CASES:-18} \
  --skip-cases ${SKIP_CASES:-0} --rounds 2 --no-two-streams --budget-s ${BUDGET_S:-420} \
  --decode-kernel bn64-w4-s4-pa,bn32-w4-s4-pa,bn64-w4-s2-pa,bn32-w4-s3-pa,bn32-w4-s4-pa+wg64:2,bn64-w4-s3-pa+wg64:2 \
  --out $OUT/co 2>&1 | grep -v "Warning\|  check\|  replay" | sed -n '/Persistent prefill share/,$p' | cut -c1-400
date -u

#!/usr/bin/env bash
# Session 21, call 6 (H100): issue 15's targets over the whole `hybrid` suite (124 cases: the
# paper's sweep, both halves of every sweep case for the bound, the continuous-batching mixes)
# with the README's H100 file (s21_hybrid_heuristic_h100_fallback.json) beside kvtune's serial
# step in one process. Timer: CUDA events, cold L2, one interference retry.
#   bash benchmarks/gpu_calls/s21_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-520} python3 -m kvtune bench --suite hybrid --backend triton --timer events \
  --policies hybrid-serial,hybrid-tuned:path=benchmarks/gpu_calls/s21_hybrid_heuristic_h100_fallback.json \
  --stopping quiet_retries=1 --no-progress --out $OUT/bench 2>&1 | grep -v Warning \
  | sed -n '/hybrid sweep/,$p' | cut -c1-300
date -u

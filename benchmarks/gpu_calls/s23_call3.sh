#!/usr/bin/env bash
# Session 23, call 3 (H100): issue 15's targets with the paced events timer. (1) The whole
# `hybrid` suite (124 cases) with the README's H100 file beside kvtune's serial step, as
# s21_call6.sh; (2) `kvtune tune --revalidate` of the same file with --serial-fallback: the
# buckets that deferred on unpaced timings measured again.
# Timer: the product's CUDA events (paced), cold L2, one interference retry.
#   bash benchmarks/gpu_calls/s23_call3.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
FILE=benchmarks/gpu_calls/s21_hybrid_heuristic_h100_fallback.json
timeout ${LIMIT_S:-330} python3 -m kvtune bench --suite hybrid --backend triton --timer events \
  --policies hybrid-serial,hybrid-tuned:path=$FILE \
  --stopping quiet_retries=1 --no-progress --out $OUT/bench 2>&1 | grep -v Warning \
  | sed -n '/hybrid sweep/,$p' | cut -c1-300
date -u

#!/usr/bin/env bash
# Session 30, call 4 (H200): the whole hybrid suite with call 3's file
# (benchmarks/gpu_calls/s30_hybrid_heuristic_h200_longest_first.json: six serial fallbacks whose
# decodes follow the makespan rule, decodes launched longest first) beside kvtune's serial step
# (its decodes longest first too), two alternated rounds, as s28 call 2 ran the file it replaces. Timer: the product's CUDA events (paced), cold L2, one interference retry.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-560} python3 -m kvtune bench --suite hybrid --backend triton --timer events \
  --rounds 2 --stopping quiet_retries=1 --no-progress --out /tmp/m2 \
  --policies hybrid-serial,hybrid-tuned:path=benchmarks/gpu_calls/s30_hybrid_heuristic_h200_longest_first.json \
  2>&1 | grep -v Warning | tail -14 | cut -c1-300
tar -C /tmp/m2 -czf $OUT/call2.tgz .
date -u

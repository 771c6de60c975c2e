#!/usr/bin/env bash
# Session 27, call 3 (H200): the whole hybrid suite (124 cases) with call 1's H200 file beside
# kvtune's serial step, two alternated rounds per case (kvtune bench --rounds 2). Timer: the
# product's CUDA events (paced), cold L2, one interference retry.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-540} python3 -m kvtune bench --suite hybrid --backend triton --timer events \
  --rounds 2 --stopping quiet_retries=1 --no-progress --out /tmp/m3 \
  --policies hybrid-serial,hybrid-tuned:path=benchmarks/gpu_calls/s27_hybrid_heuristic_h200_fallback.json \
  2>&1 | grep -v Warning | tail -30 | cut -c1-300
tar -C /tmp/m3 -czf $OUT/call3.tgz .
date -u

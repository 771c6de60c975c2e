#!/usr/bin/env bash
# Session 27, call 5 (H200): call 3 again with call 4's file (the H200 file re-validated on
# hybrid-holdout and the hybrid suite, at least four cases per shipped bucket; it replaces call
# 1's file under the same name): the whole hybrid suite beside kvtune's serial step, two
# alternated rounds. Timer: the product's CUDA events (paced), cold L2, one interference retry.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-540} python3 -m kvtune bench --suite hybrid --backend triton --timer events \
  --rounds 2 --stopping quiet_retries=1 --no-progress --out /tmp/m5 \
  --policies hybrid-serial,hybrid-tuned:path=benchmarks/gpu_calls/s27_hybrid_heuristic_h200_fallback.json \
  2>&1 | grep -v Warning | tail -14 | cut -c1-300
tar -C /tmp/m5 -czf $OUT/call5.tgz .
date -u

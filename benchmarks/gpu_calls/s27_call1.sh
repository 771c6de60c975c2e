#!/usr/bin/env bash
# Session 27, call 1 (H200): the H200 hybrid file (twenty-first session's re-validation of the
# eleventh session's tune) measured again against today's serial step, with the serial fallback
# the H200 never ran (each deferred bucket, or failing half, measured once more as a serial step
# with its own decode split) and --split-failing; cases of the hybrid-holdout suite in each
# bucket, two interleaved rounds. Timer: kvtune tune's (CUDA events, paced, cold L2, one
# interference retry).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-530} python3 -m kvtune tune --study s27-h200 \
  --revalidate benchmarks/gpu_calls/s21_hybrid_heuristic_h200_revalidated.json \
  --validate hybrid-holdout --split-failing --serial-fallback --backend triton --timer events \
  --stopping quiet_retries=1 --finalist-rounds 2 --no-progress --out /tmp/rv 2>&1 \
  | grep -v Warning | tail -40 | cut -c1-400
for f in /tmp/rv/*/hybrid_heuristic.json /tmp/rv/*/hybrid_heuristic.partial.json; do
  [ -f "$f" ] && cp "$f" $OUT/ && echo "copied $f"; done
tar -C /tmp/rv -czf $OUT/rv.tgz . 2>/dev/null
date -u

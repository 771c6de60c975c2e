#!/usr/bin/env bash
# Session 23, call 4 (H100): `kvtune tune --revalidate --serial-fallback` on the README's H100
# hybrid file (s21 fallback) with the paced events timer: every bucket with recorded cases
# measured again against kvtune's serial step (two interleaved rounds), a deferred bucket as a
# serial step with its own decode split knobs; the tune's ship-or-defer rule. The new file goes
# to $OUT.
#   bash benchmarks/gpu_calls/s23_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-540} python3 -m kvtune tune --study s23-revalidate \
  --revalidate benchmarks/gpu_calls/s21_hybrid_heuristic_h100_fallback.json --serial-fallback \
  --backend triton --timer events --stopping quiet_retries=1 \
  --finalist-rounds 2 --no-progress --out /tmp/rv 2>&1 | grep -v Warning | tail -30
for f in /tmp/rv/*/hybrid_heuristic.json /tmp/rv/*/hybrid_heuristic.partial.json; do
  [ -f "$f" ] && cp "$f" $OUT/ && echo "copied $f"; done
date -u

#!/usr/bin/env bash
# Session 21, call 7 (H200 if one comes; the revalidation refuses any other card): the eleventh
# session's H200 hybrid file, validated before the serial step's prefill ran the Gluon tile,
# re-validated against today's serial step on its shipped buckets' hybrid-holdout cases (20),
# two interleaved rounds, failing buckets split once (--split-failing). The new file goes to $OUT.
#   bash benchmarks/gpu_calls/s21_call7.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-230} python3 -m kvtune tune --study s21-h200 \
  --revalidate benchmarks/gpu_calls/s11_hybrid_heuristic.json --validate hybrid-holdout \
  --split-failing --backend triton --timer events --stopping quiet_retries=1 \
  --finalist-rounds 2 --no-progress --out /tmp/rv 2>&1 | grep -v Warning | tail -20 | cut -c1-400
for f in /tmp/rv/*/hybrid_heuristic.json /tmp/rv/*/hybrid_heuristic.partial.json; do
  [ -f "$f" ] && cp "$f" $OUT/ && echo "copied $f"; done
date -u

#!/usr/bin/env bash
# Session 21, call 4 (H100): `kvtune tune --revalidate --serial-fallback --keep-shipped` on the
# twentieth session's split file (the README's H100 file): its two shipped buckets kept as they
# are (re-validated with today's kernels in the twentieth session), each deferred bucket measured
# as a serial step with its own decode split knobs against kvtune's serial step on the cases its
# last validation measured (two interleaved rounds). The new file goes to $OUT.
#   bash benchmarks/gpu_calls/s21_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-560} python3 -m kvtune tune --study s21-fallback \
  --revalidate benchmarks/gpu_calls/s20_hybrid_heuristic_h100_split.json --serial-fallback \
  --keep-shipped --backend triton --timer events --stopping quiet_retries=1 \
  --finalist-rounds 2 --no-progress --out /tmp/rv 2>&1 | grep -v Warning | tail -25
for f in /tmp/rv/*/hybrid_heuristic.json /tmp/rv/*/hybrid_heuristic.partial.json; do
  [ -f "$f" ] && cp "$f" $OUT/ && echo "copied $f"; done
date -u

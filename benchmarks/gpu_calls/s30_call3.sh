#!/usr/bin/env bash
# Session 30, call 3 (H200): call 2's re-validation (hybrid decodes longest first) ran out of
# its 330 s after five of its eight decisions; its partial file
# (s30_hybrid_heuristic_h200_partial.json: two serial fallbacks shipped, the colocated bucket
# and the 1-16-decode fallbacks deferred) goes on with --keep-shipped (its shipped buckets as
# call 2 measured them) and --serial-fallback (every deferred bucket's fallback measured, the
# four call 2 did not reach and the two 1-16-decode ones again), on the same validation cases.
# Then the file it writes on the 15 hybrid batches no suite holds, two alternated rounds.
# Timers: kvtune tune's and kvtune bench's CUDA events (paced), cold L2, one interference retry.
#   bash benchmarks/gpu_calls/s30_call3.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-400} python3 -m kvtune tune --study s30-h200-longest-first \
  --revalidate benchmarks/gpu_calls/s30_hybrid_heuristic_h200_partial.json --keep-shipped \
  --validate hybrid-holdout --validate hybrid --serial-fallback \
  --backend triton --timer events --stopping quiet_retries=1 --finalist-rounds 2 \
  --no-progress --out /tmp/rv 2>&1 | grep -v Warning | tail -24 | cut -c1-300
f=$(ls /tmp/rv/*/hybrid_heuristic.json 2>/dev/null | head -1)
for g in /tmp/rv/*/hybrid_heuristic.json /tmp/rv/*/hybrid_heuristic.partial.json; do
  [ -f "$g" ] && cp "$g" $OUT/ && echo "copied $g"; done
tar -C /tmp/rv -czf $OUT/rv.tgz . 2>/dev/null
date -u
if [ -n "$f" ]; then
  ROUNDS=2 bash benchmarks/gpu_calls/hybrid_held_out.sh "$f" /tmp/m1 50 2>&1 | grep "all \|rows"
  tar -C /tmp/m1 -czf $OUT/heldout.tgz .
fi
date -u

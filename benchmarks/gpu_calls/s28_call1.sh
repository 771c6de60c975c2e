#!/usr/bin/env bash
# Session 28, call 1 (H200): s27 call 6 again (the makespan rule as every serial fallback's decode
# split), now that the makespan family keeps the engine's chunk on uniform batches
# (tuned_planner.UNIFORM_SPREAD; s27 call 6's two held-out losses were uniform decodes, which
# the CPU replay now plans as hybrid-serial). Re-validation of the s21 H200 file on the tune's
# default validation cases (hybrid-holdout + hybrid), at least four cases per shipped bucket;
# then the file it writes on the 15 hybrid batches no suite holds, two alternated rounds.
# Timers: kvtune tune's and kvtune bench's CUDA events (paced), cold L2, one interference retry.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-330} python3 -m kvtune tune --study s28-h200-makespan \
  --revalidate benchmarks/gpu_calls/s21_hybrid_heuristic_h200_revalidated.json \
  --validate hybrid-holdout --validate hybrid --split-failing --serial-fallback \
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

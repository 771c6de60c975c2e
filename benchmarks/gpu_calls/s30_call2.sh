#!/usr/bin/env bash
# Session 30, call 2 (H200): hybrid steps now launch their decodes longest first (the product's
# order; call 1: the serial step 0.82-1.00x and the shipped file 0.86-1.00x of the plan order's
# time on the 15 held-out batches). (1) The llama3-70b-tp8 196,608-token matrix variant that
# call 1's first, cold process did not finish. (2) s28_call1.sh again with that order: the s21
# H200 file re-validated on the tune's default validation cases (hybrid-holdout, now 43 cases,
# and the hybrid suite), serial fallbacks with the makespan rule; then the file it writes on the
# 15 hybrid batches no suite holds, two alternated rounds. Timers: bench_kernels' paced CUDA
# events against FlashInfer 0.5.3 on the same plans; kvtune tune's and bench's CUDA events
# (paced), cold L2, one interference retry.
#   bash benchmarks/gpu_calls/s30_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p /tmp/m7
timeout 70 python3 benchmarks/bench_kernels.py --sections shapes --variants 1 --total-tokens 196608 \
  --settle-s 0 --time-limit-s 60 --out /tmp/m7/t196608-v1 2>&1 | grep 'cases ok\|rror' | head -3
rm -f /tmp/m7/t196608-v1/bench_log.txt
tar -C /tmp/m7 -czf $OUT/matrix.tgz .
date -u
timeout ${LIMIT_S:-330} python3 -m kvtune tune --study s30-h200-longest-first \
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

#!/usr/bin/env bash
# Session 13, calls 4 and 5 (issue 15): the hybrid tune of call 2 resumed (results/s13/res carried: 1 of
# 6 buckets decided there, the rest of call 2's 400 s went to compiling on a fresh machine).
# Same command as call 2 with --resume. Timer: CUDA events, cold L2, one guard retry.
# Call 5: the same after commit "Triton backend: evicting a hybrid batch drops the prepared
# launches" (call 4 decided 3 more buckets, then ran the H100 out of memory in validation).
# Call 6: again on an H100 (kind nvidia-h100-x1), after the fix that keeps a resumed tune to
# decisions of its own device: call 5 came up on an H200 and took the H100 buckets into its file.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${1:-500} python3 -m kvtune tune --study s13-hybrid --suite hybrid-quick --backend triton \
  --timer events --trials 4 --finalist-rounds 2 --finalists 2 --stopping quiet_retries=1 \
  --out results/s13/res --no-progress --resume > $OUT/tune_log.txt 2>&1
echo "tune rc $?"
grep -v Warning $OUT/tune_log.txt | tail -30 | cut -c1-300
date -u
file=$(ls -t results/s13/res/*/hybrid_heuristic.json 2>/dev/null | head -1)
echo "file: $file"; [ -n "$file" ] && cp "$file" $OUT/s13_hybrid_heuristic.json
cd results/s13 && tar czf $OUT/res.tgz res

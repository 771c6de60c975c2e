#!/usr/bin/env bash
# Session 11, call 1 (issue 15): the hybrid tune with the wide default validation (hybrid-holdout
# + every hybrid case not trained on) and the finalists fallback, first part. The tenth session's
# call 2 ran out of its 500 s after 3 of 6 buckets and kept nothing; now each decided bucket is
# written to hybrid_heuristic.partial.json and call 2 goes on with --resume. Also the first GPU
# run of the interference guard's give-up (8 disturbed measurements in a row: no retries until
# a quiet bracket). Timer: CUDA events, cold L2, one guard retry.
# Run on the device machine from the repository root, with .whl/ (carry [".whl"]); writes $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 550 python3 -m kvtune tune --study s11-hybrid --suite hybrid-quick --backend triton \
  --timer events --trials 4 --finalist-rounds 2 --finalists 2 --stopping quiet_retries=1 \
  --out $OUT/res --no-progress > $OUT/tune_log.txt 2>&1
echo "tune rc $?"
grep -v Warning $OUT/tune_log.txt | tail -30
date -u
python3 benchmarks/gpu_calls/s11_guard_summary.py $OUT/res
cd $OUT && tar czf res.tgz res && rm -rf res

#!/usr/bin/env bash
# Session 9, call 2: call 1 again to its end (issue 15). Call 1's tune spent most of its time in
# the interference guard's retries (60 of 96 rows retried 5 times, 1 s apart, on a machine that
# never read quiet) and was stopped after 3 of 6 buckets; here one retry at most
# (--stopping quiet_retries=1; every row still records its quiet ratio), four start points per
# bucket (co-located with the plain and the page-ahead decode loop, two streams, the pod rule's
# knobs), and each winner against hybrid-serial on the hybrid-holdout cases of its bucket in two
# interleaved rounds. CUDA events, cold L2; the ceiling is the copy bandwidth the tune measures.
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Ninth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 560 python3 -m kvtune tune --study s9-hybrid --suite hybrid-quick --backend triton \
  --timer events --trials 4 --finalist-rounds 2 --stopping quiet_retries=1 --out $OUT/res \
  --no-progress > $OUT/tune_log.txt 2>&1
echo "tune rc $?"
grep -v Warning $OUT/tune_log.txt | tail -25
date -u
cd $OUT && tar czf res.tgz res && rm -rf res

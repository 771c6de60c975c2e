#!/usr/bin/env bash
# Session 8, call 2: co-location with a prefill tail and page-ahead decodes (issue 15), then
# the shape matrix at 196,608 tokens, a batch set the twin rule was not set on (issue 16).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
timeout 240 python3 benchmarks/hybrid_overlap_probe.py --out $OUT/probe \
  --variants streams,coP1-s3,coP1-s3-T1,coP1-s3-T1-a32s4,coP1-s2-T1-a32s4,coP1-s3-T1-a64s3,streams-a32s4,streams-a64s4 \
  2>&1 | tee $OUT/probe_log.txt | grep -v Warning
date -u
timeout 330 python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 0,1,2,4,5,8 \
  --total-tokens 196608 --settle-s 30 --time-limit-s 290 --out $OUT/m > $OUT/matrix_log.txt 2>&1
tail -3 $OUT/matrix_log.txt
cd $OUT && tar czf m.tgz m && rm -rf m
date -u

#!/usr/bin/env bash
# Session 7, call 5: the rest of the shape matrix with the wave-fill twins.
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Seventh session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
timeout 570 python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 5,1,12,4,8,11 \
  --settle-s 45 --time-limit-s 500 --out $OUT/m > $OUT/matrix_log.txt 2>&1
tail -3 $OUT/matrix_log.txt
cd $OUT && tar czf m.tgz m && rm -rf m
date -u

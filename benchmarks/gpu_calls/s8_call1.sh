#!/usr/bin/env bash
# Session 8, call 1: can a persistent grid of one kind co-locate with the other kind's grid?
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
timeout 500 python3 benchmarks/hybrid_overlap_probe.py --out $OUT/probe \
  --variants streams,coP1-s2,coP1-s3,coD2,coD1 2>&1 | tee $OUT/probe_log.txt | grep -v Warning
date -u

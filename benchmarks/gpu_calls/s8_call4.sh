#!/usr/bin/env bash
# Session 8, call 4: the hybrid benchmark with the colocated schedule, FlashInfer serial and POD
# in the same call (issue 15).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
timeout 540 python3 benchmarks/bench_hybrid.py --out $OUT/h --budget-s 420 2>&1 | grep -v Warning | tail -40
date -u

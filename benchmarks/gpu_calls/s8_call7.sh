#!/usr/bin/env bash
# Session 8, call 7: FlashInfer serial and POD beside kvtune's serial, streams, pod and
# colocated schedules on bench_hybrid's three FlashInfer cases, with the JIT given the whole
# call (issue 15: "side by side with FlashInfer's POD in the same call").
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 MAX_JOBS=16
date -u
timeout 580 python3 benchmarks/bench_hybrid.py --out $OUT/h --budget-s 540 \
  --variants streams,pod,colocated --no-tuned \
  --case-ids 'B16:seed0:chunk_tokens=512,context_tokens=4096;B128:seed0:chunk_tokens=512,context_tokens=4096;B128:seed0:chunk_tokens=2048,context_tokens=16384' \
  2>&1 | grep -v Warning | grep -v "check " | tail -20
date -u

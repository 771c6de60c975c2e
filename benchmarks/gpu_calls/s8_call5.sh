#!/usr/bin/env bash
# Session 8, call 5: the hybrid cases call 4's budget left out (continuous batching, draft
# tokens), the decode-only / prefill-only parity, and FlashInfer serial and POD on its three
# representative cases, with the colocated schedule (issue 15). Partitioned is left out (0.45x
# of serial in call 4).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
timeout 560 python3 benchmarks/bench_hybrid.py --out $OUT/h --budget-s 480 \
  --variants streams,fused,pod,colocated \
  --case-ids 'continuous;B16:seed0:chunk_tokens=512,context_tokens=4096;B128:seed0:chunk_tokens=512,context_tokens=4096;B128:seed0:chunk_tokens=2048,context_tokens=16384' \
  2>&1 | grep -v Warning | grep -v "check " | tail -30
date -u

#!/usr/bin/env bash
# Session 8, call 8: the colocated schedule through the product (`kvtune bench`, triton backend)
# under CUDA-graph replays and CUDA events, beside serial and streams (issue 15).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
for timer in graph events; do
  for cc in "512 4096" "2048 16384"; do
    set -- $cc
    echo "== timer $timer chunk $1 context $2 $(date -u +%T)"
    timeout 140 python3 -m kvtune bench --distribution hybrid --batch-sizes 16,128 \
      --param chunk_tokens=$1 --param context_tokens=$2 \
      --policies hybrid-serial,hybrid-streams,hybrid-colocated --backend triton --timer $timer \
      --no-progress --out $OUT/res 2>&1 | grep -v Warning | tail -9
  done
done
date -u
cd $OUT && tar czf res.tgz res && rm -rf res

#!/usr/bin/env bash
# Session 7, call 1: stage-1 configs on the balanced-2x cases that lose to FlashInfer.
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Seventh session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
git log -1 --format=%h
date -u
CFG=bn64-w4-s4-pa,bn64-w4-s3-pa,bn64-w4-s2-pa,bn32-w4-s4-pa,bn64-w2-s4-pa,bn128-w4-s2,bn128-w4-s3-pa,bn128-w8-s3-pa
settle=60
for c in "llama3-70b-tp8 uniform 256" "llama3-8b skew80 256" "llama3-8b skew80 8" "mha-32 skew80 256"; do
  set -- $c
  echo "== $c $(date -u +%T)"
  timeout 135 python3 benchmarks/profile_decode.py --shape $1 --dist $2 --batch $3 --chunk balanced \
    --configs $CFG --flashinfer --settle-s $settle 2>$OUT/err_$1_$2_$3.txt | tee -a $OUT/sweep.jsonl
  settle=0
done
date -u

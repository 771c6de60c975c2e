#!/usr/bin/env bash
# Session 8, call 6: deep entry against its shallow twin where the held-out matrix (196,608
# tokens, calls 2-3) missed 0.95x FlashInfer with the twin (issue 16). Same bits (checked), so
# only the time differs.
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
settle=45
while read -r shape dist batch chunk cfg; do
  echo "== $shape $dist $batch $chunk $(date -u +%T)"
  timeout 50 python3 benchmarks/profile_decode.py --shape $shape --dist $dist --batch $batch --chunk $chunk \
    --total-tokens 196608 --configs $cfg --flashinfer --settle-s $settle 2>>$OUT/err.txt | tee -a $OUT/sweep.jsonl
  settle=0
done <<CASES
llama3-8b uniform 64 2048 bn64-w4-s4-pa,bn64-w4-s3-pa
qwen2.5-7b uniform 64 2048 bn64-w4-s4-pa,bn64-w4-s3-pa
g16 uniform 64 2048 bn64-w4-s4-pa,bn64-w4-s3-pa
llama3-70b-tp8 skew80 64 2048 bn128-w8-s3-pa,bn128-w8-s2-pa
llama3-70b-tp8 skew80 256 2048 bn128-w8-s3-pa,bn128-w8-s2-pa
llama3-70b-tp8 uniform 256 balanced bn128-w8-s3-pa,bn128-w8-s2-pa
llama3-8b skew80 64 balanced bn64-w4-s4-pa,bn64-w4-s3-pa
mha-32 skew80 8 balanced bn64-w4-s4-pa,bn64-w4-s3-pa
CASES
date -u

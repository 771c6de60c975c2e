#!/usr/bin/env bash
# Session 7, call 2: bn64-w4-s3-pa against the table's entries on fixed-2048 and balanced cases.
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Seventh session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
git log -1 --format=%h; date -u
C3=bn64-w4-s4-pa,bn64-w4-s3-pa,bn128-w4-s2
C70=bn128-w8-s3-pa,bn64-w4-s3-pa,bn64-w4-s4-pa
settle=20
while read -r shape dist batch chunk cfg; do
  echo "== $shape $dist $batch $chunk $(date -u +%T)"
  timeout 75 python3 benchmarks/profile_decode.py --shape $shape --dist $dist --batch $batch --chunk $chunk \
    --configs $cfg --flashinfer --settle-s $settle 2>>$OUT/err.txt | tee -a $OUT/sweep.jsonl
  settle=0
done <<CASES
llama3-70b-tp8 uniform 64 2048 $C70
llama3-70b-tp8 skew80 256 balanced $C70
llama3-70b-tp8 uniform 8 2048 $C70
llama3-8b uniform 64 2048 $C3
llama3-8b skew80 64 2048 $C3
llama3-8b uniform 8 balanced $C3
g16 uniform 64 2048 $C3
g16 skew80 256 balanced $C3
qwen2.5-7b uniform 64 2048 $C3
CASES
date -u

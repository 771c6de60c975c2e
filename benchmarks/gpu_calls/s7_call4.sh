#!/usr/bin/env bash
# Session 7, call 4: twins bitwise, then the shape matrix with the wave-fill rule.
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Seventh session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
while read -r shape dist batch chunk cfg; do
  echo "== $shape $dist $batch $chunk $(date -u +%T)"
  timeout 60 python3 benchmarks/profile_decode.py --shape $shape --dist $dist --batch $batch --chunk $chunk \
    --configs $cfg 2>>$OUT/err.txt | tee -a $OUT/bitwise.jsonl
done <<CASES
llama3-8b skew80 8 balanced bn64-w4-s4-pa,bn64-w4-s3-pa
g16 uniform 64 2048 bn64-w4-s4-pa,bn64-w4-s3-pa
llama3-70b-tp8 skew80 256 balanced bn128-w8-s3-pa,bn128-w8-s2-pa
CASES
date -u
timeout 450 python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 0,1,2,3,4,5,8,11,12 \
  --settle-s 30 --time-limit-s 420 --out $OUT/m > $OUT/matrix_log.txt 2>&1
tail -5 $OUT/matrix_log.txt
cd $OUT && tar czf m.tgz m && rm -rf m
date -u

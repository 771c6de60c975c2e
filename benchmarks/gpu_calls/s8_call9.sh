#!/usr/bin/env bash
# Session 8, call 9: deep entry against its twin on the two held-out misses call 6's timeout cut
# (llama3-8b and qwen2.5-7b, uniform B=64, fixed-2048 at 196,608 tokens: tasks of 2048 and 1024
# tokens), issue 16. Same bits (checked), only the time differs.
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
settle=40
for shape in llama3-8b qwen2.5-7b; do
  echo "== $shape $(date -u +%T)"
  timeout 90 python3 benchmarks/profile_decode.py --shape $shape --dist uniform --batch 64 --chunk 2048 \
    --total-tokens 196608 --configs bn64-w4-s4-pa,bn64-w4-s3-pa --flashinfer --settle-s $settle \
    2>>$OUT/err.txt | tee -a $OUT/sweep.jsonl | python3 -c "import sys,json
for l in sys.stdin:
    r=json.loads(l); print(r.get('config') or 'FI-'+r.get('when',''), round(r['matrix_us'],1), round(r['matrix_quiet_ratio'],2), r.get('same_bits'))"
  settle=0
done
date -u

#!/usr/bin/env bash
# Session 18, call 3 (H100): (1) benchmarks/gpu_calls/page1_one_wave.sh, the page-1 candidates for
# the matrix's one 16-bit miss (llama3-8b page 1 uniform B=64 balanced-2x, 0.949); (2) other
# llama3-70b-tp8 entries (other bits than bn128-w8-s3-pa and its twin, so only as a whole-table
# change): bn128-w4-s2-pa (166 registers x 4 warps in the local compile: three programs per SM),
# bn64-w8-s3-pa (80 x 8 warps, 72 KB: three), bn64-w4-s2-pa (96 x 4 warps, 39 KB: five), on
# the cases of call 1 and two with one program per SM.
#   bash benchmarks/gpu_calls/s18_call3.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
show() {
python3 -c "
import json, sys
for l in sys.stdin:
    try: r = json.loads(l)
    except ValueError: print(l.strip()[:200]); continue
    print(r['shape'], r['page'], r['dist'], r['batch'], r['chunk'], r.get('config', 'FI-' + r.get('when', '')),
          r.get('num_tasks'), r.get('matrix_us'), r.get('loop_us'), r.get('fraction_of_copy'),
          r.get('same_bits'), r.get('matrix_quiet_ratio'), r.get('status'))"
}
OUT=$OUT bash benchmarks/gpu_calls/page1_one_wave.sh 2>&1 | grep -v "^{" | tail -3
show < $OUT/page1.jsonl
date -u
ONE=bn128-w8-s2-pa,bn128-w8-s3-pa,bn128-w4-s2-pa,bn64-w8-s3-pa,bn64-w4-s2-pa
while read -r dist batch chunk; do
  timeout 80 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --dist $dist \
    --batch $batch --chunk $chunk --flashinfer --configs $ONE 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/one.jsonl | show
done <<'CASES'
uniform 256 balanced
skew80 64 balanced
uniform 64 balanced
skew80 256 balanced
uniform 8 2048
skew80 64 2048
CASES
date -u

#!/usr/bin/env bash
# Session 29, call 4 (H200): llama3-70b-tp8 (one KV head), the matrix's only misses under the
# longest-first product (calls 2-3): each case's plan timed with the one-KV-head configurations
# (entry bn128-w8-s3-pa, its shallow twin s2-pa and that twin's register-capped -r80, and two
# page-16 entries of other shapes), longest first (the product's order), and FlashInfer 0.5.3
# on the same plan before and after (profile_decode.py --configs --flashinfer: the matrix's
# paced CUDA events, cold L2; each configuration checked against float64 after timing).
# Decides decode_config.longest_first_config's choice on 272-275 tasks (s3 -> s2-pa-r80).
#   bash benchmarks/gpu_calls/s29_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
cfgs=bn128-w8-s3-pa,bn128-w8-s2-pa,bn128-w8-s2-pa-r80,bn64-w4-s4-pa,bn128-w4-s3-pa
while read -r page dist batch chunk; do
  timeout 70 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --page $page \
    --dist $dist --batch $batch --chunk $chunk --configs $cfgs --flashinfer --settle-s 0 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/configs.jsonl | python3 -c "
import json, sys
for l in sys.stdin:
    try: r = json.loads(l)
    except ValueError: print(l.strip()[:200]); continue
    print('p$page $dist $batch $chunk', r.get('backend'), r.get('config') or r.get('when'),
          r.get('num_tasks'), r.get('status'), r.get('matrix_us'), r.get('fraction_of_copy'),
          r.get('ok'))"
done <<'CASES'
16 skew80 64 balanced
1 skew80 64 balanced
16 skew80 64 2048
64 skew80 64 2048
16 skew80 8 balanced
64 uniform 8 balanced
16 uniform 8 balanced
CASES
date -u

#!/usr/bin/env bash
# Ready for a GPU call on an H100 (written in session 23, not yet run): a third program per SM
# for llama3-70b-tp8 bf16 through a register cap, same bits as the product's twin. The twin
# bn128-w8-s2-pa takes 126 registers x 256 threads (two programs per SM) and 73.7 KB; capped at
# 80 (-r80) ptxas keeps it to 20 bytes of spill (local sm_90 compile, Triton 3.6), so three fit.
# Cases: the matrix's plans just above two programs per SM (skew80 B=64 balanced-2x: 272 tasks,
# 264 + 8; the kernel at 0.74 of the read there), at 3.5-3.9 per SM (skew80 B=256 and uniform
# B=256 balanced-2x) and at exactly two (uniform B=8 balanced-2x, a control). profile_decode.py
# --configs (the matrix's paced timer, then 30 paced pairs; checked against float64 first; the
# same_bits column must read True for -r80).
#   bash benchmarks/gpu_calls/capped_twin_one_kv_head.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
ONE=bn128-w8-s2-pa,bn128-w8-s2-pa-r80,bn128-w8-s3-pa
while read -r dist batch chunk; do
  timeout 80 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --dist $dist \
    --batch $batch --chunk $chunk --configs $ONE 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/capped.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
skew80 64 balanced
skew80 256 balanced
uniform 256 balanced
uniform 8 balanced
CASES
date -u

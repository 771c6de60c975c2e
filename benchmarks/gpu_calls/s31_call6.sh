#!/usr/bin/env bash
# Session 31, call 6 (H200): call 3 again with the entries of calls 4-5: head_dim 64 "many" is
# bn128-w4-s3-pa-vp-r120 (the old entry capped to fit four programs per SM); head_dim 256 is
# bn64-w4-s4-pa-vp with its shallow twin bn64-w4-s3-pa-vp by wave fill (margin 0.2), longest first,
# and SEVERAL_ROUNDS_TWIN (the twin where neither finishes in about one long task). Which cases set
# a rule: head_dim 256 pages 16 and 1, 10 of their 24 (calls 2 and 5); head_dim 64 page 16, 4 of 12
# (call 5); head_dim 256 page 64 and head_dim 64 pages 1 and 64 are held out. Each bench_kernels
# --sections shapes against FlashInfer 0.5.3's fp8 decode on the same plans (paced CUDA events,
# cold L2, checked against float64 first; copy measured in each process, fractions at 1 byte per
# K/V element). The first process of a fresh machine compiles FlashInfer.
#   bash benchmarks/gpu_calls/s31_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/m6
run() {  # name, limit, then bench_kernels arguments
  local name=$1 limit=$2; shift 2
  timeout $((limit + 8)) python3 benchmarks/bench_kernels.py --sections shapes "$@" --settle-s 0 \
    --time-limit-s $limit --out /tmp/m6/$name 2>&1 | grep 'cases ok\|rror' | head -3
  rm -f /tmp/m6/$name/bench_log.txt
  tar -C /tmp/m6 -czf $OUT/matrix.tgz .
  date -u
}
run full-v70 80 --full --variants 70   # hd256 fp8 p16
run full-v69 60 --full --variants 69   # hd256 fp8 p1
run full-v61 60 --full --variants 61   # hd64 fp8 p16
run full-v71 60 --full --variants 71   # hd256 fp8 p64 (held out)
run full-v62 50 --full --variants 62   # hd64 fp8 p64 (held out)
run full-v60 50 --full --variants 60   # hd64 fp8 p1 (held out)

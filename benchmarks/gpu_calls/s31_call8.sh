#!/usr/bin/env bash
# Session 31, call 8 (H200): SHORT_TASK_TWIN in the whole product (fp8 head_dim 128: the entry
# bn128-w4-s3-pa-vp gives way to bn128-w4-s2-pa-vp-r128, four programs per SM, same bits, where the
# tasks outnumber the entry's slots and none is longer than 4,096 keys; set on call 7's five
# llama3-8b page-16 plans, three of them matrix cases). The fp8 variants: llama3-8b page 16
# (5 of 12 cases set the rule), and held out: llama3-70b-tp8 page 16 (one KV head: the rule takes
# its balanced-2x plans of 1,008-key pieces), yi-6b page 16 (G = 8), g16 page 16 (G = 16), qwen2.5-7b
# page 1 (G = 7). Each bench_kernels --sections shapes against FlashInfer 0.5.3's fp8 decode on
# the same plans (paced CUDA events, cold L2, checked against float64 first; copy measured in each
# process, fractions at 1 byte per K/V element). The first process compiles FlashInfer.
#   bash benchmarks/gpu_calls/s31_call8.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/m8
run() {  # name, limit, then bench_kernels arguments
  local name=$1 limit=$2; shift 2
  timeout $((limit + 8)) python3 benchmarks/bench_kernels.py --sections shapes "$@" --settle-s 0 \
    --time-limit-s $limit --out /tmp/m8/$name 2>&1 | grep 'cases ok\|rror' | head -3
  rm -f /tmp/m8/$name/bench_log.txt
  tar -C /tmp/m8 -czf $OUT/matrix.tgz .
  date -u
}
run full-v7 70 --full --variants 7     # llama3-8b fp8 p16
run full-v16 40 --full --variants 16   # llama3-70b-tp8 fp8 p16 (held out)
run full-v34 40 --full --variants 34   # yi-6b fp8 p16 (held out)
run full-v52 40 --full --variants 52   # g16 fp8 p16 (held out)
run full-v24 40 --full --variants 24   # qwen2.5-7b fp8 p1 (held out)

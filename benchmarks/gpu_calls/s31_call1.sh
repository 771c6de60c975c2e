#!/usr/bin/env bash
# Thirty-first session, call 1 (H200): benchmarks/gpu_calls/page1_heldout_check.sh as written in the
# thirtieth session (see its header): the page-1 entries on qwen2.5-7b bf16/fp16, g16 fp16,
# head_dim 256 bf16 at 196,608 tokens, and the fp8 page-1 controls, each against FlashInfer 0.5.3
# on the same plans.
#   bash benchmarks/gpu_calls/s31_call1.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/p1
run() {  # name, then bench_kernels arguments
  local name=$1; shift
  timeout 66 python3 benchmarks/bench_kernels.py --sections shapes "$@" --settle-s 0 \
    --time-limit-s 58 --out /tmp/p1/$name 2>&1 | grep 'cases ok\|rror' | head -3
  rm -f /tmp/p1/$name/bench_log.txt
  tar -C /tmp/p1 -czf $OUT/matrix.tgz .
  date -u
}
run full-v18 --full --variants 18   # qwen2.5-7b bf16 p1
run full-v21 --full --variants 21   # qwen2.5-7b fp16 p1
run full-v48 --full --variants 48   # g16 fp16 p1
run t196608-v63 --full --variants 63 --total-tokens 196608   # hd256 bf16 p1
run full-v24 --full --variants 24   # qwen2.5-7b fp8 p1 (control)
run full-v69 --full --variants 69   # hd256 fp8 p1 (control)

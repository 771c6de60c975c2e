#!/usr/bin/env bash
# Ready for the next session with device time (H200; written in the twenty-ninth session, not
# run: its device time was spent): the final rule (decode_config.longest_first_config, also for equal
# tasks on the one-program-per-SM entry; set on call 5's page-16 cases) on llama3-70b-tp8 matrix
# variants it was not set on: 196,608 tokens at page 16, page 1 and fp16 at page 16 (bench_kernels
# --sections shapes against FlashInfer 0.5.3 on the same plans: paced CUDA events, cold L2,
# checked against float64 first; copy measured in each process).
#   bash benchmarks/gpu_calls/longest_first_heldout_check.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/m6
run() {
  local name=$1; shift
  timeout 38 python3 benchmarks/bench_kernels.py --sections shapes "$@" --settle-s 0 \
    --time-limit-s 32 --out /tmp/m6/$name 2>&1 | grep 'cases ok\|rror' | head -3
  rm -f /tmp/m6/$name/bench_log.txt
  tar -C /tmp/m6 -czf $OUT/matrix.tgz .
}
run t196608-v1 --variants 1 --total-tokens 196608
run full-v9 --full --variants 9
run full-v13 --full --variants 13
date -u

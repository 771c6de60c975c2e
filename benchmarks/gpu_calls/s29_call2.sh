#!/usr/bin/env bash
# Session 29, call 2 (H200): issue 16's shape matrix with the product's new launch order
# (kernels.plan.product_launch_order: static plans longest first) and its configuration rule
# for it (decode_config.late_round_twin), each case against FlashInfer 0.5.3's tensor-core decode
# on the same plan in the same process (bench_kernels.py --sections shapes: paced CUDA events,
# cold L2, checked against float64 first; copy bandwidth measured in each process). The 13
# default variants at 262,144 tokens, uniform and skew80, B = 8/64/256, fixed-2048 and
# balanced-2x; the twenty-fifth session's H200 matrix (plan order) is the earlier reference.
#   bash benchmarks/gpu_calls/s29_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p /tmp/m
for v in 0 1 5 12 9 3 4 7 2 6 8 10 11; do
  timeout 46 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --total-tokens 262144 --settle-s 0 --time-limit-s 38 --out /tmp/m/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-200
  rm -f /tmp/m/v$v/bench_log.txt
  date -u
  tar -C /tmp/m -czf $OUT/matrix.tgz .  # after each variant: a killed call still returns
done

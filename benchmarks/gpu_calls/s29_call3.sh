#!/usr/bin/env bash
# Session 29, call 3 (H200): the longest-first product on matrix cases no rule was set on:
# (1) full-product variants outside the default set (--full --variants: fp8 on qwen2.5-7b, g16,
# MHA, yi-6b, head_dim 64 and 256; pages 1 and 64 on llama3-70b-tp8, yi-6b, g16, head_dim 64 and
# 256; llama3-70b-tp8 fp8 page 1), and (2) the llama3-8b and llama3-70b-tp8 default variants at
# 196,608 tokens. Each case against FlashInfer 0.5.3 on the same plan in the same process
# (bench_kernels.py --sections shapes: paced CUDA events, cold L2, checked against float64
# first; copy bandwidth measured in each process).
#   bash benchmarks/gpu_calls/s29_call3.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p /tmp/m
run() {  # name, then bench_kernels arguments
  local name=$1; shift
  timeout 36 python3 benchmarks/bench_kernels.py --sections shapes "$@" --settle-s 0 \
    --time-limit-s 30 --out /tmp/m/$name 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-200
  rm -f /tmp/m/$name/bench_log.txt
  date -u
  tar -C /tmp/m -czf $OUT/matrix.tgz .  # after each: a killed call still returns
}
for v in 25 52 43 34 61 70 11 9 15 29 47 63 56; do run full-v$v --full --variants $v; done
for v in 0 1; do run t196608-v$v --variants $v --total-tokens 196608; done

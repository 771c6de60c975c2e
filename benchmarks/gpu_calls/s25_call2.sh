#!/usr/bin/env bash
# Session 25, call 2 (NVIDIA H200): the shape matrix at 262,144 tokens with today's kernel
# (register-capped twins and the narrowed backfill clause, both set on H100 rows only) against
# FlashInfer with the same plan and each plan's paged-read ceiling: hd64, hd256, llama3-8b fp16,
# llama3-8b fp8, pages 1 and 64, llama3-70b-tp8 fp8 (variants 6-12).
# The last H200 matrix was the twelfth session's; nothing here is compared with an H100 row.
#   bash benchmarks/gpu_calls/s25_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p /tmp/m
for v in 6 7 8 9 10 11 12; do
  timeout 80 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --total-tokens 262144 --read-ceiling --settle-s 0 --time-limit-s 70 --out /tmp/m/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-230
  rm -f /tmp/m/v$v/bench_log.txt
  date -u
  tar -C /tmp/m -czf $OUT/matrix.tgz .  # after each variant: a killed call still returns
done

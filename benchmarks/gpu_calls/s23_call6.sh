#!/usr/bin/env bash
# Session 23, call 6 (H100): issue 16's fp8 variants with the paced timer and each plan's
# paged-read ceiling in the same process: the shape matrix's llama3-8b fp8 (9) and
# llama3-70b-tp8 fp8 (12) variants against FlashInfer's fp8 decode (bench_kernels.py
# --read-ceiling). The read ceilings behind the twenty-second session's fp8 deviation were
# timed before the timer was paced.
#   bash benchmarks/gpu_calls/s23_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for v in 9 12; do
  timeout ${MATRIX_S:-75} python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --read-ceiling --settle-s 0 --time-limit-s $(( ${MATRIX_S:-75} - 8 )) --out $OUT/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-260
  rm -f $OUT/v$v/bench_log.txt
  date -u
done

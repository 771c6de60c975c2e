#!/usr/bin/env bash
# Session 18, call 7 (H100): the shape matrix's llama3-8b bf16, llama3-70b-tp8 bf16 and
# llama3-8b fp8 variants (0, 1, 9) at 262,144 tokens with this session's code (the device
# functions moved to kernels/decode_steps.py; the page-1 entry), against FlashInfer, to check
# that nothing moved outside page 1.
#   bash benchmarks/gpu_calls/s18_call7.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for v in 0 1 9; do
  timeout 130 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --settle-s 0 --time-limit-s 120 --out $OUT/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | tee -a $OUT/matrix.log
  rm -f $OUT/v$v/results.json $OUT/v$v/shapes.md $OUT/v$v/bench_log.txt
  date -u | tee -a $OUT/matrix.log
done

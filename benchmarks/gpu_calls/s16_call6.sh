#!/usr/bin/env bash
# Session 16, call 6 (H100): the shape matrix with the new defaults (chunked merge as stage 1's
# programmatic dependent; head_dim 64 / 256 "many" entries from call 5's sweep), each variant
# against FlashInfer with the same plan in the same process: hd64, hd256, llama3-70b-tp8,
# llama3-8b, g16, qwen2.5-7b.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 benchmarks/bench_kernels.py --sections env,copy --out $OUT/env 2>&1 | grep '^copy'
for v in ${@:-6 7 1 0 5 2}; do
  timeout 100 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --settle-s 0 --time-limit-s 85 --out $OUT/shapes_v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror' | tee -a $OUT/call6.log
  date -u | tee -a $OUT/call6.log
done

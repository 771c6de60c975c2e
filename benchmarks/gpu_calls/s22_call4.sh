#!/usr/bin/env bash
# Session 22, call 4 (H100): (1) the paged read with each task's page-table start in its task row
# (one dependent load less) beside the ordinary read, llama3-70b-tp8 bf16/fp8, shuffled pages;
# (2) decode.py beside the read ceiling on every matrix case with >= 2 programs per SM of
# llama3-70b-tp8 (again), head_dim 64, head_dim 256 and yi-6b.
#   bash benchmarks/gpu_calls/s22_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 120 python3 benchmarks/gather_ceiling.py --cases 0,1,7 --layouts shuffled --triton best --no-tma --direct --out $OUT/direct 2>&1 | grep -v Warning | tail -12
date -u
timeout ${LIMIT_S:-330} python3 benchmarks/gather_ceiling.py --matrix-variants ${VARIANTS:-1,6,7,3} --out $OUT/gather 2>&1 | grep -v Warning | tail -60
date -u

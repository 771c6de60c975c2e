#!/usr/bin/env bash
# Session 22, call 3 (H100): every shape-matrix case (262,144 tokens) with >= 2 programs per SM
# of the variants that miss issue 16's 0.85 of copy (llama3-70b-tp8 bf16/fp8, llama3-8b fp8,
# G=16, head_dim 64 / 256, yi-6b): decode.py's whole launch (checked against float64) beside the
# paged-read ceiling of the same plan (benchmarks/gather_ceiling.py --matrix-variants).
#   bash benchmarks/gpu_calls/s22_call3.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-450} python3 benchmarks/gather_ceiling.py --matrix-variants ${VARIANTS:-1,12,9,5,6,7,3} --out $OUT/gather 2>&1 | grep -v Warning | tail -90
date -u

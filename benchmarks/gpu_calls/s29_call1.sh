#!/usr/bin/env bash
# Session 29, call 1 (H200): issue 16's launch-order question. benchmarks/gpu_calls/
# launch_order_check.sh as committed: stage 1 in the plan's order against "longest-first"
# (the same bits), the product's configuration and the table entry, three alternated rounds in
# one process per case (profile_decode.py --time --versus-order, paced CUDA-event pairs, L2
# flushed; both orders checked against float64 first), on the 16-bit skew80 misses, controls
# and three fp8 cases. No matrix in this call.
#   bash benchmarks/gpu_calls/s29_call1.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader; nproc
git log --oneline -1 2>/dev/null
bash benchmarks/gpu_calls/launch_order_check.sh $OUT
date -u

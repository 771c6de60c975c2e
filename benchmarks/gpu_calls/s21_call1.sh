#!/usr/bin/env bash
# Session 21, call 1 (H100): decode stage 1 through the Gluon tile (benchmarks/gluon_decode_probe.py):
# llama3-70b-tp8 balanced-2x / fixed-2048 and llama3-8b balanced-2x at 262,144 tokens, decode.py's
# whole launch and its stage 1 beside Gluon rings of 32-128 keys x 2-6 buffers, one program per
# task or persistent; every variant checked against float64 first.
#   bash benchmarks/gpu_calls/s21_call1.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 400 python3 benchmarks/gluon_decode_probe.py --out $OUT/probe 2>&1 | grep -v Warning | tail -70
date -u

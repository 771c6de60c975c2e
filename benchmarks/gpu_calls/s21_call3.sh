#!/usr/bin/env bash
# Session 21, call 3 (H100): the Gluon decode stage 1 at three to four programs per SM
# (gluon_decode_probe.py): 16- and 32-key steps with 2-6 buffers (40-64 KB, 121-125 registers),
# llama3-70b-tp8 balanced-2x at B=8/64/256 uniform and skew80 B=64/256, and G=16 (g16) uniform
# B=64; decode.py's launch and stage 1 beside; every variant checked against float64 first.
#   bash benchmarks/gpu_calls/s21_call3.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 400 python3 benchmarks/gluon_decode_probe.py --out $OUT/probe \
  --configs 32:3,32:2,16:3,16:4,16:6 \
  --cases llama3-70b-tp8:uniform:256:balanced-2x,llama3-70b-tp8:uniform:64:balanced-2x,llama3-70b-tp8:skew80:64:balanced-2x,llama3-70b-tp8:skew80:256:balanced-2x,llama3-70b-tp8:uniform:8:balanced-2x,g16:uniform:64:balanced-2x \
  2>&1 | grep -v Warning | sed 's/KernelConfig(block_n=\([0-9]*\), num_warps=\([0-9]\), num_stages=\([0-9]\)[^)]*)/bn\1-w\2-s\3/' | tail -50
date -u

#!/usr/bin/env bash
# Session 22, call 5 (H100): does the matrix timer measure the host on short decodes?
# benchmarks/host_gap_probe.py: decode.py's launch on llama3-70b-tp8 (bf16, fp8) and llama3-8b
# cases timed by the matrix timer, by its loop with and without a long GPU lead-in, and as a
# CUDA-graph replay, three alternated rounds, with the host's enqueue time per iteration.
#   bash benchmarks/gpu_calls/s22_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader; nproc; cat /proc/loadavg
timeout ${LIMIT_S:-300} python3 benchmarks/host_gap_probe.py --out $OUT/gap 2>&1 | grep -v Warning | tail -30
date -u

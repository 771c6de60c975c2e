#!/usr/bin/env bash
# Session 22, call 1 (H100): the paged-read ceiling (benchmarks/gather_ceiling.py): the bytes of
# a decode plan's stage 1 read through the page table with no attention on top, shuffled pages
# and pages in order, 18 Triton configurations per case, every sum checked against float64.
#   bash benchmarks/gpu_calls/s22_call1.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-480} python3 benchmarks/gather_ceiling.py --out $OUT/gather 2>&1 | grep -v Warning | tail -40
date -u

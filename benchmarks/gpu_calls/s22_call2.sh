#!/usr/bin/env bash
# Session 22, call 2 (H100): the paged-read ceiling again with the pages moved by TMA (Gluon,
# one copy per page of K and of V, 2-8 pages per mbarrier, 2-8 steps in flight) beside call 1's
# three best Triton configurations, same cases, every sum checked against float64.
#   bash benchmarks/gpu_calls/s22_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${LIMIT_S:-480} python3 benchmarks/gather_ceiling.py --triton best --out $OUT/gather 2>&1 | grep -v Warning | tail -40
date -u

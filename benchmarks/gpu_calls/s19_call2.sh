#!/usr/bin/env bash
# Session 19, call 2 (H100): the Gluon prefill tile with 64-row tiles (one warpgroup, two
# programs per SM) and 128-key steps, checked against the float64 reference on the 13 batches
# of benchmarks/prefill_wgmma_check.py (64 rows x 64 keys x 2 buffers; 128 rows x 128 keys x 2),
# then timed beside the Triton tiles in one process (prefill_tile_probe.py: CUDA events, L2
# flushed outside them, median of 10).
#   bash benchmarks/gpu_calls/s19_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 150 python3 benchmarks/prefill_wgmma_check.py --out $OUT/check64 --block-m 64 --block-n 64 --stages 2 2>&1 | tail -3
timeout 150 python3 benchmarks/prefill_wgmma_check.py --out $OUT/check128 --block-m 128 --block-n 128 --stages 2 2>&1 | tail -3
timeout 300 python3 benchmarks/prefill_tile_probe.py --out $OUT/probe \
  --tiles default,m64-default,wgmma-n128-s2,wgmma-n128-s3,wgmma-m64-n64-s2,wgmma-m64-n64-s3,wgmma-m64-n128-s2 2>&1 | tail -12
date -u

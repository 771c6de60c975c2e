#!/usr/bin/env bash
# Session 19, call 1 (H100): the Gluon prefill tile (kernels/prefill_wgmma.py) first checked
# against the float64 reference beside the Triton prefill tile on 13 hybrid batches
# (benchmarks/prefill_wgmma_check.py), then timed on the prefill-only batches of the ninth
# session's tile probe against the Triton default tile in the same process (CUDA events, L2
# flushed outside them, median of 10; copy bandwidth of the same process recorded).
#   bash benchmarks/gpu_calls/s19_call1.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
git_rev=$(cat REVISION 2>/dev/null); echo "rev ${git_rev}"
timeout 240 python3 benchmarks/prefill_wgmma_check.py --out $OUT/check 2>&1 | tail -20
timeout 300 python3 benchmarks/prefill_tile_probe.py --out $OUT/probe \
  --tiles default,wgmma-n64-s3,wgmma-n64-s2,wgmma-n64-s4,wgmma-n128-s2 2>&1 | tail -12
date -u

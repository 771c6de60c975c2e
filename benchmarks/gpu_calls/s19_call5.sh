#!/usr/bin/env bash
# Session 19, call 5 (H100): the Gluon prefill tile with the softmax between the two waits. The
# local sm_90 SASS of calls 1-4's kernel had the row maxima and exponentials after the wait for
# the P.V product (the scheduler moved them next to the next block's copies): no overlap. Now the
# next block's copies go out right after the two products (into block j - 2's buffers, one
# barrier per block), and the softmax sits between the waits in the SASS. Checked against the
# float64 reference (13 batches, the default 128 keys x 3 buffers, and 64 keys x 4), then timed
# beside the Triton tile (prefill_tile_probe.py, same timer as calls 1-4).
#   bash benchmarks/gpu_calls/s19_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 120 python3 benchmarks/prefill_wgmma_check.py --out $OUT/check 2>&1 | tail -3
timeout 120 python3 benchmarks/prefill_wgmma_check.py --out $OUT/check64 --block-n 64 --stages 4 2>&1 | tail -2
timeout 300 python3 benchmarks/prefill_tile_probe.py --out $OUT/probe \
  --tiles default,triton,wgmma-n64-s3,wgmma-n64-s4,wgmma-m64-n64-s3 2>&1 | tail -6
date -u

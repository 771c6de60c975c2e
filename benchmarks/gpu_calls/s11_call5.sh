#!/usr/bin/env bash
# Session 11, call 5 (issues 15 and 16): the hybrid kernel on fp8 pages on a GPU for the first
# time (commit 3463c3b: e4m3 tiles widened where loaded, k_scale / v_scale applied), every
# output checked against the float64 reference of the dequantised cache before it is timed;
# the same batches on bf16 pages in the same process for the time. Timer: CUDA events, cold L2.
# Run on the device machine from the repository root, with .whl/ (carry [".whl"]).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for kv in fp8_e4m3 bf16; do
  timeout 75 python3 -m kvtune bench --distribution hybrid --batch-sizes 16,64 \
    --param chunk_tokens=1024 --param context_tokens=8192 --kv-dtype $kv \
    --policies hybrid-serial,hybrid-colocated,hybrid-fused,pod --backend triton --timer events \
    --stopping quiet_retries=0 --no-progress --out $OUT/res 2>&1 | grep -v Warning | tail -14 | cut -c1-240
done
date -u

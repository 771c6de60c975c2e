#!/usr/bin/env bash
# Session 26, call 3 (H200): (1) the decode kernel hash under the GPU machine's Python 3.12 (the
# canonical-tree format must give what this checkout gives under 3.11); (2) the head_dim 64
# variant of the shape matrix with the final WAVE_FILL_MARGIN_BY_TWIN (0.2; never GPU-run) at
# 262,144 and 196,608 tokens; (3) benchmarks/gpu_calls/schedule_check.sh: the work-list order on
# the skew80 B=64 misses of the twenty-fifth session's matrix.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 --version
python3 -c "from kvtune.kernels.fingerprint import decode_kernel_sha256 as h; print('decode_kernel_sha256', h())"
mkdir -p /tmp/m
for tokens in 262144 196608; do
  timeout 80 python3 benchmarks/bench_kernels.py --sections shapes --variants 6 \
    --total-tokens $tokens --read-ceiling --settle-s 0 --time-limit-s 70 --out /tmp/m/v6-$tokens 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-230
  rm -f /tmp/m/v6-$tokens/bench_log.txt
  tar -C /tmp/m -czf $OUT/matrix.tgz .
done
date -u
bash benchmarks/gpu_calls/schedule_check.sh | tail -n +3

#!/usr/bin/env bash
# Session 16, call 7 (H100): the matrix with the final defaults of this session where call 6 left
# gaps: hd64 (all 12 cases; call 6 ran out of time after 10), llama3-70b-tp8 (call 6's
# uniform B=8 balanced-2x read 79 us where calls 3 and 4 read 61), hd256 with its entry
# restored, and llama3-70b-tp8 with an fp8 cache; each against FlashInfer with the same plan.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 benchmarks/bench_kernels.py --sections env,copy --out $OUT/env 2>&1 | grep '^copy'
for v in ${@:-6 1 7 12}; do
  timeout 110 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --settle-s 0 --time-limit-s 100 --out $OUT/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror' | tee -a $OUT/call7.log
  rm -f $OUT/v$v/results.json $OUT/v$v/shapes.md
  date -u | tee -a $OUT/call7.log
done

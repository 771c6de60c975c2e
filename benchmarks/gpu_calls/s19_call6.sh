#!/usr/bin/env bash
# Session 19, call 6 (H100): build FlashInfer 0.5.3's JIT kernels (BatchPrefill, decode, POD) for the
# next call on the same warm machine (as s18_call5.sh).
#   bash benchmarks/gpu_calls/s19_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
MAX_JOBS=4 timeout 560 python3 benchmarks/bench_hybrid.py --fi-warmup prefill > $OUT/prefill.log 2>&1 &
MAX_JOBS=4 timeout 560 python3 benchmarks/bench_hybrid.py --fi-warmup decode > $OUT/decode.log 2>&1 &
MAX_JOBS=12 timeout 560 python3 benchmarks/bench_hybrid.py --fi-warmup pod > $OUT/pod.log 2>&1 &
wait
date -u; tail -n 2 $OUT/*.log; du -sh ~/.cache/flashinfer 2>/dev/null

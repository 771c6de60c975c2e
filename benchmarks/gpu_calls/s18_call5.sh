#!/usr/bin/env bash
# Session 18, call 5 (H100): FlashInfer's JIT modules of bench_hybrid.py (prefill, decode, POD)
# built ahead, alone, so that call 6 on the same warm machine finds them cached and has its
# whole time for the side by side with FlashInfer's POD (the previous try, pod_h100.sh at
# 18:11 UTC, spent 340 s building them beside the Triton cases and ran out of time after).
#   bash benchmarks/gpu_calls/s18_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
MAX_JOBS=4 timeout 560 python3 benchmarks/bench_hybrid.py --fi-warmup prefill > $OUT/prefill.log 2>&1 &
MAX_JOBS=4 timeout 560 python3 benchmarks/bench_hybrid.py --fi-warmup decode > $OUT/decode.log 2>&1 &
MAX_JOBS=12 timeout 560 python3 benchmarks/bench_hybrid.py --fi-warmup pod > $OUT/pod.log 2>&1 &
wait
date -u; tail -n 2 $OUT/*.log; du -sh ~/.cache/flashinfer 2>/dev/null

#!/usr/bin/env bash
# Session 23, call 5 (H100): (1) issue 15's suite again with `kvtune bench --rounds 2` (new):
# each case's two series measured serial, file, then file, serial, the median of each
# series' rounds kept, so that the drift between back-to-back measurements call 3 showed
# (0.975-1.009x on 79 cases planned alike) falls on both; (2) issue 16: the llama3-70b-tp8
# bf16 shape-matrix variant against FlashInfer with each plan's paged-read ceiling
# (--read-ceiling) in the same process.
#   bash benchmarks/gpu_calls/s23_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
FILE=benchmarks/gpu_calls/s21_hybrid_heuristic_h100_fallback.json
timeout ${LIMIT_S:-290} python3 -m kvtune bench --suite hybrid --backend triton --timer events \
  --policies hybrid-serial,hybrid-tuned:path=$FILE --rounds 2 \
  --stopping quiet_retries=1 --no-progress --out $OUT/bench 2>&1 | grep -v Warning \
  | sed -n '/hybrid sweep/,$p' | cut -c1-300
date -u
timeout ${MATRIX_S:-170} python3 benchmarks/bench_kernels.py --sections shapes --variants 1 \
  --read-ceiling --settle-s 0 --time-limit-s $(( ${MATRIX_S:-170} - 10 )) --out $OUT/v1 2>&1 \
  | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-260
rm -f $OUT/v1/bench_log.txt
date -u

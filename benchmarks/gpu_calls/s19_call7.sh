#!/usr/bin/env bash
# Session 19, call 7 (H100, right after call 6 on the same machine): FlashInfer's POD beside the
# hybrid file with the Gluon prefill tile back as it was in call 4 (commit b2459a5's kernel), on
# the 4K-context sweep cases, with s18_call6.sh's budget (call 4's 280 s left POD's warm-up too
# little time): serial, the H100 tuned file, FlashInfer serial and POD on B16 and B64.
#   bash benchmarks/gpu_calls/s19_call7.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 560 python3 benchmarks/bench_hybrid.py --suite hybrid --variants serial \
  --no-tuned --no-checks --heuristic benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json \
  --skip-cases 0 --max-cases 6 \
  --fi-case-ids "B16:seed0:chunk_tokens=512,context_tokens=4096;B64:seed0:chunk_tokens=512,context_tokens=4096" \
  --budget-s 420 --out $OUT/h 2>&1 | grep -v Warning | tail -30
echo "bench rc ${PIPESTATUS[0]}"
date -u

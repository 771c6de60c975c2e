#!/usr/bin/env bash
# Session 19, call 4 (H100, right after call 3 on the same machine, FlashInfer's JIT built): the
# Gluon prefill tile as hybrid_config's default (128 keys x 3 buffers at head_dim 128):
# 1. prefill_wgmma_check.py with the default configuration (Gluon vs Triton tile vs float64);
# 2. prefill_tile_probe.py: default (Gluon) vs the Triton tile vs FlashInfer's BatchPrefill on
#    the same pages, prefill-only batches (CUDA events, L2 flushed outside, median of 10);
# 3. bench_hybrid.py on the 4K-context sweep cases of s18_call6.sh (serial and the H100 tuned
#    file, FlashInfer serial and POD on two of them, in one process).
#   bash benchmarks/gpu_calls/s19_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 100 python3 benchmarks/prefill_wgmma_check.py --out $OUT/check 2>&1 | tail -2
timeout 120 python3 benchmarks/prefill_tile_probe.py --out $OUT/probe --flashinfer \
  --tiles default,triton 2>&1 | tail -8
timeout 330 python3 benchmarks/bench_hybrid.py --suite hybrid --variants serial \
  --no-tuned --no-checks --heuristic benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json \
  --skip-cases 0 --max-cases 6 \
  --fi-case-ids "B16:seed0:chunk_tokens=512,context_tokens=4096;B64:seed0:chunk_tokens=512,context_tokens=4096" \
  --budget-s 280 --out $OUT/h 2>&1 | grep -v Warning | tail -30
echo "bench rc ${PIPESTATUS[0]}"
date -u

#!/usr/bin/env bash
# Session 18, call 6 (H100, the machine of call 5, FlashInfer's JIT cached): issue 15's side by
# side with FlashInfer's POD. bench_hybrid.py over the paper sweep's first 6 cases (context 4K,
# chunk 512, 8-256 decodes) with the H100 hybrid file, and FlashInfer's serial launches and POD
# on B=16 and B=64 of them, kvtune's launches timed again after FlashInfer's (-after-fi).
# Timer: bench_hybrid.py's CUDA-event pairs, cold L2; every timed variant checked first.
#   bash benchmarks/gpu_calls/s18_call6.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 560 python3 benchmarks/bench_hybrid.py --suite hybrid --variants serial \
  --no-tuned --no-checks --heuristic benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json \
  --skip-cases 0 --max-cases 6 \
  --fi-case-ids "B16:seed0:chunk_tokens=512,context_tokens=4096;B64:seed0:chunk_tokens=512,context_tokens=4096" \
  --budget-s 420 --out $OUT/h 2>&1 | grep -v Warning | tail -30
echo "bench rc ${PIPESTATUS[0]}"
date -u

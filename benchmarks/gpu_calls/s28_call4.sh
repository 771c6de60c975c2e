#!/usr/bin/env bash
# Session 28, call 4 (H200, right after call 3 on the same machine, FlashInfer's JIT built):
# issue 15's side by side with FlashInfer's POD under the paced timer. bench_hybrid.py over the
# paper sweep's 18 4K-context cases (chunks of 512, 1,024 and 2,048 tokens beside 8-256
# decodes): kvtune's serial step and the H200 file of s28 call 1 (makespan fallbacks), and
# FlashInfer's serial launches and its POD (BatchPODWithPagedKVCacheWrapper) on five of them.
# Timer: bench_hybrid.py's CUDA-event pairs (bench_kernels.Timer, paced), cold L2; every timed
# variant checked against the float64 reference first.
#   bash benchmarks/gpu_calls/s28_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
du -sh ~/.cache/flashinfer 2>/dev/null
FI="B16:seed0:chunk_tokens=512,context_tokens=4096;B64:seed0:chunk_tokens=512,context_tokens=4096"
FI="$FI;B128:seed0:chunk_tokens=512,context_tokens=4096;B32:seed0:chunk_tokens=2048,context_tokens=4096"
FI="$FI;B128:seed0:chunk_tokens=2048,context_tokens=4096"
timeout 550 python3 benchmarks/bench_hybrid.py --suite hybrid --variants serial \
  --no-tuned --no-checks \
  --heuristic benchmarks/gpu_calls/s28_hybrid_heuristic_h200_makespan.json \
  --skip-cases 0 --max-cases 18 --fi-case-ids "$FI" \
  --budget-s 470 --out $OUT/h 2>&1 | grep -v Warning | tail -40
echo "bench rc ${PIPESTATUS[0]}"
date -u

#!/usr/bin/env bash
# Session 12, calls 2 and 3 (issue 15): the shipped hybrid file (s11_hybrid_heuristic.json)
# over the hybrid suite's paper sweep (its first 72 cases, two kinds each: context 4K, 8K, 16K,
# 20K x chunk 512, 1024, 2048 x 8-256 decodes), spread over two calls (call 2: cases 1-36, the
# 4K and 8K contexts; call 3: cases 37-72, 16K and 20K). Each case: kvtune's serial step, the
# file's step, and the two parts alone (the max(prefill alone, decode alone) bound), in one
# process; FlashInfer's serial launches and its POD on 4 of the call's cases in the same process
# (its JIT built meanwhile in background processes with MAX_JOBS=12, so that 4 of the 16 cores
# stay free for the Triton launches). The file's ship/defer check measured these cases
# (validation; its search ran on hybrid-quick): the held-out judgement is s11 call 2's.
# Timer: bench_hybrid.py's CUDA-event pairs, cold L2; every timed variant checked first.
#   bash benchmarks/gpu_calls/s12_call2.sh SKIP FI_CASES [TIMEOUT_S BUDGET_S]
# HEURISTIC=FILE runs another hybrid file the same way (default: the one these calls ran).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
MAX_JOBS=12 timeout ${3:-565} python3 benchmarks/bench_hybrid.py --suite hybrid --variants serial \
  --no-tuned --no-checks --heuristic ${HEURISTIC:-benchmarks/gpu_calls/s11_hybrid_heuristic.json} \
  --skip-cases ${1:?SKIP} --max-cases 36 --fi-case-ids "${2:?FI_CASES}" --budget-s ${4:-490} \
  --out $OUT/h 2>&1 | grep -v Warning | tail -50
echo "bench rc ${PIPESTATUS[0]}"
date -u

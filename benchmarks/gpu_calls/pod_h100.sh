#!/usr/bin/env bash
# Ready for a GPU call on an H100 (kind nvidia-h100-x1; written in session 14, not yet run):
# issue 15's side-by-side with FlashInfer's POD on the card the H100 hybrid file was tuned on.
# As s12_call2.sh, with benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json: per case of the
# paper sweep (SKIP, then 36 cases), kvtune's serial step, the file's step and the two parts
# alone (the max(prefill alone, decode alone) bound) in one process, and FlashInfer's serial
# launches and its POD (BatchPODWithPagedKVCacheWrapper) on FI_CASES of them, its JIT built in
# background processes meanwhile (MAX_JOBS=12). Timer: bench_hybrid.py's CUDA-event pairs,
# cold L2; every timed variant checked against the float64 reference first.
#   bash benchmarks/gpu_calls/pod_h100.sh SKIP FI_CASES [TIMEOUT_S BUDGET_S]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
MAX_JOBS=12 timeout ${3:-565} python3 benchmarks/bench_hybrid.py --suite hybrid --variants serial \
  --no-tuned --no-checks --heuristic benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json \
  --skip-cases ${1:?SKIP} --max-cases 36 --fi-case-ids "${2:?FI_CASES}" --budget-s ${4:-490} \
  --out $OUT/h 2>&1 | grep -v Warning | tail -50
echo "bench rc ${PIPESTATUS[0]}"
date -u

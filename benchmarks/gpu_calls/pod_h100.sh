#!/usr/bin/env bash
# Ready for a GPU call on an H100 (kind nvidia-h100-x1; written in session 14, not yet run):
# issue 15's side-by-side with FlashInfer's POD on the card the H100 hybrid file was tuned on.
# s12_call2.sh with benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json: per case of the paper
# sweep (SKIP, then 36 cases), kvtune's serial step, the file's step and the two parts alone (the
# max(prefill alone, decode alone) bound) in one process, and FlashInfer's serial launches and its
# POD (BatchPODWithPagedKVCacheWrapper) on FI_CASES of them. Timer: bench_hybrid.py's CUDA-event
# pairs, cold L2; every timed variant checked against the float64 reference first.
#   bash benchmarks/gpu_calls/pod_h100.sh SKIP FI_CASES [TIMEOUT_S BUDGET_S]
HEURISTIC=benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json \
  exec bash "$(dirname "$0")/s12_call2.sh" "$@"

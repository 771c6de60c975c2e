#!/usr/bin/env bash
# Session 19, call 3 (H100): build FlashInfer 0.5.3's JIT kernels (BatchPrefill, decode, POD) for the
# next call on the same warm machine (as s18_call5.sh).
#   bash benchmarks/gpu_calls/s19_call3.sh
exec bash benchmarks/gpu_calls/s18_call5.sh  # the same commands

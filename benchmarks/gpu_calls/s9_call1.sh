#!/usr/bin/env bash
# Session 9, call 1: the hybrid knobs tuned on the GPU and checked on held-out batches (issue 15):
# `kvtune tune --suite hybrid-quick` on the Triton backend (CUDA events, cold L2), each bucket's
# winner measured against hybrid-serial on the hybrid-holdout cases of its bucket (2 interleaved
# rounds) before it ships. Copy bandwidth of the same machine first (the ceiling).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Ninth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 benchmarks/bench_kernels.py --sections env,copy --out $OUT/copy 2>&1 | grep -iE "copy|GB/s|TB/s" | head -5
stamp() { while IFS= read -r l; do echo "$(date -u +%T) $l"; done; }
timeout 500 python3 -m kvtune tune --study s9-hybrid --suite hybrid-quick --backend triton \
  --timer events --trials 5 --finalist-rounds 2 --out $OUT/res --no-progress 2>&1 \
  | grep -v Warning | stamp
echo "tune rc ${PIPESTATUS[0]}"
date -u
cd $OUT && tar czf res.tgz res && rm -rf res

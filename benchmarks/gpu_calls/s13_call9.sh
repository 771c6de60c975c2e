#!/usr/bin/env bash
# Session 13, call 9 (issue 15): the bound. bench_hybrid.py over the whole hybrid suite's paper
# sweep: serial, colocated (in order), the H100 hybrid file, and each case's prefill half and
# decode half alone (the max(prefill alone, decode alone) bound), one process, each variant
# checked against the float64 reference before it is timed. No FlashInfer (its POD JIT does not
# fit a call), no tuned grid. Timer: CUDA events, cold L2, median of 10. Must run on an H100.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
cd benchmarks && timeout ${1:-450} python3 bench_hybrid.py --suite hybrid --max-cases 72 \
  --variants colocated --no-tuned --no-checks --no-flashinfer \
  --heuristic gpu_calls/s13_hybrid_heuristic_h100.json --budget-s $(( ${1:-450} - 60 )) \
  --out $OUT/hyb 2>&1 | grep -v Warning | cut -c1-300 | tail -40
echo "rc ${PIPESTATUS[0]}"
date -u

#!/usr/bin/env bash
# Session 12, call 3: (a) issue 15/16: the hybrid kernel on fp8 pages after the change of commit
# 971ee31 (prefill tiles read a 16-bit copy of their pages, widened once per step; decode items
# fp16 products), beside bf16 pages of the same batches and beside the fp8 launch without the
# copy, in one process (benchmarks/bench_hybrid_fp8.py); (b) issue 15: the shipped hybrid file
# (s11_hybrid_heuristic.json) and the named colocated policy over the whole paper sweep of the
# hybrid suite (its first 72 cases) with kvtune's serial step and the two parts alone (the
# bound), in one process, without FlashInfer (call 2 showed its JIT does not leave room for the
# sweep in one call). Timer: bench_hybrid.py's CUDA-event pairs, cold L2; every timed variant is
# checked against the float64 reference first.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout ${1:-220} python3 benchmarks/bench_hybrid_fp8.py --budget-s $(( ${1:-220} - 40 )) --out $OUT/fp8 2>&1 \
  | grep -v Warning | tail -25
echo "fp8 rc ${PIPESTATUS[0]}"
date -u
timeout ${2:-330} python3 benchmarks/bench_hybrid.py --suite hybrid --variants serial,colocated \
  --no-tuned --no-checks --no-flashinfer --heuristic benchmarks/gpu_calls/s11_hybrid_heuristic.json \
  --max-cases 72 --budget-s $(( ${2:-330} - 30 )) --out $OUT/sweep 2>&1 | grep -v Warning | tail -6 | cut -c1-600
echo "sweep rc ${PIPESTATUS[0]}"
date -u

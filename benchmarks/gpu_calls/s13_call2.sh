#!/usr/bin/env bash
# Session 13, call 2 (issues 15, 16): (a) the colocated step (now launched in order by default)
# on fp8 and bf16 pages, with its decodes as the hybrid kernel's items (default) and through
# kernels/decode.py (-dk); (b) the hybrid tune on this H100 with the ordered colocated launch and
# serial decodes through decode.py, first part (each decided bucket kept in
# hybrid_heuristic.partial.json; call 3 resumes). Timer: CUDA events, cold L2, one guard retry.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
(cd benchmarks && timeout ${1:-150} python3 bench_hybrid_fp8.py --policies hybrid-colocated \
  --budget-s $(( ${1:-150} - 50 )) --out $OUT/fp8 2>&1 | grep -v Warning | cut -c1-300 | tail -20)
date -u
mkdir -p results/s13
timeout ${2:-380} python3 -m kvtune tune --study s13-hybrid --suite hybrid-quick --backend triton \
  --timer events --trials 4 --finalist-rounds 2 --finalists 2 --stopping quiet_retries=1 \
  --out results/s13/res --no-progress ${3:-} > $OUT/tune_log.txt 2>&1
echo "tune rc $?"
grep -v Warning $OUT/tune_log.txt | tail -30 | cut -c1-300
date -u
ls results/s13/res/*/ 2>/dev/null | head
cd results/s13 && tar czf $OUT/res.tgz res

#!/usr/bin/env bash
# Session 13, call 7 (issue 15): the H100 hybrid file of calls 2-6
# (benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json; colocated, launched in order, in its two
# shipped buckets) (a) over the whole paper sweep (72 cases) beside serial, colocated on two
# streams and colocated in order, interleaved, in one process; (b) on 15 hybrid batches that no
# suite holds (the eleventh session's list: other decode counts, chunk and context sizes,
# continuous-batching seeds 300-301, speculative decodes) beside kvtune's serial step through
# `kvtune bench`. Timer: CUDA events, cold L2. Must run on an H100 (the file's card).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
file=benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json
(cd benchmarks && timeout ${1:-300} python3 bench_colocated_order.py --max-cases 72 --rounds 2 \
  --heuristic ../$file --budget-s $(( ${1:-300} - 60 )) --out $OUT/co 2>&1 | grep -v Warning \
  | grep -v '^  check' | cut -c1-300 | tail -82)
date -u
bash benchmarks/gpu_calls/hybrid_held_out.sh $file $OUT 90
date -u
cd $OUT && tar czf bench.tgz bench && rm -rf bench

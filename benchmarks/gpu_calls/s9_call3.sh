#!/usr/bin/env bash
# Session 9, call 3 (issue 15): the heuristic that call 2's tune shipped
# (benchmarks/gpu_calls/s9_hybrid_heuristic.json: colocated in 3 buckets, 3 deferred) over the
# whole `hybrid` suite (124 cases; 104 of them were never measured by that tune) beside
# hybrid-serial, through the product (`kvtune bench`: plan, check against the float64
# reference, time; the sweep targets table). Then, on the hybrid-quick cases, what of the gain is
# overlap: the shipped knobs run serially (hybrid-parametric schedule=serial) and co-located.
# CUDA events, cold L2, one interference retry at most (every row keeps its quiet ratio).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Ninth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
COMMON="--backend triton --timer events --stopping quiet_retries=1 --no-progress --out $OUT/res"
timeout 400 python3 -m kvtune bench --suite hybrid \
  --policies hybrid-serial,hybrid-tuned:path=benchmarks/gpu_calls/s9_hybrid_heuristic.json \
  $COMMON > $OUT/bench_suite.txt 2>&1
echo "suite rc $?"; date -u
grep -A8 "hybrid sweep" $OUT/bench_suite.txt; tail -2 $OUT/bench_suite.txt
K="prefill_block_m=64:ctas_per_sm=4:prefill_split_cap_waves=2:min_tokens_per_cta=2048:max_waves=2:max_splits=32:decode_schedule=static-heavy-first"
timeout 140 python3 -m kvtune bench --suite hybrid-quick \
  --policies "hybrid-serial,hybrid-parametric:schedule=serial:$K,hybrid-parametric:schedule=colocated:$K" \
  $COMMON > $OUT/bench_quick.txt 2>&1
echo "quick rc $?"; date -u
grep -A8 "hybrid sweep" $OUT/bench_quick.txt; tail -2 $OUT/bench_quick.txt
cd $OUT && tar czf res.tgz res && rm -rf res

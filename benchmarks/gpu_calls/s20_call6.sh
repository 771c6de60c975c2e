#!/usr/bin/env bash
# Session 20, call 6 (H100): the re-validated H100 file with its failing bucket split at 2048 prefill
# tokens (s20_hybrid_heuristic_h100_split.json, benchmarks/split_revalidated.py) on the
# 15 held-out batches of benchmarks/gpu_calls/hybrid_held_out.sh, with the colocated policy
# beside them; `kvtune bench` (CUDA events, cold L2, one guard retry), every row checked against
# the float64 reference before it is timed.
#   bash benchmarks/gpu_calls/s20_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
file=benchmarks/gpu_calls/s20_hybrid_heuristic_h100_split.json
P="--policies hybrid-serial,hybrid-tuned:path=$file,hybrid-colocated --backend triton"
P="$P --timer events --stopping quiet_retries=1 --no-progress --out $OUT/bench"
run() { timeout 150 python3 -m kvtune bench --distribution hybrid "$@" $P 2>&1 \
          | grep -v Warning | tail -14 | cut -c1-220; }
run --batch-sizes 24,40,96,192 --param chunk_tokens=1280 --param context_tokens=10240
run --batch-sizes 20,56,112 --param chunk_tokens=3072 --param context_tokens=5120
run --batch-sizes 48,80 --param chunk_tokens=2048 --param context_tokens=8192 --param decode_q_len=4
run --batch-sizes 64,128 --seeds 300,301 --param source=continuous --param step_token_budget=2560
run --batch-sizes 96 --seeds 300,301 --param source=continuous --param step_token_budget=3584 \
  --param draft_tokens=3 --param accept_rate=0.75
cd $OUT && tar czf bench.tgz bench && rm -rf bench
date -u

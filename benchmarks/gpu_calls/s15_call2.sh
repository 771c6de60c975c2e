#!/usr/bin/env bash
# Session 15, call 2 (issue 16), on an H100: kernels/merge_chunked.py fused into one launch (the
# last child of a chunk's parent job merges it, by a per-(job, head) ticket) against the
# product's merge (64 rows, 4 warps) and the by-level chunked merge, on the same partials in one
# process (profile_decode.py --time --split-cost; each checked first), then the shape matrix's
# variants 1 (llama3-70b-tp8), 5 (G=16) and 7 (head_dim 256) with the fused chunked merge
# against FlashInfer with the same plan.
#   bash benchmarks/gpu_calls/s15_call2.sh [MATRIX_SECONDS]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
P="python3 benchmarks/profile_decode.py --time"
while read -r shape kv dist batch chunk config; do
  C="--shape $shape --kv-dtype $kv --dist $dist --batch $batch --chunk $chunk --config $config"
  timeout 60 $P $C --merge chunked 2>&1 | grep '^{\|Error'
  timeout 60 $P $C --split-cost 2>&1 | grep '^{\|Error'
done <<'CASES'
llama3-70b-tp8 bf16 uniform 256 balanced bn128-w8-s2-pa
llama3-70b-tp8 bf16 skew80 8 2048 bn128-w8-s2-pa
llama3-8b bf16 skew80 8 2048 bn64-w4-s3-pa
g16 bf16 uniform 64 2048 bn64-w4-s4-pa
CASES
date -u
M=${1:-300}
timeout $M python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 1,5,7 \
  --merge chunked --settle-s 0 --time-limit-s $(( M - 20 )) --out $OUT/shapes 2>&1 \
  | grep -v Warning | tail -45
date -u

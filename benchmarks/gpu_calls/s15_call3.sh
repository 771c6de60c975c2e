#!/usr/bin/env bash
# Session 15, call 3 (issue 16), on an H100: the chunked merge as the default stage 2, launched
# as stage 1's programmatic dependent (stage 1 triggers at its start, the merge waits with
# griddepcontrol.wait before it reads a partial row). profile_decode.py --time per case: the
# whole decode with the default (and, same process, the same launch with the merge as an
# ordinary launch: no_pdl_median_us), then with --merge blocks --split-cost (kernels/merge.py,
# stage 1 alone, each merge alone); each case checked against the float64 reference first.
# Then the shape matrix with the default merge against FlashInfer with the same plan, variants
# VARIANTS (default 1,12,6,0: llama3-70b-tp8 bf16 and fp8, head_dim 64, llama3-8b).
#   bash benchmarks/gpu_calls/s15_call3.sh [MATRIX_SECONDS [VARIANTS]]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
P="python3 benchmarks/profile_decode.py --time"
while read -r shape kv dist batch chunk config; do
  C="--shape $shape --kv-dtype $kv --dist $dist --batch $batch --chunk $chunk --config $config"
  timeout 60 $P $C 2>&1 | grep '^{\|Error' | tee -a $OUT/profile.jsonl
  timeout 60 $P $C --merge blocks --split-cost 2>&1 | grep '^{\|Error' | tee -a $OUT/profile.jsonl
done <<'CASES'
llama3-70b-tp8 bf16 uniform 256 balanced bn128-w8-s2-pa
llama3-70b-tp8 bf16 skew80 64 2048 bn128-w8-s2-pa
llama3-8b bf16 skew80 8 2048 bn64-w4-s3-pa
g16 bf16 uniform 64 2048 bn64-w4-s4-pa
CASES
date -u
M=${1:-360}
timeout $M python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants ${2:-1,12,6,0} \
  --settle-s 0 --time-limit-s $(( M - 20 )) --out $OUT/shapes 2>&1 | grep -v Warning | tail -60
date -u

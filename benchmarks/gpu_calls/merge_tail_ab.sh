#!/usr/bin/env bash
# Ready for a GPU call (written in session 15, not yet run): the merge in stage 1's tail
# (kernels/merge_tail.py, prepare_decode(merge="tail"): no merge launch) against the default
# chunked merge: profile_decode.py --time --merge tail --versus chunked --rounds 3 per case (both
# checked against the float64 reference first; 30 CUDA-event pairs with the L2 flushed per
# timing, the two merges alternated three times in one process, so a disturbed period shows as
# rounds apart). Cases: many short splits (llama3-70b-tp8 uniform B=256 balanced-2x, bf16 and
# fp8; G=16 uniform B=64 fixed-2048), one request split ~100 ways (llama3-70b-tp8 skew80 B=64
# fixed-2048, the matrix's miss; llama3-8b skew80 B=8), then, with MATRIX_SECONDS > 0 (default
# 200), the matrix's llama3-70b-tp8 variant with --merge tail against FlashInfer, same plan.
#   bash benchmarks/gpu_calls/merge_tail_ab.sh [MATRIX_SECONDS [ROUNDS]]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
P="python3 benchmarks/profile_decode.py --time --merge tail --versus chunked --rounds ${2:-3}"
while read -r shape kv dist batch chunk config; do
  timeout 90 $P --shape $shape --kv-dtype $kv --dist $dist --batch $batch --chunk $chunk \
    --config $config 2>&1 | grep '^{\|Error' | tee -a $OUT/profile.jsonl
done <<'CASES'
llama3-70b-tp8 bf16 uniform 256 balanced bn128-w8-s2-pa
llama3-70b-tp8 fp8_e4m3 uniform 256 balanced bn128-w4-s3-pa-vp
g16 bf16 uniform 64 2048 bn64-w4-s4-pa
llama3-70b-tp8 bf16 skew80 64 2048 bn128-w8-s2-pa
llama3-8b bf16 skew80 8 2048 bn64-w4-s3-pa
CASES
date -u
if [ "${1:-200}" -gt 0 ]; then
  timeout ${1:-200} python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 1 \
    --merge tail --settle-s 0 --time-limit-s $(( ${1:-200} - 20 )) --out $OUT/shapes 2>&1 \
    | grep -v Warning | tail -20
  date -u
fi

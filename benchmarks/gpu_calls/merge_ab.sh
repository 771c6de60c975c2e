#!/usr/bin/env bash
# Ready for a GPU call (written in session 14, not yet run): the product's merge (64 rows, 4
# warps) against kernels/merge_chunked.py (16-row chunks at 2 warps, level by level) and the
# other MERGE_VARIANTS, on the same partials in one process: profile_decode.py --time
# --split-cost, each case checked against the float64 reference first, 30 CUDA-event pairs with
# the L2 flushed per timing. The cases: many short splits (llama3-70b-tp8 uniform B=256
# balanced-2x, bf16 and fp8; G=16 uniform B=64 fixed-2048: 4,096 merge programs), one request
# split ~100 ways (skew80 B=8 fixed-2048 on llama3-70b-tp8 and llama3-8b), and a mix (llama3-8b
# skew80 B=64 fixed-2048); per case the whole decode with --merge chunked, then with the
# product's merge and --split-cost (about 150 s on a warm machine); then, with a time in
# seconds as the first argument (default 200; 0 skips it), two matrix variants with it.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
P="python3 benchmarks/profile_decode.py --time"
while read -r shape kv dist batch chunk config; do
  C="--shape $shape --kv-dtype $kv --dist $dist --batch $batch --chunk $chunk --config $config"
  # The whole decode with each merge, then stage 1 and the merges alone.
  timeout 60 $P $C --merge chunked 2>&1 | grep '^{\|Error'
  timeout 60 $P $C --split-cost 2>&1 | grep '^{\|Error'
done <<'CASES'
llama3-70b-tp8 bf16 uniform 256 balanced bn128-w8-s2-pa
llama3-70b-tp8 fp8_e4m3 uniform 256 balanced bn128-w4-s3-pa-vp
g16 bf16 uniform 64 2048 bn64-w4-s4-pa
llama3-70b-tp8 bf16 skew80 8 2048 bn128-w8-s2-pa
llama3-8b bf16 skew80 8 2048 bn64-w4-s3-pa
llama3-8b bf16 skew80 64 2048 bn64-w4-s3-pa
CASES
date -u
# The matrix rows whose misses are split plans (variants 1: llama3-70b-tp8, 5: G=16), Triton
# with the chunked merge against FlashInfer with the same plan; call 2 of session 14 has the
# same rows with the product's merge (second argument: seconds for this part, 0 to skip).
if [ "${1:-200}" -gt 0 ]; then
  timeout ${1:-200} python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 1,5 \
    --merge chunked --settle-s 0 --time-limit-s $(( ${1:-200} - 20 )) --out $OUT/shapes 2>&1 \
    | grep -v Warning | tail -30
  date -u
fi

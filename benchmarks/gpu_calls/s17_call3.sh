#!/usr/bin/env bash
# Session 17, call 3 (H100): (1) head_dim 256 (16 q / 8 KV heads): its entry bn64-w4-s2 (196
# registers: two programs per SM) against the same kernel capped at 168 registers (-r168: three
# per SM if ptxas holds it without a costly spill; same arithmetic, profile_decode checks the
# bits), FlashInfer on the same plan, where the matrix's balanced-2x plan gives 2.06-3.9
# programs per SM (skew80 B=8 balanced-2x is the matrix's 0.916 miss); (2) matrix variants not
# yet run with the PDL merge default.
#   bash benchmarks/gpu_calls/s17_call3.sh VARIANT...
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
while read -r dist batch chunk; do
  timeout 80 python3 benchmarks/profile_decode.py --shape hd256 --dist $dist --batch $batch \
    --chunk $chunk --configs bn64-w4-s2,bn64-w4-s2-r168,bn64-w4-s2-r128 --flashinfer 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/hd256.jsonl
done <<'CASES'
skew80 8 balanced
uniform 8 balanced
skew80 64 balanced
uniform 64 2048
CASES
date -u
for v in "$@"; do
  timeout 110 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --settle-s 0 --time-limit-s 100 --out $OUT/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | tee -a $OUT/matrix.log
  rm -f $OUT/v$v/results.json $OUT/v$v/shapes.md $OUT/v$v/bench_log.txt
  date -u | tee -a $OUT/matrix.log
done

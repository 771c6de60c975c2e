#!/usr/bin/env bash
# Ready for a GPU call (written in session 16, not yet run): the twin rule's one-task clause
# (kernels/decode_config.fits_one_task) where it changes the choice. (1) The deep entry and its
# twin on the same case, back to back, with FlashInfer on the same plan (profile_decode.py
# --configs DEEP,TWIN --flashinfer: the matrix's timer, then the 30-pair loop; both checked
# against the float64 reference): llama3-70b-tp8 skew80 fixed-2048 at B=256 and B=64, 262,144
# and 196,608 tokens (the clause picks the deep entry for three of the four, the twin for
# skew80 B=64 at 262,144). (2) The llama3-70b-tp8 matrix variant at both totals with the rule.
#   bash benchmarks/gpu_calls/twin_one_task_check.sh [MATRIX_SECONDS]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for tokens in 262144 196608; do
  for batch in 256 64; do
    timeout 80 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --dist skew80 \
      --batch $batch --chunk 2048 --total-tokens $tokens \
      --configs bn128-w8-s3-pa,bn128-w8-s2-pa --flashinfer 2>&1 | grep '^{\|rror' \
      | tee -a $OUT/twins.jsonl
  done
done
date -u
for tokens in 262144 196608; do
  timeout ${1:-100} python3 benchmarks/bench_kernels.py --sections copy,shapes --variants 1 \
    --total-tokens $tokens --settle-s 0 --time-limit-s $(( ${1:-100} - 10 )) \
    --out $OUT/matrix_$tokens 2>&1 | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy'
  date -u
done

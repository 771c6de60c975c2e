#!/usr/bin/env bash
# Session 24, call 4 (H100): the register-capped twins as the rule (decode_config.CAPPED_TWIN:
# fp8 head_dim 128 bn128-w4-s3-pa-vp -> -r168, llama3-70b-tp8 16-bit twin bn128-w8-s2-pa ->
# -r80; capped_twin's one-wave clause and, beyond one wave, the shallow twins' rule) over the
# shape matrix's llama3-70b-tp8 bf16 (1), llama3-8b fp8 (9) and llama3-70b-tp8 fp8 (12)
# variants at 262,144 and 196,608 tokens, FlashInfer on the same plans and each plan's
# paged-read ceiling in the same process (bench_kernels.py --read-ceiling; the paced matrix
# timer).
#   bash benchmarks/gpu_calls/s24_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for t in 262144 196608; do
  for v in 1 9 12; do
    timeout ${MATRIX_S:-80} python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
      --total-tokens $t --read-ceiling --settle-s 0 --time-limit-s $(( ${MATRIX_S:-80} - 8 )) \
      --out $OUT/t$t-v$v 2>&1 \
      | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-260
    rm -f $OUT/t$t-v$v/bench_log.txt
    date -u
  done
done

#!/usr/bin/env bash
# Session 24, call 5 (H100, warm after call 4): call 4's llama3-70b-tp8 bf16 matrix at 262,144
# tokens again (its files did not come back: eight at most), and the three balanced-2x
# llama3-70b-tp8 bf16 cases at 196,608 tokens that call 4 ran with the twin bn128-w8-s2-pa at
# 0.946-0.994x FlashInfer (uniform B=8 and B=64, skew80 B=8), timed with the twin, its
# register-capped -r80 and the deep entry (profile_decode.py --configs: the matrix's paced
# timer, then 30 paced pairs; checked first).
#   bash benchmarks/gpu_calls/s24_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 80 python3 benchmarks/bench_kernels.py --sections shapes --variants 1 --total-tokens 262144 \
  --read-ceiling --settle-s 0 --time-limit-s 72 --out $OUT/t262144-v1 2>&1 \
  | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-260
rm -f $OUT/t262144-v1/bench_log.txt
date -u
ONE=bn128-w8-s2-pa,bn128-w8-s2-pa-r80,bn128-w8-s3-pa
while read -r dist batch chunk; do
  timeout 60 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --dist $dist \
    --batch $batch --chunk $chunk --total-tokens 196608 --flashinfer --configs $ONE 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/capped196608.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
uniform 8 balanced
uniform 64 balanced
skew80 8 balanced
CASES
date -u

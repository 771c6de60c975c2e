#!/usr/bin/env bash
# Session 26, call 5 (H200): is the capped twin's loss on MHA fp8 uniform B=8 balanced-2x
# (call 4: 671 against 597 us for the entry; 256 pieces of 31,776 tokens beside 256 of 992, the
# backfill branch of decode_config.capped_twin) a matter of task length? The same long+short
# pattern at shorter pieces (MHA, fewer tokens) and with 8 KV heads (llama3-8b fp8, B=32), plus
# the H100 case the branch was set on (llama3-8b fp8 skew80 B=256 balanced-2x): the fp8 entry
# against its capped twin, each checked against float64 first.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
C=bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-r168
while read -r shape dist batch tokens chunk; do
  timeout 60 python3 benchmarks/profile_decode.py --shape $shape --kv-dtype fp8_e4m3 \
    --dist $dist --batch $batch --total-tokens $tokens --chunk $chunk --configs $C 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/rows.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
mha-32 uniform 8 32768 3968
mha-32 uniform 8 131072 15872
mha-32 uniform 8 262144 31744
llama3-8b uniform 32 262144 7936
llama3-8b uniform 32 1048576 31744
llama3-8b skew80 256 262144 balanced
mha-32 skew80 8 262144 balanced
CASES
date -u

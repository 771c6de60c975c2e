#!/usr/bin/env bash
# Session 24, call 6 (H100): the capped-twin rule as committed after call 5 (a capped twin whose
# programs cost at most CAPPED_TWIN_MAX_COST runs wherever the entry's slots are all taken,
# except equal tasks beyond its first wave that fill the entry's waves better): (1) the shape
# matrix's llama3-70b-tp8 bf16 (1), llama3-8b fp8 (9) and llama3-70b-tp8 fp8 (12) variants at
# 262,144 and 196,608 tokens against FlashInfer with each plan's read ceiling; results packed
# into one tar (a call returns eight files at most); (2) shapes the rule was not set on: g16
# (64 q / 4 KV heads) and qwen2.5-7b (G = 7) with fp8 pages, the fp8 entry against its capped
# twin on the cases the rule gives the twin and one it does not (profile_decode.py --configs).
#   bash benchmarks/gpu_calls/s24_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p /tmp/m
for t in 262144 196608; do
  for v in 1 9 12; do
    timeout 80 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
      --total-tokens $t --read-ceiling --settle-s 0 --time-limit-s 72 --out /tmp/m/t$t-v$v 2>&1 \
      | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-230
    rm -f /tmp/m/t$t-v$v/bench_log.txt
  done
done
tar -C /tmp/m -czf $OUT/matrix.tgz .
date -u
FP8=bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-r168
for shape in g16 qwen2.5-7b; do
  while read -r dist batch chunk; do
    timeout 60 python3 benchmarks/profile_decode.py --shape $shape --kv-dtype fp8_e4m3 \
      --dist $dist --batch $batch --chunk $chunk --configs $FP8 2>&1 \
      | grep '^{\|rror' | tee -a $OUT/heldout.jsonl | python3 benchmarks/profile_rows.py
  done <<'CASES'
uniform 8 balanced
uniform 64 balanced
skew80 8 balanced
skew80 64 balanced
skew80 256 balanced
skew80 256 2048
uniform 64 2048
CASES
done
date -u

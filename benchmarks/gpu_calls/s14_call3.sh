#!/usr/bin/env bash
# Session 14, call 3 (issue 16), on an H100:
# 1. where the split costs go on the matrix's worst case (llama3-70b-tp8 uniform B=256: fixed-2048
#    runs 256 tasks, balanced-2x 512 tasks of half the tokens and a merge): profile_decode.py
#    --time --split-cost, bf16 (the matrix's bn128-w8-s2-pa) and fp8 (bn128-w4-s3-pa-vp), chunks
#    2048, balanced (512), 256; and llama3-8b fp8 uniform B=64 balanced for comparison. Each
#    case checked against the float64 reference first; 30 event pairs, L2 flushed.
# 2. the rest of the shape matrix on this card: variants 3 (yi-6b), 6 (head_dim 64), 7 (head_dim
#    256), 8 (fp16), 10 (page 1), 11 (page 64), same command as call 2.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for kv in bf16 fp8_e4m3; do
  cfg=bn128-w8-s2-pa; [ $kv = fp8_e4m3 ] && cfg=bn128-w4-s3-pa-vp
  for chunk in 2048 balanced 256; do
    timeout 60 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --kv-dtype $kv \
      --dist uniform --batch 256 --chunk $chunk --config $cfg --time --split-cost 2>&1 | grep '^{'
  done
done
timeout 60 python3 benchmarks/profile_decode.py --shape llama3-8b --kv-dtype fp8_e4m3 \
  --dist uniform --batch 64 --chunk balanced --config bn128-w4-s3-pa-vp --time --split-cost 2>&1 | grep '^{'
date -u
timeout ${1:-420} python3 benchmarks/bench_kernels.py --sections env,copy,shapes \
  --variants ${2:-3,6,7,8,10,11} --settle-s 10 --time-limit-s $(( ${1:-420} - 40 )) \
  --out $OUT/shapes 2>&1 | grep -v Warning | tail -8
echo "rc ${PIPESTATUS[0]}"
date -u

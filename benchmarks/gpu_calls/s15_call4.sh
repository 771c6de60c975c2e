#!/usr/bin/env bash
# Session 15, call 4 (issue 16), on an H100, after call 3 found the programmatic-dependent merge
# slow on llama3-70b-tp8 (it is now off by default): profile_decode.py --time --merge-pdl on on
# two llama3-70b-tp8 cases (the PDL launch and, same process, the ordinary one), then the shape
# matrix's variants VARIANTS (default 12,9: fp8 KV on llama3-70b-tp8 and llama3-8b) with the
# product's default (chunked merge, ordinary launch) against FlashInfer with the same plan.
#   bash benchmarks/gpu_calls/s15_call4.sh [MATRIX_SECONDS [VARIANTS]]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
P="python3 benchmarks/profile_decode.py --time --merge-pdl on"
timeout 60 $P --shape llama3-70b-tp8 --dist uniform --batch 256 --chunk balanced --config bn128-w8-s2-pa 2>&1 | grep '^{\|Error' | tee -a $OUT/profile.jsonl
timeout 60 $P --shape llama3-70b-tp8 --dist uniform --batch 8 --chunk 2048 --config bn128-w8-s3-pa 2>&1 | grep '^{\|Error' | tee -a $OUT/profile.jsonl
date -u
M=${1:-170}
timeout $M python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants ${2:-12,9} \
  --settle-s 0 --time-limit-s $(( M - 15 )) --out $OUT/shapes 2>&1 | grep -v Warning | tail -30
date -u

#!/usr/bin/env bash
# Ready for a GPU call (written in session 15, not yet run): the chunked merge launched as stage
# 1's programmatic dependent (prepare_decode(merge_pdl=True)) against the ordinary launch, the
# two alternated ROUNDS times (default 3) in one process per case (profile_decode.py --time
# --merge-pdl on --rounds N; checked against the float64 reference first; 30 CUDA-event pairs,
# L2 flushed). Session 15 compared them once each, one after the other, and on llama3-70b-tp8
# whichever ran in a disturbed period read 1.3-2x slow: docs/PERFORMANCE.md.
#   bash benchmarks/gpu_calls/merge_pdl_rounds.sh [ROUNDS]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
P="python3 benchmarks/profile_decode.py --time --merge-pdl on --rounds ${1:-3}"
while read -r shape kv dist batch chunk config; do
  timeout 90 $P --shape $shape --kv-dtype $kv --dist $dist --batch $batch --chunk $chunk \
    --config $config 2>&1 | grep '^{\|Error' | tee -a $OUT/profile.jsonl
done <<'CASES'
llama3-70b-tp8 bf16 uniform 256 balanced bn128-w8-s2-pa
llama3-70b-tp8 bf16 uniform 8 2048 bn128-w8-s3-pa
llama3-70b-tp8 bf16 skew80 64 2048 bn128-w8-s2-pa
llama3-8b bf16 skew80 8 2048 bn64-w4-s3-pa
g16 bf16 uniform 64 2048 bn64-w4-s4-pa
CASES
date -u

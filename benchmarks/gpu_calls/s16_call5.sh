#!/usr/bin/env bash
# Session 16, call 5 (H100): (1) the PDL-launched chunked merge captured in a CUDA graph: replayed
# output bit-for-bit against the eager launch, and timed against the ordinary launch over three
# alternated rounds (profile_decode.py --graph --merge-pdl on); (2) the stage-1 configuration
# sweep (bench_kernels --sections shape-configs, merge PDL on) where 16-bit misses remain:
# hd256 and hd64 (16 q / 8 KV heads) at skew80 B=8 balanced-2x with two controls, and
# llama3-70b-tp8 at skew80 fixed-2048 B=256 and B=64.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
while read -r shape dist batch chunk pdl; do
  timeout 60 python3 benchmarks/profile_decode.py --time --graph --merge-pdl $pdl --rounds 3 \
    --shape $shape --dist $dist --batch $batch --chunk $chunk 2>&1 | grep '^{\|Error' \
    | tee -a $OUT/graph.jsonl
done <<'CASES'
llama3-70b-tp8 skew80 64 2048 on
llama3-70b-tp8 skew80 256 2048 on
g16 uniform 64 2048 on
llama3-8b skew80 8 2048 on
llama3-70b-tp8 skew80 64 2048 off
CASES
date -u
timeout 280 python3 benchmarks/bench_kernels.py --sections copy,shape-configs --variants 7,6 \
  --sweep-cases skew80:8:balanced-2x,uniform:64:fixed-2048,skew80:256:balanced-2x \
  --merge-pdl on --settle-s 0 --time-limit-s 260 --out $OUT/sweep_hd 2>&1 | grep -v Warning \
  | grep -v '^config' | tail -30
date -u
timeout 150 python3 benchmarks/bench_kernels.py --sections copy,shape-configs --variants 1 \
  --sweep-cases skew80:256:fixed-2048,skew80:64:fixed-2048 \
  --merge-pdl on --settle-s 0 --time-limit-s 130 --out $OUT/sweep_70b 2>&1 | grep -v Warning \
  | grep -v '^config' | tail -30
date -u

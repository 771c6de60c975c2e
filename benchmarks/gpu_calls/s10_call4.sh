#!/usr/bin/env bash
# Session 10, call 4 (issue 15): the ninth session's tuned hybrid file (s9_hybrid_heuristic.json)
# beside FlashInfer's POD and FlashInfer's serial launches, in one process, on the paper's sweep
# (context 4K/16K x chunk 512/2048 x 16/128 decodes) and two chunked-prefill mixes, with
# kvtune's serial and colocated steps and both halves alone (the overlap bound).
# FlashInfer's JIT modules (prefill, decode, POD) are built first, in the foreground, so that
# no timing runs beside the compilers (the eighth session's call 7 timed Triton beside them);
# the bench's own background warmup then finds them cached.
# Timer: bench_hybrid's CUDA events around one call, L2 flushed outside them, median of 10;
# every variant checked against the float64 reference before it is timed.
# Run on the device machine from the repository root, with .whl/ (carry [".whl"]); writes $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p $OUT/h
for m in prefill decode pod; do
  MAX_JOBS=$([ $m = pod ] && echo 12 || echo 2) timeout 300 \
    python3 benchmarks/bench_hybrid.py --fi-warmup $m > $OUT/h/jit_$m.log 2>&1 &
done
wait
date -u; tail -2 $OUT/h/jit_*.log
FI="B16:seed0:chunk_tokens=512,context_tokens=4096;B128:seed0:chunk_tokens=512,context_tokens=4096"
FI="$FI;B16:seed0:chunk_tokens=2048,context_tokens=16384;B128:seed0:chunk_tokens=2048,context_tokens=16384"
FI="$FI;B16:seed0:chunk_tokens=512,context_tokens=16384;B128:seed0:chunk_tokens=2048,context_tokens=4096"
FI="$FI;B256:seed0:source=continuous"
timeout 280 python3 benchmarks/bench_hybrid.py --variants serial,colocated --no-tuned \
  --no-checks --heuristic benchmarks/gpu_calls/s9_hybrid_heuristic.json --fi-case-ids "$FI" \
  --budget-s 250 --out $OUT/h 2>&1 | grep -v Warning | tail -40
echo "bench rc ${PIPESTATUS[0]}"
date -u

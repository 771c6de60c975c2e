#!/usr/bin/env bash
# Session 10, call 6 (issue 15): FlashInfer's POD beside the ninth session's tuned hybrid file in
# one process, the way the eighth session's call 7 got POD to run: the bench's own background
# processes build FlashInfer's JIT modules (MAX_JOBS=16) while the Triton cases run, and the
# budget leaves room for the build (call 4 of this session built POD in a separate process
# first, and the bench's warmup then did not finish). Four cases: the three FlashInfer cases of
# bench_hybrid plus B128 + 2048 at 4K (where the file ships colocated). The Triton rows run
# beside the compilers (host-side launch times may suffer on the small case; call 4 of this
# session has them on a quiet host); FlashInfer is timed after the build.
# Run on the device machine from the repository root, with .whl/ (carry [".whl"]); writes $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
C="B16:seed0:chunk_tokens=512,context_tokens=4096;B128:seed0:chunk_tokens=512,context_tokens=4096"
C="$C;B128:seed0:chunk_tokens=2048,context_tokens=16384;B128:seed0:chunk_tokens=2048,context_tokens=4096"
MAX_JOBS=16 timeout 560 python3 benchmarks/bench_hybrid.py --variants serial,colocated --no-tuned \
  --no-checks --heuristic benchmarks/gpu_calls/s9_hybrid_heuristic.json --case-ids "$C" \
  --fi-case-ids "$C" --budget-s 500 --out $OUT/h 2>&1 | grep -v Warning | tail -30
echo "bench rc ${PIPESTATUS[0]}"
date -u

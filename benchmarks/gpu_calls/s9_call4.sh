#!/usr/bin/env bash
# Session 9, call 4 (issue 15): the heuristic tuned in call 2 (s9_hybrid_heuristic.json) side by
# side with FlashInfer's POD and FlashInfer's serial launches in the same process, on held-out
# cases (hybrid-holdout: none of them was measured by the tune's search), with kvtune's serial
# and fixed colocated steps and both halves alone (the overlap bound). bench_hybrid's timer:
# CUDA events around one call, L2 flushed outside them, median of 10; every variant checked
# against the float64 reference before it is timed. FlashInfer's JIT builds in 3 background
# processes meanwhile (MAX_JOBS=4 each).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Ninth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
# First: call 3's worst case (B32 beside 512 tokens at 4K: tuned colocated 0.844x of serial, read
# in a disturbed window, quiet ratio 0.72) measured again, three times, through the product.
for i in 1 2 3; do
  timeout 60 python3 -m kvtune bench --distribution hybrid --batch-sizes 32 \
    --param chunk_tokens=512 --param context_tokens=4096 \
    --policies hybrid-serial,hybrid-tuned:path=benchmarks/gpu_calls/s9_hybrid_heuristic.json \
    --backend triton --timer events --stopping quiet_retries=1 --no-progress --out $OUT/res \
    2>&1 | grep -E "^ *hybrid-(serial|tuned)|rows" | tail -3
done
CASES="chunk_tokens=1536,context_tokens=12288;B48:seed0:chunk_tokens=768,context_tokens=12288"
CASES="$CASES;B64:seed100:source=continuous,step_token_budget=1536"
CASES="$CASES;B256:seed101:source=continuous,step_token_budget=1536"
CASES="$CASES;B64:seed100:accept_rate=0.6"
timeout 480 python3 benchmarks/bench_hybrid.py --suite hybrid-holdout --case-ids "$CASES" \
  --variants serial,colocated --no-tuned --no-checks \
  --heuristic benchmarks/gpu_calls/s9_hybrid_heuristic.json \
  --fi-case-ids "chunk_tokens=1536,context_tokens=12288;B48:seed0:chunk_tokens=768,context_tokens=12288;B64:seed100:source=continuous,step_token_budget=1536" \
  --budget-s 380 --out $OUT/h 2>&1 | grep -v Warning | tail -30
echo "bench rc ${PIPESTATUS[0]}"
date -u
cd $OUT && tar czf res.tgz res && rm -rf res

#!/usr/bin/env bash
# Session 10, call 2 (issue 15).
# 1. The ninth session's two worst suite cases for its tuned file (s9_hybrid_heuristic.json,
#    call 3: B64 + 2048 prefill tokens at 20K context 0.969x of serial, B64 + 1024 at 16K 0.979x),
#    each measured again three times through the product, serial and the file in one process.
# 2. The hybrid tune with the wider default validation (hybrid-holdout + every hybrid case not
#    trained on) and the finalists fallback (--finalists 2), neither run on a GPU before: which
#    buckets ship, which defer, and on which case.
# Timer: CUDA events (kvtune's harness, cold L2), interference guard with one retry.
# Run on the device machine from the repository root, with .whl/ (carry [".whl"]); writes $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for spec in "2048 20480" "1024 16384"; do
  set -- $spec
  for i in 1 2 3; do
    timeout 60 python3 -m kvtune bench --distribution hybrid --batch-sizes 64 \
      --param chunk_tokens=$1 --param context_tokens=$2 \
      --policies hybrid-serial,hybrid-tuned:path=benchmarks/gpu_calls/s9_hybrid_heuristic.json \
      --backend triton --timer events --stopping quiet_retries=1 --no-progress --out $OUT/res \
      2>&1 | grep -E "^ *hybrid-(serial|tuned)|rows" | tail -3
  done
done
date -u
timeout 500 python3 -m kvtune tune --study s10-hybrid --suite hybrid-quick --backend triton \
  --timer events --trials 4 --finalist-rounds 2 --finalists 2 --stopping quiet_retries=1 \
  --out $OUT/res --no-progress > $OUT/tune_log.txt 2>&1
echo "tune rc $?"
grep -v Warning $OUT/tune_log.txt | tail -30
date -u
cd $OUT && tar czf res.tgz res && rm -rf res

#!/usr/bin/env bash
# Session 28, call 3 (H200): (background, niced) FlashInfer's JIT modules of bench_hybrid.py
# (prefill, decode, POD) built ahead for call 4 on the same warm machine; (foreground) issue 16's
# 16-bit skew80 misses of the twenty-fifth session's H200 matrix split into stage 1 alone and
# the merge alone (profile_decode.py --time --split-cost, the product's configuration, 30 paced
# CUDA-event pairs, L2 flushed before each; checked against float64 first), with a uniform case
# of the same shape beside for contrast. Timings beside the JIT's compilers: read them as
# stage 1 against merge shares, not as matrix numbers.
#   bash benchmarks/gpu_calls/s28_call3.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader; nproc
for m in prefill decode pod; do
  jobs=4; [ $m = pod ] && jobs=8
  MAX_JOBS=$jobs nice -n 19 timeout 500 python3 benchmarks/bench_hybrid.py --fi-warmup $m \
    > $OUT/jit_$m.log 2>&1 &
done
while read -r shape dist batch chunk; do
  timeout 60 python3 benchmarks/profile_decode.py --shape $shape --dist $dist --batch $batch \
    --chunk $chunk --time --split-cost 2>&1 | grep '^{\|rror' | tee -a $OUT/split.jsonl \
    | python3 -c "
import json, sys
for l in sys.stdin:
    try: r = json.loads(l)
    except ValueError: print(l.strip()[:200]); continue
    print('$shape', r['dist'], r['batch'], r['chunk'], r.get('config'), r.get('num_tasks'),
          r.get('median_us'), r.get('fraction_of_copy'), 'stage1', r.get('stage1_us'),
          r.get('stage1_fraction_of_copy'), 'merge', r.get('merge_us'), r.get('split_requests'),
          r.get('ok'))"
done <<'CASES'
llama3-8b skew80 64 balanced
llama3-8b uniform 64 balanced
llama3-70b-tp8 skew80 64 2048
yi-6b skew80 64 2048
g16 skew80 64 2048
hd256 skew80 64 balanced
mha-32 skew80 8 balanced
CASES
date -u
wait
tail -2 $OUT/jit_*.log
date -u

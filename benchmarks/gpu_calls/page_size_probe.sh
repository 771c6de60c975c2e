#!/usr/bin/env bash
# Ready for the next session with device time (H200; written in the thirty-first session, not run):
# page sizes 2-15, which no call has timed. Pages below 16 tokens take SMALL_PAGE_TABLE's entries
# (set at page 1): llama3-8b bf16 runs bn128-w4-s3 or its shallow twin bn128-w4-s2 there, where
# page 16 runs bn64-w4-s4-pa or bn64-w4-s3-pa. Each plan at pages 2, 4 and 8 with those four
# configurations, FlashInfer 0.5.3 before and after on the same plan (profile_decode.py
# --configs --flashinfer: paced CUDA events, cold L2; each configuration checked against float64
# first; launches in the product's order). Then fp8 head_dim 256 uniform B=64 balanced-2x at
# pages 1, 4, 16 and 64 with bn64-w4-s4-pa-vp (the thirty-first session: 263.5 us at page 1,
# 291 at 16, 271.5 at 64: why page 16 reads less is not known).
#   bash benchmarks/gpu_calls/page_size_probe.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
sweep() {  # shape kv-dtype page configs case...
  local shape=$1 kv=$2 page=$3 cfgs=$4; shift 4
  for case in "$@"; do
    IFS=: read dist batch chunk <<< "$case"
    timeout 70 python3 benchmarks/profile_decode.py --shape $shape --kv-dtype $kv \
      --page $page --dist $dist --batch $batch --chunk $chunk --configs $cfgs --flashinfer \
      --settle-s 0 2>&1 | grep '^{\|rror' | sed "s/^{/{\"shape\": \"$shape\", \"page\": $page, /" \
      >> $OUT/configs.jsonl
    date -u
  done
}
c=bn128-w4-s3,bn128-w4-s2,bn64-w4-s4-pa,bn64-w4-s3-pa
for page in 2 4 8; do
  sweep llama3-8b bf16 $page $c uniform:64:2048 uniform:64:balanced skew80:64:balanced
done
for page in 1 4 16 64; do
  sweep hd256 fp8_e4m3 $page bn64-w4-s4-pa-vp uniform:64:balanced
done
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["shape"], r["page"], r["dist"], r["batch"], r["chunk"], r.get("num_tasks"),
          r["backend"], r.get("config") or r.get("when"), r.get("status"),
          round(r.get("matrix_us") or 0, 1), r.get("fraction_of_copy"))
PY

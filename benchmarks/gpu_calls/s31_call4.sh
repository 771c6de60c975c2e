#!/usr/bin/env bash
# Session 31, call 4 (H200): head_dim 64 fp8 pages (16 q / 8 KV heads) on the case kinds call 2
# did not sweep. Call 3 ran call 2's new entry bn64-w4-s4-pa-vp (set on two uniform B=64 cases)
# on the whole matrix: 0.34-0.68 of copy and down to 1.16x FlashInfer's fp8 decode on skew80
# balanced-2x plans, where the long pieces of the skewed request bind the launch. Each plan with
# the old entry bn128-w4-s3-pa-vp, call 2's bn64-w4-s4-pa-vp and four others, FlashInfer 0.5.3's
# fp8 decode before and after on the same plan (profile_decode.py --configs --flashinfer: paced
# CUDA events, cold L2; each configuration checked against float64 first). Last, head_dim 256 at
# page 16 on uniform B=64 balanced-2x (1.27x FlashInfer in call 3) with the wider-warp variants.
#   bash benchmarks/gpu_calls/s31_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
sweep() {  # shape page configs case...
  local shape=$1 page=$2 cfgs=$3; shift 3
  for case in "$@"; do
    IFS=: read dist batch chunk <<< "$case"
    timeout 70 python3 benchmarks/profile_decode.py --shape $shape --kv-dtype fp8_e4m3 \
      --page $page --dist $dist --batch $batch --chunk $chunk --configs $cfgs --flashinfer \
      --settle-s 0 2>&1 | grep '^{\|rror' | sed "s/^{/{\"shape\": \"$shape\", \"page\": $page, /" \
      >> $OUT/configs.jsonl
    date -u
  done
}
c64=bn128-w4-s3-pa-vp,bn64-w4-s4-pa-vp,bn128-w4-s4-pa-vp,bn64-w4-s3-pa-vp,bn64-w8-s4-pa-vp,bn128-w8-s4-pa-vp
sweep hd64 16 $c64 skew80:64:balanced skew80:256:balanced skew80:8:balanced uniform:8:balanced \
  uniform:8:2048 skew80:8:2048
sweep hd256 16 bn64-w4-s4-pa-vp,bn64-w8-s4-pa-vp,bn32-w8-s4-pa-vp,bn128-w8-s2-pa-vp \
  uniform:64:balanced
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["shape"], r["page"], r["dist"], r["batch"], r["chunk"], r.get("num_tasks"),
          r["backend"], r.get("config") or r.get("when"), r.get("status"),
          round(r.get("matrix_us") or 0, 1), r.get("ok"))
PY

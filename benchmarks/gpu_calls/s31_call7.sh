#!/usr/bin/env bash
# Session 31, call 7 (H200): fp8 pages at head_dim 128 (llama3-8b, G = 4), the matrix's fp8 variant
# with the most cases below 0.85 of copy (twenty-ninth session: 11 of 12, 0.71-0.88). The entry
# bn128-w4-s3-pa-vp (200 registers from Triton 3.6: two programs per SM) beside the same loop at
# three per SM (its capped twin -r168, and s2 at 168 registers), at four (s2 capped at 128: 40 KB
# of shared memory; local compile, no spill), at more stages (s4, 104 KB) and at eight warps.
# profile_decode.py --configs --flashinfer (paced CUDA events, cold L2; each configuration checked
# against float64 first; FlashInfer 0.5.3's fp8 decode before and after on the same plan).
#   bash benchmarks/gpu_calls/s31_call7.sh
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
c=bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-r168,bn128-w4-s2-pa-vp,bn128-w4-s2-pa-vp-r128
c=$c,bn128-w4-s4-pa-vp,bn128-w8-s3-pa-vp
sweep llama3-8b 16 $c uniform:64:2048 uniform:64:balanced skew80:64:balanced skew80:256:2048 \
  uniform:8:balanced
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["shape"], r["page"], r["dist"], r["batch"], r["chunk"], r.get("num_tasks"),
          r["backend"], r.get("config") or r.get("when"), r.get("status"),
          round(r.get("matrix_us") or 0, 1), r.get("ok"))
PY

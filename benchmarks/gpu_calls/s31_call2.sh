#!/usr/bin/env bash
# Session 31, call 2 (H200): fp8 pages at head_dim 64 and 256 (16 q / 8 KV heads), where call 1
# had head_dim 256 fp8 page 1 at 1.09x FlashInfer's fp8 decode on uniform B=64 balanced-2x (512
# equal tasks; the entry bn64-w4-s3-pa-vp: 168-179 registers, 74 KB, 2-3 programs per SM by the
# local compile, so 1.3-1.9 waves) and the twenty-ninth session had head_dim 64 fp8 page 16 at
# 1.24x on the same plan; head_dim 256 fp8 page 16 has never finished a matrix case. Each plan
# with the entry and the configurations that fit fewer or more programs per SM (same -vp loop),
# FlashInfer 0.5.3's fp8 decode before and after on the same plan (profile_decode.py --configs
# --flashinfer: paced CUDA events, cold L2; each configuration checked against float64 first).
#   bash benchmarks/gpu_calls/s31_call2.sh
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
c256=bn64-w4-s3-pa-vp,bn64-w4-s4-pa-vp,bn64-w8-s3-pa-vp,bn32-w4-s4-pa-vp,bn64-w4-s2-pa-vp
sweep hd256 16 $c256 uniform:64:balanced uniform:64:2048 skew80:64:balanced skew80:8:balanced
sweep hd256 1 $c256 uniform:64:balanced uniform:64:2048
c64=bn128-w4-s3-pa-vp,bn128-w4-s4-pa-vp,bn128-w8-s3-pa-vp,bn64-w4-s4-pa-vp,bn256-w8-s3-pa-vp
sweep hd64 16 $c64 uniform:64:balanced uniform:64:2048
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["shape"], r["page"], r["dist"], r["batch"], r["chunk"], r.get("num_tasks"),
          r["backend"], r.get("config") or r.get("when"), r.get("status"),
          round(r.get("matrix_us") or 0, 1), r.get("ok"))
PY

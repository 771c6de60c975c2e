#!/usr/bin/env bash
# Session 31, call 5 (H200): two questions calls 2-4 left. (1) fp8 head_dim 256: where neither
# the entry bn64-w4-s4-pa-vp (2 per SM) nor its shallow twin s3 (3 per SM) finishes a skewed plan
# in about one longest task, longest_first_config keeps the entry; call 3 had those plans at
# 0.77-0.84 of copy with it (skew80 fixed-2048 B = 64 / 256, balanced-2x B = 256), while on
# 1,024 equal tasks the twin was 11% faster (call 2). Both on those plans. (2) fp8 head_dim 64:
# the entry bn128-w4-s3-pa-vp needs 148 registers from Triton 3.6 (tenth session), so 3 per SM,
# and 512 equal tasks (uniform B=64 balanced-2x) take 1.29 waves: 117.4 us where bn64-w4-s4-pa-vp
# took 93.6. Its register-capped twins -r120 (4 per SM) and -r96 (5) compute the same bits.
# profile_decode.py --configs --flashinfer (paced CUDA events, cold L2; each configuration checked
# against float64 first; FlashInfer 0.5.3's fp8 decode before and after on the same plan).
#   bash benchmarks/gpu_calls/s31_call5.sh
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
sweep hd256 16 bn64-w4-s4-pa-vp,bn64-w4-s3-pa-vp skew80:64:2048 skew80:256:2048 \
  skew80:256:balanced
sweep hd256 1 bn64-w4-s4-pa-vp,bn64-w4-s3-pa-vp skew80:256:2048
sweep hd64 16 bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-r120,bn128-w4-s3-pa-vp-r96 uniform:64:balanced \
  uniform:64:2048 skew80:64:balanced skew80:8:balanced
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["shape"], r["page"], r["dist"], r["batch"], r["chunk"], r.get("num_tasks"),
          r["backend"], r.get("config") or r.get("when"), r.get("status"),
          round(r.get("matrix_us") or 0, 1), r.get("ok"))
PY

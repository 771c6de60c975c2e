#!/usr/bin/env bash
# Session 30, call 5 (H200): head_dim 256 at page 1 (the shape matrix's hd256, 16 q / 8 KV
# heads, bf16), where the twenty-ninth session's held-out variants ran 0.943-0.948x FlashInfer on
# equal-task plans with the page-16 "many" entry bn64-w4-s2 (no small-page entry for head_dim
# 256). Five matrix cases (uniform B = 8 / 64 / 256 fixed-2048, uniform B=64 and skew80 B=64
# balanced-2x; 262,144 tokens), each plan with six configurations in the product's launch order,
# FlashInfer 0.5.3 before and after on the same plan (profile_decode.py --configs --flashinfer:
# paced CUDA events, cold L2; each configuration checked against float64 first).
#   bash benchmarks/gpu_calls/s30_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
cfgs=bn64-w4-s2,bn64-w4-s3,bn128-w4-s2,bn32-w4-s2,bn64-w8-s2,bn128-w8-s2
for case in uniform:8:2048 uniform:64:2048 uniform:256:2048 uniform:64:balanced \
            skew80:64:balanced; do
  IFS=: read dist batch chunk <<< "$case"
  timeout 45 python3 benchmarks/profile_decode.py --shape hd256 --page 1 --dist $dist \
    --batch $batch --chunk $chunk --configs $cfgs --flashinfer --settle-s 0 2>&1 \
    | grep '^{\|rror' >> $OUT/configs.jsonl
  date -u
done
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["dist"], r["batch"], r["chunk"], r.get("num_tasks"), r["backend"],
          r.get("config") or r.get("when"), r.get("status"), round(r.get("matrix_us") or 0, 1),
          r.get("ok"))
PY

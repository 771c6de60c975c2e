#!/usr/bin/env bash
# Session 29, call 5 (H200): llama3-70b-tp8's twelve matrix cases (uniform and skew80, B =
# 8/64/256, fixed-2048 and balanced-2x, 262,144 tokens) at pages 16 and 64, each plan timed with
# five configurations longest first (the product's order): the one-KV-head entry bn128-w8-s3-pa,
# its shallow twin s2-pa and that twin's -r80, and llama3-8b's page-16 entry bn64-w4-s4-pa and
# its twin s3-pa (call 4: s4-pa 0.98-1.02x FlashInfer on four of seven cases where the one-KV-head
# configurations reach 0.90-0.96x); FlashInfer 0.5.3 before and after on the same plan
# (profile_decode.py --configs --flashinfer: paced CUDA events, cold L2; each configuration
# checked against float64). Page 16 to set a rule on, page 64 to hold it out.
#   bash benchmarks/gpu_calls/s29_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
cfgs=bn128-w8-s3-pa,bn128-w8-s2-pa,bn128-w8-s2-pa-r80,bn64-w4-s4-pa,bn64-w4-s3-pa
for page in 16 64; do
  for dist in uniform skew80; do
    for batch in 8 64 256; do
      for chunk in 2048 balanced; do
        timeout 40 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --page $page \
          --dist $dist --batch $batch --chunk $chunk --configs $cfgs --flashinfer \
          --settle-s 0 2>&1 | grep '^{\|rror' >> $OUT/configs.jsonl
      done
    done
  done
  date -u
done
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["page"], r["dist"], r["batch"], r["chunk"], r.get("num_tasks"), r["backend"],
          r.get("config") or r.get("when"), r.get("status"), round(r.get("matrix_us") or 0, 1),
          r.get("ok"))
PY

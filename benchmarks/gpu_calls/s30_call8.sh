#!/usr/bin/env bash
# Session 30, call 8 (H200, on the warm machine of call 7): g16 at page 1, call 7's two misses
# (uniform and skew80 B=8 fixed-2048, 0.91x FlashInfer with the small-page "many-large-group"
# entry bn128-w4-s2) and a balanced-2x control, each plan with five configurations
# (profile_decode.py --configs --flashinfer, as call 5).
#   bash benchmarks/gpu_calls/s30_call8.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
cfgs=bn128-w4-s2,bn128-w4-s3,bn64-w4-s2,bn64-w4-s3,bn128-w8-s2
for case in uniform:8:2048 skew80:8:2048 uniform:64:balanced; do
  IFS=: read dist batch chunk <<< "$case"
  timeout 40 python3 benchmarks/profile_decode.py --shape g16 --page 1 --dist $dist \
    --batch $batch --chunk $chunk --configs $cfgs --flashinfer --settle-s 0 2>&1 \
    | grep '^{\|rror' >> $OUT/configs.jsonl
done
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["dist"], r["batch"], r["chunk"], r.get("num_tasks"), r["backend"],
          r.get("config") or r.get("when"), r.get("status"), round(r.get("matrix_us") or 0, 1))
PY

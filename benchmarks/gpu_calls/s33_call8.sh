#!/usr/bin/env bash
# Thirty-third session, call 8: the widened side split (commit of this script: no longer needs
# one launch to finish late by keys, only more tasks than SMs; set on calls 5 and 7) on batches
# neither call timed, llama3-70b-tp8 bf16 page 16: skew80 B=256 and B=192 fixed-2048 (the
# first a matrix case), skew80 B=128 fixed-4096 at 524,288 tokens, skew50 B=64 and skew90 B=32
# fixed-2048 (all five take the split). benchmarks/two_launch_probe.py as call 7: the
# product's one launch (split off), the product's own launch, FlashInfer 0.5.3 on the same
# plan, the forced split as two caches. Paced CUDA events, cold L2; every launch checked first.
#   bash benchmarks/gpu_calls/s33_call8.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
probe() {
  timeout 100 python3 benchmarks/two_launch_probe.py --shape llama3-70b-tp8 \
    --long-config bn128-w8-s3-pa --short-configs bn128-w8-s2-pa "$@" 2>&1 \
    | grep '^{\|rror' >> $OUT/probe.jsonl
}
probe --batch 256 --chunk 2048
probe --batch 192 --chunk 2048
probe --batch 128 --total-tokens 524288 --chunk 4096
probe --batch 64 --skew 50 --chunk 2048
probe --batch 32 --skew 90 --chunk 2048
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/probe.jsonl"):
    if not l.startswith("{"):
        print(l.strip()); continue
    r = json.loads(l)
    print(r["batch"], r["skew"], r["total_tokens"], r["chunk"], r["what"],
          r.get("config") or r.get("short_config", ""), r.get("tasks", ""),
          round(r["median_us"], 1))
PY

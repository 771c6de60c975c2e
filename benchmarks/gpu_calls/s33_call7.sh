#!/usr/bin/env bash
# Thirty-third session, call 7: the side split on batches it was not set on (call 5 set it on
# llama3-70b-tp8 skew80 B=64 262,144 tokens fixed-2048). benchmarks/two_launch_probe.py per case:
# the product's one launch (side split off), the product's own launch, FlashInfer 0.5.3 on the
# same plan, and the forced split (long part bn128-w8-s3-pa, short part bn128-w8-s2-pa, as two
# caches). Where the rule fires (local check, decode_config.side_launch_split): 131,072 tokens
# fixed-1024 and 524,288 fixed-4096 at B=64; skew 90 at B=64 fixed-2048 does not fire, nor B=96
# and B=128 at skew80 fixed-2048 (one launch on time by the rule): there the forced split says
# what the rule leaves. Page 16, bf16; paced CUDA events, cold L2; every launch checked first.
#   bash benchmarks/gpu_calls/s33_call7.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
probe() {
  timeout 100 python3 benchmarks/two_launch_probe.py --shape llama3-70b-tp8 \
    --long-config bn128-w8-s3-pa --short-configs bn128-w8-s2-pa "$@" 2>&1 \
    | grep '^{\|rror' >> $OUT/probe.jsonl
}
probe --batch 64 --total-tokens 131072 --chunk 1024
probe --batch 64 --total-tokens 524288 --chunk 4096
probe --batch 64 --skew 90 --chunk 2048
probe --batch 96 --chunk 2048
probe --batch 128 --chunk 2048
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

#!/usr/bin/env bash
# Session 12, call 1: (a) the fp8 heuristic's tune finished (s11_fp8_tune.sh with --resume on
# the study carried back in results/s11/fp8: three buckets kept, 129-512 searched and decided),
# exported; (b) the Triton hybrid kernel's fp8 path on a GPU for the first time: one 1024-token
# chunk after an 8192-token context beside 16 and 64 decodes, bf16 and e4m3 pages in the same
# process, every schedule, each row checked against the float64 reference before it is timed.
#   FP8_TRIALS=5 FP8_SEARCH_S=40 bash benchmarks/gpu_calls/s12_call1.sh TUNE_LIMIT_S HYBRID_LIMIT_S
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
git log -1 --format=%h 2>/dev/null
bash benchmarks/gpu_calls/s11_fp8_tune.sh results/s11/fp8 "${1:-370}" 0
date -u
stop=min_samples=5,min_time_ms=5,max_noise=0.02,timeout_s=0.5,quiet_retries=1
for kv in bf16 fp8_e4m3; do
  echo "== hybrid $kv $(date -u +%T)"
  timeout "$(( ${2:-110} / 2 ))" python3 -m kvtune bench --distribution hybrid --batch-sizes 16,64 \
    --param chunk_tokens=1024 --param context_tokens=8192 --kv-dtype $kv \
    --policies hybrid-serial,hybrid-streams,hybrid-colocated,hybrid-fused,pod --backend triton \
    --timer events --stopping $stop --out results/s12/hybrid-$kv --no-progress --format csv \
    2>&1 | cut -c1-220 | tail -12
done
date -u
tar czf $OUT/s12_call1.tgz results/s11/fp8 results/s12

#!/usr/bin/env bash
# Ready for a GPU call on an H100 (written in session 24, not run on an H100; on an H200 the
# twenty-fifth session ran its equivalent: the matrix in s25_call2.sh, the rest in s25_call4.sh):
# new rows for the capped-twin rule as narrowed after the session's calls
# (decode_config.CAPPED_BACKFILL_MAX_ROUNDS, set on every row it had). (1) The shape matrix's
# llama3-8b fp8 (9) and llama3-70b-tp8 fp8 (12) variants at 262,144 and 196,608 tokens, and the
# fp8 variants of shapes never timed against FlashInfer with fp8 pages: qwen2.5-7b (full
# variant 25), g16 (52), MHA 32/32 (43); FlashInfer's fp8 decode on the same plans (paced matrix
# timer; checked first). (2) The twelfth session's fp8 file on traces beside FlashInfer's fp8
# planner (s24_call7.sh's command; two alternated rounds, CUDA-graph replays), which call 7
# measured under the rule before the narrowing. Results packed into one tar.
#   bash benchmarks/gpu_calls/capped_rule_check.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p /tmp/m
for t in 262144 196608; do
  for v in 9 12; do
    timeout 70 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
      --total-tokens $t --settle-s 0 --time-limit-s 62 --out /tmp/m/t$t-v$v 2>&1 \
      | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-200
  done
done
for v in 25 52 43; do
  timeout 60 python3 benchmarks/bench_kernels.py --sections shapes --full --variants $v \
    --settle-s 0 --time-limit-s 52 --out /tmp/m/full-v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-200
done
rm -f /tmp/m/*/bench_log.txt
timeout 200 python3 -m kvtune bench --suite traces --kv-dtype fp8_e4m3 --backend triton \
  --policies flashinfer-tensor-core --heuristic benchmarks/gpu_calls/s12_fp8_heuristic.json \
  --timer graph --rounds 2 --no-progress --format csv \
  --stopping min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1 \
  --out /tmp/m/traces > /tmp/m/traces.csv 2> /tmp/m/traces.err
tail -3 /tmp/m/traces.err
tar -C /tmp/m -czf $OUT/check.tgz .
date -u

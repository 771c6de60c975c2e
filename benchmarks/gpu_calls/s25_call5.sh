#!/usr/bin/env bash
# Session 25, call 5 (NVIDIA H200): the fp8 decode heuristic re-tuned with today's kernel. Call 4
# ran the twelfth session's fp8 file (tuned on an H200 with the kernel of then) on traces at
# 1.258x FlashInfer's fp8 planner in geomean but 0.944x on arxiv B=48 seed 1, where the planner's
# unsplit 384 programs now run in one wave of the register-capped twin (three per SM). Tune on
# prod-mix (fp8 pages, Triton kernel, CUDA-graph replays, 90 s of search), validate on traces
# (the tune's ship/defer check), export, then bench the export on traces beside FlashInfer's fp8
# planner in two alternated rounds per case. Everything packed into one tar.
#   bash benchmarks/gpu_calls/s25_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r=/tmp/r5; rm -rf $r; mkdir -p $r
stop=min_samples=5,min_time_ms=5,max_noise=0.02,timeout_s=0.5,quiet_retries=1
timeout 290 python3 -m kvtune tune --study s25-fp8-h200 --suite prod-mix --validate traces \
  --backend triton --trials 12 --finalists 2 --baselines flashinfer-tensor-core,fa3 \
  --finalist-rounds 2 --timeout-s 90 --stopping $stop --timer graph --kv-dtype fp8_e4m3 \
  --out $r/tune --no-progress > $r/tune.log 2>&1
echo "tune rc=$?"; grep -v Warning $r/tune.log | tail -25 | cut -c1-200
python3 -m kvtune export --study s25-fp8-h200 --storage sqlite:///$r/tune/optuna.db \
  -o $r/s25_fp8_heuristic.json --allow-regression > $r/export.log 2>&1; echo "export rc=$?"
tail -3 $r/export.log
tar -C $r -czf $OUT/call5.tgz .
date -u
timeout 120 python3 -m kvtune bench --suite traces --kv-dtype fp8_e4m3 --backend triton \
  --policies flashinfer-tensor-core --heuristic $r/s25_fp8_heuristic.json \
  --timer graph --rounds 2 --no-progress --format csv \
  --stopping min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1 \
  --out $r/traces > $r/traces.csv 2> $r/traces.err
echo "bench rc=$?"; tail -2 $r/traces.err
tar -C $r -czf $OUT/call5.tgz .
date -u

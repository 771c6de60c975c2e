#!/usr/bin/env bash
# Ready for GPU calls (written in session 25; not run): the fp8 decode heuristic tuned with
# today's kernel and the makespan candidates that count 2 and 3 slots per SM
# (studies/finalists.py MAKESPAN_CTAS_PER_SM), on prod-mix with e4m3 pages (Triton kernel,
# CUDA-graph replays), validated on traces by the tune's ship/defer check, exported, and benched
# on traces beside FlashInfer's fp8 planner in two alternated rounds per case. Session 25's tune
# on an H200 did not finish its four buckets in 290 s: this script resumes. The study lives in
# .tune/ (ignored by git; carry it): each call packs it into $OUT/fp8_retune.tgz; before the next
# call, unpack that into .tune/ here (rm -rf .tune && mkdir .tune && tar -C .tune -xzf FILE) and
# run with carry [".whl", ".tune"]. When the export succeeds the bench runs in the same call.
#   bash benchmarks/gpu_calls/fp8_retune.sh [TUNE_S]     (default 400: seconds for the tune)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r=.tune; mkdir -p $r
resume=(); [ -f $r/tune/optuna.db ] && resume=(--resume) && echo "resuming the study in $r"
stop=min_samples=5,min_time_ms=5,max_noise=0.02,timeout_s=0.5,quiet_retries=1
timeout ${1:-400} python3 -m kvtune tune --study fp8-retune --suite prod-mix --validate traces \
  --backend triton --trials 12 --finalists 2 --baselines flashinfer-tensor-core,fa3 \
  --finalist-rounds 2 --timeout-s 90 --stopping $stop --timer graph --kv-dtype fp8_e4m3 \
  --out $r/tune --no-progress "${resume[@]}" >> $r/tune.log 2>&1
echo "tune rc=$?"; grep -v Warning $r/tune.log | grep "^bucket\|rror" | tail -8 | cut -c1-200
tar -C $r -czf $OUT/fp8_retune.tgz .
if python3 -m kvtune export --study fp8-retune --storage sqlite:///$r/tune/optuna.db \
    -o $r/fp8_heuristic.json --allow-regression > $r/export.log 2>&1; then
  timeout 150 python3 -m kvtune bench --suite traces --kv-dtype fp8_e4m3 --backend triton \
    --policies flashinfer-tensor-core --heuristic $r/fp8_heuristic.json \
    --timer graph --rounds 2 --no-progress --format csv \
    --stopping min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1 \
    --out $r/traces > $r/traces.csv 2> $r/traces.err
  echo "bench rc=$?"; tail -2 $r/traces.err
else
  tail -2 $r/export.log
fi
tar -C $r -czf $OUT/fp8_retune.tgz .
date -u

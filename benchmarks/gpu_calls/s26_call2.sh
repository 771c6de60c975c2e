#!/usr/bin/env bash
# Session 26, call 2 (H200): call 1's fp8 study resumed with the runner-up validation
# (studies/validation_step.py validate_with_runners_up). Call 1's stored results of the two
# deferred buckets (1-8, 33-128) were removed from .tune/tune/optuna.db before this call, so those
# two re-measure their finalists and validate again; 9-32 and 129-512 are kept as call 1 decided.
# Then export, the traces bench of fp8_retune.sh (seeds 0 and 1: the validation cases), and the
# same file on held-out seeds 2 and 3 of every trace (never seen by the tune), beside FlashInfer's
# fp8 planner on the Triton kernel, two alternated rounds per case.
bash benchmarks/gpu_calls/fp8_retune.sh 330
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
r=.tune; stop=min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1
if [ -f $r/fp8_heuristic.json ]; then
  for t in azure-conv azure-code mooncake arxiv sharegpt; do
    timeout 60 python3 -m kvtune bench --distribution $t --seeds 2,3 \
      --batch-sizes 8,16,32,48,64,96,128,192,256 --kv-dtype fp8_e4m3 --backend triton \
      --policies flashinfer-tensor-core --heuristic $r/fp8_heuristic.json \
      --timer graph --rounds 2 --no-progress --format csv --stopping $stop \
      --out $r/heldout > $r/heldout-$t.csv 2> $r/heldout-$t.err
    echo "$t rc=$?"; tail -1 $r/heldout-$t.err
    tar -C $r -czf $OUT/fp8_retune.tgz .
  done
fi
date -u

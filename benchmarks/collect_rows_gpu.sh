#!/usr/bin/env bash
# GPU measurement rows for calibrating and checking the simulator (issue 14): kvtune bench on the
# threshold, prod-mix and traces suites with the Triton kernel (ten policies) and with FlashInfer
# (its own planners and fixed chunks), relaxed stopping to fit one device call.
#
#   bash benchmarks/collect_rows_gpu.sh OUT_DIR [SUITES]
#   TIMER=graph BACKENDS=triton bash benchmarks/collect_rows_gpu.sh OUT_DIR
#
# TIMER (default auto = CUPTI): `graph` replays each decode from a CUDA graph, as serving engines
# run decode; with eager launches a Triton decode of 20-40 us can wait on the host for its merge
# launch, and that wait is in the CUPTI span (first kernel start to last kernel end).
# BACKENDS (default "triton flashinfer"): which backends to measure.
#
# Needs the wheels of shared/device/wheels.sh and the checkout installed into /tmp/site (see
# docs/PERFORMANCE.md). Writes OUT_DIR/rows.tgz (the results folders) and OUT_DIR/collect.log.
set -euo pipefail
out=${1:?usage: collect_rows_gpu.sh OUT_DIR [SUITES]}
suites=${2:-threshold prod-mix traces}
stopping=min_samples=5,min_time_ms=5,max_noise=0.02,timeout_s=0.5
timer=${TIMER:-auto}
backends=${BACKENDS:-triton flashinfer}
res=$(mktemp -d)
mkdir -p "$out"
triton_policies=flashinfer-tensor-core,flashinfer-cuda-core,fa3,trtllm,trtllm-oversub,sglang-triton,vllm-triton,fixed-split,fixed-split:chunk_tokens=512,fixed-split:chunk_tokens=8192,no-split
fi_policies=flashinfer-tensor-core,fixed-split,fixed-split:chunk_tokens=512,fixed-split:chunk_tokens=8192,no-split
{
  echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader)"
  for suite in $suites; do
    for backend in $backends; do
      if [ "$backend" = triton ]; then policies=$triton_policies; else policies=$fi_policies; fi
      t0=$(date +%s)
      python3 -m kvtune bench --suite "$suite" --backend "$backend" --policies "$policies" \
          --stopping "$stopping" --timer "$timer" --no-progress --format csv --out "$res/$backend" \
          > "$out/$backend-$suite.csv" || echo "$backend $suite FAILED"
      echo "$backend $suite ($timer): $(( $(date +%s) - t0 )) s"
    done
  done
} 2>&1 | tee "$out/collect.log"
tar -czf "$out/rows.tgz" -C "$res" .
ls -la "$out"

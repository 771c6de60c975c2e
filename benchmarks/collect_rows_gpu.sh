#!/usr/bin/env bash
# GPU measurement rows for calibrating and checking the simulator (issue 14): kvtune bench on the
# threshold, prod-mix and traces suites with the Triton kernel (ten policies) and with FlashInfer
# (its own planners and fixed chunks), relaxed stopping to fit one device call.
#
#   bash benchmarks/collect_rows_gpu.sh OUT_DIR [SUITES]
#
# Needs the wheels of shared/device/wheels.sh and the checkout installed into /tmp/site (see
# docs/PERFORMANCE.md). Writes OUT_DIR/rows.tgz (the results folders) and OUT_DIR/collect.log.
set -euo pipefail
out=${1:?usage: collect_rows_gpu.sh OUT_DIR [SUITES]}
suites=${2:-threshold prod-mix traces}
stopping=min_samples=5,min_time_ms=5,max_noise=0.02,timeout_s=0.5
res=$(mktemp -d)
mkdir -p "$out"
triton_policies=flashinfer-tensor-core,flashinfer-cuda-core,fa3,trtllm,trtllm-oversub,sglang-triton,vllm-triton,fixed-split,fixed-split:chunk_tokens=512,fixed-split:chunk_tokens=8192,no-split
fi_policies=flashinfer-tensor-core,fixed-split,fixed-split:chunk_tokens=512,fixed-split:chunk_tokens=8192,no-split
{
  echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader)"
  for suite in $suites; do
    t0=$(date +%s)
    python3 -m kvtune bench --suite "$suite" --backend triton --policies "$triton_policies" \
        --stopping "$stopping" --timer auto --no-progress --format csv --out "$res/triton" > "$out/triton-$suite.csv" || echo "triton $suite FAILED"
    echo "triton $suite: $(( $(date +%s) - t0 )) s"
    t0=$(date +%s)
    python3 -m kvtune bench --suite "$suite" --backend flashinfer --policies "$fi_policies" \
        --stopping "$stopping" --timer auto --no-progress --format csv --out "$res/flashinfer" > "$out/flashinfer-$suite.csv" || echo "flashinfer $suite FAILED"
    echo "flashinfer $suite: $(( $(date +%s) - t0 )) s"
  done
} 2>&1 | tee "$out/collect.log"
tar -czf "$out/rows.tgz" -C "$res" .
ls -la "$out"

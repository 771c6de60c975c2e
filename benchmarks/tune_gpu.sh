#!/usr/bin/env bash
# The GPU tuning run of docs/PERFORMANCE.md ("Tuning on the GPU"): `kvtune tune` with the triton
# backend on the prod-mix and threshold suites, in one call of the device machine.
#
#   bash benchmarks/tune_gpu.sh OUT_DIR [TRIALS] [STOPPING]
#
# Search time is capped per suite (--timeout-s) so that both fit one 10-minute call.
# Needs optuna (and cupti-python for the CUPTI timer): on the device machine, install the wheels
# of shared/device/wheels.sh first and put /tmp/site on PYTHONPATH. Writes OUT_DIR/tune.tgz
# (results folders and the Optuna database) and OUT_DIR/tune.log.
set -euo pipefail
out=${1:?usage: tune_gpu.sh OUT_DIR [TRIALS] [STOPPING]}
trials=${2:-16}
stopping=${3:-min_samples=10,min_time_ms=10,max_noise=0.01,timeout_s=1}
res=$(mktemp -d)
log=$out/tune.log
kvtune() { python3 -m harness.cli "$@"; }
{
  echo "== $(date -u +%FT%TZ) nvidia-smi: $(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader)"
  # search time per suite (s): the device call is limited to 10 minutes in all
  for spec in prod-mix:150 threshold:240; do
    suite=${spec%%:*}
    start=$(date +%s)
    kvtune tune --study "gpu-$suite" --suite "$suite" --backend triton --timer auto \
        --trials "$trials" --seed 0 --finalist-rounds 2 --stopping "$stopping" \
        --timeout-s "${spec##*:}" --out "$res" --no-progress || echo "== $suite failed: $?"
    echo "== $suite: wall $(( $(date +%s) - start )) s"
    tar czf "$out/tune.tgz" -C "$res" .  # after each suite, so a cut-off call keeps the first
  done
} 2>&1 | tee "$log"

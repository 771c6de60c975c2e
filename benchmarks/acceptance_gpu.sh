#!/usr/bin/env bash
# The acceptance runs of issues 12, 13 and 15 in one device call (about 9 minutes on one
# H100/H200), each capped so that the call ends inside its 10-minute limit and whatever a capped
# step measured is kept:
#   memory    benchmarks/memory_gpu.sh   (issue 13: GPU memory cap, one-line refusal)   <= 70 s
#   hybrid    benchmarks/bench_hybrid.py (issue 15: hybrid schedules vs serial, FlashInfer POD)  <= 210 s
#   generalise benchmarks/generalise_gpu.sh with GENERALISE_DIRECTIONS (default "a": tune on
#             traces, validate on prod-mix + threshold), both backends (issue 12)  <= 300 s
#
#   bash benchmarks/acceptance_gpu.sh OUT
#
# Needs the wheels of shared/device/wheels.sh and the checkout installed into /tmp/site. Writes
# OUT/acceptance.tgz (every step's files) and OUT/acceptance.log.
set -uo pipefail
out=${1:?usage: acceptance_gpu.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
mkdir -p "$out"
{
  echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader)"
  t0=$(date +%s)
  timeout 70 bash "$here/memory_gpu.sh" "$work/memory"; echo "== memory: rc $?, $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  timeout 210 python3 "$here/bench_hybrid.py" --out "$work/hybrid" --budget-s 150
  echo "== hybrid: rc $?, $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  GENERALISE_DIRECTIONS=${GENERALISE_DIRECTIONS:-a} timeout 300 bash "$here/generalise_gpu.sh" "$work/generalise"
  echo "== generalise: rc $?, $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$out/acceptance.log"
tar czf "$out/acceptance.tgz" -C "$work" .

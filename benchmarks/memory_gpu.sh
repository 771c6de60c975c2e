#!/usr/bin/env bash
# GPU memory of `kvtune tune --backend triton --workers 1` and the one-line refusal of a batch
# that cannot fit (issue 13), with nvidia-smi's memory.used sampled every 200 ms alongside.
#
#   bash benchmarks/memory_gpu.sh OUT [--dry-run]
#
# On the device machine: PYTHONPATH=/tmp/site (optuna wheel installed there, kvtune installed with
# pip --target /tmp/site; PYTHON overrides python3). Writes OUT/memory.json, OUT/memory.md and OUT/nvidia_smi.csv; exits 1
# when the tune fails or the too-large batch is not refused in one line. About 40 s on one H100.
set -euo pipefail
out=${1:?usage: memory_gpu.sh OUT [--dry-run]}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
smi=""
if [ "${2:-}" != "--dry-run" ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,memory.used,memory.total --format=csv,nounits -lms 200 \
      > "$out/nvidia_smi.csv" &
  smi=$!
fi
status=0
timeout 110 "${PYTHON:-python3}" "$here/memory_gpu.py" "$out" ${2:-} || status=$?
if [ -n "$smi" ]; then
  kill "$smi" 2>/dev/null || true
  wait "$smi" 2>/dev/null || true
  peak=$(awk -F', ' 'NR > 1 && $2 + 0 > m { m = $2 + 0; t = $3 } END { print m " of " t " MiB" }' "$out/nvidia_smi.csv")
  echo "- nvidia-smi peak memory.used: $peak" | tee -a "$out/memory.md"
fi
exit $status

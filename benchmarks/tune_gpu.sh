#!/usr/bin/env bash
# The GPU tuning runs of docs/PERFORMANCE.md: `kvtune tune` on the prod-mix and threshold suites
# in one call of the device machine, then `kvtune export` of each study.
#
#   bash benchmarks/tune_gpu.sh OUT_DIR [BACKEND] [TRIALS] [STOPPING] [-- extra kvtune tune args]
#
# BACKEND: triton (default) or flashinfer. Search time is capped per suite (--timeout-s) so that
# both fit one 10-minute call. Needs optuna (and cupti-python for the CUPTI timer, flashinfer for
# that backend): on the device machine, install the wheels of shared/device/wheels.sh first and
# put /tmp/site on PYTHONPATH. Writes OUT_DIR/tune.tgz (results folders, exported heuristics and
# the Optuna database) and OUT_DIR/tune.log.
set -euo pipefail
out=${1:?usage: tune_gpu.sh OUT_DIR [BACKEND] [TRIALS] [STOPPING] [-- args]}
backend=${2:-triton}
trials=${3:-16}
stopping=${4:-min_samples=10,min_time_ms=10,max_noise=0.01,timeout_s=1}
shift $(( $# < 4 ? $# : 4 ))
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
res=$(mktemp -d)
log=$out/tune.log
kvtune() { python3 -m kvtune "$@"; }
{
  echo "== $(date -u +%FT%TZ) nvidia-smi: $(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader)"
  for spec in prod-mix:150 threshold:240; do
    suite=${spec%%:*}
    study="gpu-$backend-$suite"
    start=$(date +%s)
    kvtune tune --study "$study" --suite "$suite" --backend "$backend" --timer auto \
        --trials "$trials" --seed 0 --finalist-rounds 2 --stopping "$stopping" \
        --timeout-s "${spec##*:}" --out "$res" --no-progress "$@" || echo "== $suite failed: $?"
    echo "== $suite: wall $(( $(date +%s) - start )) s"
    kvtune export --study "$study" --storage "sqlite:///$res/optuna.db" -o "$res/$study.json" \
        || echo "== export of $study failed: $?"
    tar czf "$out/tune.tgz" -C "$res" .  # after each suite, so a cut-off call keeps the first
  done
} 2>&1 | tee "$log"

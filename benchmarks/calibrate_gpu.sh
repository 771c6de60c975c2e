#!/usr/bin/env bash
# GPU rows for the simulator's calibration (issue 14): `kvtune bench --suite calibrate` on the
# triton and flashinfer backends, then a held-out set (other traces and seeds) on both, in one
# call of the device machine (about 4 minutes on one H100/H200: every step has a time cap and keeps
# the rows it measured when the cap cuts it).
#
#   bash benchmarks/calibrate_gpu.sh OUT_DIR [--dry-run]
#
# Each bench measures the device copy bandwidth first (its ceiling; rows carry bw_fraction =
# floor / latency as a fraction of it) and verifies every plan's output against the float64
# reference before timing it. Writes OUT_DIR/calibrate.tgz (the results folders: fit/<backend>
# and held-out/<backend>, re-packed after each step so a cut-off call keeps what finished) and
# OUT_DIR/calibrate.log. Needs flashinfer 0.5.3 for the flashinfer steps (a missing one is logged
# and skipped). --dry-run: the simulator stands in for both kernels on the smoke suite, then
# `kvtune calibrate` and `kvtune fidelity` run on the result (the CPU test of this script).
#
# Afterwards, on any machine (tar xzf calibrate.tgz -C R):
#   kvtune calibrate --from R/fit/triton --held-out R/held-out/triton --kernel triton -o h200-triton.json
#   kvtune calibrate --from R/fit/flashinfer --held-out R/held-out/flashinfer \
#       --kernel flashinfer-tensor-core -o h200-flashinfer-tensor-core.json
#   kvtune calibrate --from R/fit/flashinfer --held-out R/held-out/flashinfer \
#       --kernel flashinfer-cuda-core -o h200-flashinfer-cuda-core.json
#   kvtune fidelity --gpu R/held-out/triton --device-model h200-triton.json
set -euo pipefail
out=${1:?usage: calibrate_gpu.sh OUT_DIR [--dry-run]}
dry=${2:-}
mkdir -p "$out"
res=$(mktemp -d)
log=$out/calibrate.log
py=${PYTHON:-python3}
kvtune() { "$py" -m kvtune "$@"; }

# Policies that vary splits, CTAs per SM and schedules (the calibrate suite varies the batches).
triton_policies="no-split,no-split:ctas_per_sm=1,no-split:ctas_per_sm=2,fixed-split:chunk_tokens=512,\
fixed-split:chunk_tokens=2048,fixed-split:chunk_tokens=8192,\
fixed-split:chunk_tokens=2048:schedule=persistent-heavy-first:ctas_per_sm=2,\
fixed-split:chunk_tokens=1024:schedule=persistent-round-robin:ctas_per_sm=1,\
flashinfer-tensor-core,fa3,trtllm,sglang-triton"
# FlashInfer runs its own planners and single-chunk plans (fixed_split_size / disable_split_kv).
fi_policies="flashinfer-tensor-core,flashinfer-cuda-core,no-split,fixed-split:chunk_tokens=512,\
fixed-split:chunk_tokens=2048,fixed-split:chunk_tokens=8192,trtllm,trtllm-oversub"
stopping="min_samples=5,min_time_ms=5,max_noise=0.02,timeout_s=0.5"
fit_suite=(--suite calibrate)
held_sets=("azure-conv:8,32,128,256:11" "mooncake:16,64,192:12")
backends=(triton flashinfer)
# seconds: fit triton, fit flashinfer (FlashInfer JIT-compiles its two decode modules first, about
# 25 s), held-out triton, held-out flashinfer, head_dim 256 on triton (bytes in flight).
budget=(75 75 35 30 25)
if [ "$dry" = "--dry-run" ]; then
  fit_suite=(--suite smoke)
  held_sets=("uniform-range:4,8:11")
  budget=(120 120 120 120 120)
fi

bench() {  # bench BACKEND FOLDER SECONDS ARGS...
  local backend=$1 folder=$2 seconds=$3
  shift 3
  local pols=$triton_policies
  # Triton decodes are replayed from a CUDA graph, as engines run decode: eagerly launched from
  # Python, a 20-40 us decode can wait on the host for its merge kernel, and CUPTI's span counts
  # that wait (docs/PERFORMANCE.md, third session). FlashInfer launches from C++ (CUPTI).
  local how=(--backend "$backend" --stopping "$stopping" --timer graph)
  if [ "$backend" = flashinfer ]; then pols=$fi_policies; how=(--backend "$backend" --stopping "$stopping"); fi
  if [ "$dry" = "--dry-run" ]; then
    how=(--backend simulator --device-model h200 --sim-kernel \
         "$([ "$backend" = flashinfer ] && echo flashinfer-tensor-core || echo triton)")
  fi
  local start
  start=$(date +%s)
  mkdir -p "$res/$folder"
  # SIGINT, not SIGTERM: kvtune bench then writes the rows it has and marks the run failed.
  timeout -s INT -k 10 "$seconds" "$py" -m kvtune bench "${how[@]}" --policies "$pols" --out "$res/$folder" \
      --no-progress --format markdown "$@" >> "$res/$folder.md" \
      || echo "== bench $backend $folder stopped: exit $? (rows so far are kept)"
  echo "== bench $backend $folder: wall $(( $(date +%s) - start )) s"
  tar czf "$out/calibrate.tgz" -C "$res" .
}

{
  echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version \
      --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
  i=0
  for backend in "${backends[@]}"; do
    bench "$backend" "fit/$backend" "${budget[$i]}" "${fit_suite[@]}"
    i=$((i + 1))
  done
  for backend in "${backends[@]}"; do
    n=${#held_sets[@]}
    for set in "${held_sets[@]}"; do
      IFS=: read -r dist sizes seed <<< "$set"
      bench "$backend" "held-out/$backend" "$(( ${budget[$i]} / n ))" --distribution "$dist" \
          --batch-sizes "$sizes" --seeds "$seed"
    done
    i=$((i + 1))
  done
  # A second KV row width (1,024 bytes per token and head) so the fit sees bytes in flight vary.
  bench triton "fit/triton" "${budget[$i]}" "${fit_suite[@]}" --head-dim 256
  if [ "$dry" = "--dry-run" ]; then
    fit=$res/fit/triton
    held=$res/held-out/triton
    kvtune calibrate --from "$fit" --held-out "$held" --kernel triton -o "$out/dry-triton.json" \
        --max-evaluations 3
    kvtune fidelity --gpu "$held" --device-model "$out/dry-triton.json"
  fi
  echo "== done $(date -u +%FT%TZ)"
} 2>&1 | tee "$log"

#!/usr/bin/env bash
# Issue 12 acceptance: tuned heuristics judged on cases they were never tuned on.
#
#   bash benchmarks/generalise_gpu.sh OUT [BACKEND...]        (default backends: triton flashinfer)
#   bash benchmarks/generalise_gpu.sh OUT simulator            (CPU: a tiny run, tested)
#
# Per backend, two directions: tune on `traces` and validate on `prod-mix` + `threshold`; then
# tune on `prod-mix` and validate on `traces`. Each study is exported, then the export is run with
# `kvtune bench --heuristic` on the validation cases next to FlashInfer's own planner and a chunk
# grid (512..16384 tokens), and benchmarks/generalise_table.py prints the per-bucket table (train
# score, validation score, vs default, vs best chunk) and the targets. Every output is checked
# against the reference before it is timed (kvtune's gate); the GPU backends measure the copy
# bandwidth in the same run (the fraction-of-ceiling columns). Budget: about 4-6 minutes per
# backend and direction on one H200 (few trials, relaxed stopping, --timeout-s caps): run one backend per
# call (`... OUT/triton triton`, `... OUT/flashinfer flashinfer`). Writes OUT/table.md, OUT/table.json,
# OUT/generalise.log and OUT/results.tgz. GENERALISE_DIRECTIONS="a" runs only the first
# direction (the CPU test does). GENERALISE_TIMER (default auto = CUPTI) is the GPU timer of the
# tune and bench runs: `graph` replays each decode from a CUDA graph as serving engines do, which
# keeps the host's launch of the merge kernel out of 20-40 us Triton decodes.
# GENERALISE_QUIET_RETRIES sets the interference guard's retries (harness/stopping.py).
# GENERALISE_ROUNDS (default 1) measures the validation benches in that many alternated rounds
# per case (`kvtune bench --rounds`): the "never slower than the engine's planner" verdict then
# carries no drift between the series (up to 2.5% in one round on an H100, PERFORMANCE.md).
# GENERALISE_KV_DTYPE (default: the query type) runs every tune and bench on that KV cache type,
# e.g. fp8_e4m3: the study is then tuned on fp8 and judged on fp8.
# GENERALISE_RESULTS=DIR keeps the studies and runs in DIR (default: a temporary folder). Run
# again with the same DIR (on a device whose calls are time-limited: carry DIR back), each tune
# whose study is already in DIR resumes (`kvtune tune --resume`): the buckets it decided are
# kept, not searched or measured again, and the rest are searched and decided.
set -euo pipefail
out=${1:?usage: generalise_gpu.sh OUT [BACKEND...]}
shift
backends=("$@")
[ ${#backends[@]} -eq 0 ] && backends=(triton flashinfer)
mkdir -p "$out"
res=${GENERALISE_RESULTS:-$(mktemp -d)}
mkdir -p "$res"
log=$out/generalise.log
here=$(cd "$(dirname "$0")" && pwd)
kvtune() { python3 -m kvtune "$@"; }
# Whether study $1 is in the storage of $res/tune (then its tune resumes).
has_study() {
  [ -f "$res/tune/optuna.db" ] || return 1
  python3 -c 'import sys, optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
names = [s.study_name for s in optuna.get_all_study_summaries("sqlite:///" + sys.argv[1])]
sys.exit(0 if any(n.startswith(sys.argv[2] + "/") for n in names) else 1)' "$res/tune/optuna.db" "$1"
}
chunks=""
for c in 512 1024 2048 4096 8192 16384; do chunks+="fixed-split:chunk_tokens=$c,"; done
kv=()
[ -n "${GENERALISE_KV_DTYPE:-}" ] && kv=(--kv-dtype "$GENERALISE_KV_DTYPE")
t0=$(date +%s)
{
  for backend in "${backends[@]}"; do
    if [ "$backend" = simulator ]; then
      # CPU mode: tiny suites, the simulator, a few trials.
      common=(--backend simulator --device-model h200 --trials 3 --sampler random --finalists 2
              --finalist-rounds 1 --baselines flashinfer-tensor-core,fa3)
      train_a=(--distribution azure-conv --batch-sizes 8,64 --seeds 0)
      val_a=(--validate distribution:prod-mix)
      bench_a=("--distribution prod-mix --batch-sizes 8,64 --seeds 100")
      train_b=(--distribution prod-mix --batch-sizes 8,64 --seeds 0)
      val_b=(--validate distribution:azure-conv)
      bench_b=("--distribution azure-conv --batch-sizes 8,64 --seeds 100")
      measure=(--backend simulator --device-model h200)
    else
      # GENERALISE_QUIET_RETRIES: the interference guard's retries per measurement (default 5;
      # on a disturbed machine 1 keeps a run inside one device call).
      stop=min_samples=5,min_time_ms=5,max_noise=0.02,timeout_s=0.5${GENERALISE_QUIET_RETRIES:+,quiet_retries=$GENERALISE_QUIET_RETRIES}
      # FlashInfer runs one chunk per batch: the search is one-dimensional (8 trials), then its
      # best chunk and the makespan candidates are re-measured. Triton: the five-knob search's
      # top two and the makespan candidates. FlashInfer's backend cannot run fa3's per-request
      # splits, so its baselines are its own planner and the 2048-token chunk.
      if [ "$backend" = flashinfer ]; then
        picks=(--trials 8 --finalists 1 --baselines flashinfer-tensor-core,fixed-split)
      else
        picks=(--trials 12 --finalists 2 --baselines flashinfer-tensor-core,fa3)
      fi
      timer=${GENERALISE_TIMER:-auto}
      common=(--backend "$backend" "${picks[@]}" --finalist-rounds 2 --timeout-s 90
              --stopping "$stop" --timer "$timer")
      train_a=(--suite traces)
      val_a=(--validate prod-mix --validate threshold)
      bench_a=("--suite prod-mix" "--suite threshold")
      train_b=(--suite prod-mix)
      val_b=(--validate traces)
      bench_b=("--suite traces")
      measure=(--backend "$backend" --stopping "$stop" --timer "$timer")
    fi
    for dir in ${GENERALISE_DIRECTIONS:-a b}; do
      if [ $dir = a ]; then train=("${train_a[@]}"); val=("${val_a[@]}"); benches=("${bench_a[@]}"); name=traces
      else train=("${train_b[@]}"); val=("${val_b[@]}"); benches=("${bench_b[@]}"); name=prodmix; fi
      study="gen-$backend-$name"
      start=$(date +%s)
      resume=()
      has_study "$study" && resume=(--resume) && echo "== $study: resuming the study in $res"
      kvtune tune --study "$study" "${train[@]}" "${val[@]}" "${common[@]}" "${kv[@]}" --out "$res/tune" \
          --no-progress "${resume[@]}" || { echo "== tune $study failed: $?"; continue; }
      kvtune export --study "$study" --storage "sqlite:///$res/tune/optuna.db" \
          -o "$res/$study.json" --allow-regression || { echo "== export $study failed: $?"; continue; }
      for b in "${benches[@]}"; do
        # shellcheck disable=SC2086
        kvtune bench $b --policies "${chunks}flashinfer-tensor-core" --heuristic "$res/$study.json" \
            "${measure[@]}" "${kv[@]}" --rounds "${GENERALISE_ROUNDS:-1}" \
            --out "$res/bench-$study" --no-progress --format csv > /dev/null \
            || echo "== bench of $study on $b failed: $?"
      done
      echo "== $study: wall $(( $(date +%s) - start )) s"
      tar czf "$out/results.tgz" -C "$res" .
    done
  done
  python3 "$here/generalise_table.py" "$res" --out "$out/table.json" --markdown "$out/table.md"
  echo "== total wall $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$log"

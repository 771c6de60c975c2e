#!/usr/bin/env bash
# Session 11 (issue 16): the fp8 heuristic tuned again, on the -vp kernel, spread over device
# calls. generalise_gpu.sh's direction b with GENERALISE_KV_DTYPE=fp8_e4m3 and the graph timer
# (train prod-mix fp8, validate traces fp8, baselines FlashInfer's fp8 planner and fa3), written
# out so that its storage lives in RES, which the next call carries back: a call that runs out
# of time keeps its trials, baselines and finished buckets (studies/tune.py keeps a bucket's
# result in the storage as soon as it is decided), and the next call runs the same command with
# --resume. FP8_TRIALS / FP8_SEARCH_S override --trials (12) and the search's time limit (90 s):
# call 3's search phase reached only 7, 5, 2 and 2 trials of 12 in its 90 s, and a bucket is kept
# on resume only when it has no trials left to search, so call 4 resumes with --trials 5 (the
# two finished buckets keep their results, the other two search 3 more trials in 40 s and are
# finished). Once the tune is complete: export, bench the export on traces fp8 beside FlashInfer's
# planner and the chunk grid 512..16384, and the per-bucket table (benchmarks/generalise_table.py).
#
#   bash benchmarks/gpu_calls/s11_fp8_tune.sh RES TUNE_LIMIT_S BENCH_LIMIT_S (0: no bench)
set -u
res=${1:?RES}; tune_limit=${2:?TUNE_LIMIT_S}; bench_limit=${3:?BENCH_LIMIT_S}
study=gen-triton-prodmix
mkdir -p "$res"
stop=min_samples=5,min_time_ms=5,max_noise=0.02,timeout_s=0.5,quiet_retries=1
resume=()
[ -f "$res/tune/optuna.db" ] && resume=(--resume)
echo "== tune ${resume[*]:-(new)} $(date -u +%T)"
timeout "$tune_limit" python3 -m kvtune tune --study $study --suite prod-mix --validate traces \
  --backend triton --trials ${FP8_TRIALS:-12} --finalists 2 --baselines flashinfer-tensor-core,fa3 \
  --finalist-rounds 2 --timeout-s ${FP8_SEARCH_S:-90} --stopping $stop --timer graph --kv-dtype fp8_e4m3 \
  --out "$res/tune" --no-progress "${resume[@]}" > "$res/tune_log_$(date -u +%H%M%S).txt" 2>&1
rc=$?
echo "== tune rc $rc $(date -u +%T)"
grep -hv Warning "$res"/tune_log_*.txt | grep -E "bucket|kvtune tune" | tail -20
[ $rc -eq 0 ] || exit 0
python3 -m kvtune export --study $study --storage "sqlite:///$res/tune/optuna.db" \
  -o "$res/$study.json" --allow-regression || exit 0
# BENCH_LIMIT_S 0: no bench (the tune's own validation rows on traces fp8 are the held-out
# check, beside FlashInfer's planner and fa3 in the same run); the table from the tune alone.
if [ "$bench_limit" -eq 0 ]; then
  python3 benchmarks/generalise_table.py "$res" --out "$res/table.json" --markdown "$res/table.md"
  cat "$res/table.md"
  exit 0
fi
chunks=""
for c in 512 1024 2048 4096 8192 16384; do chunks+="fixed-split:chunk_tokens=$c,"; done
echo "== bench $(date -u +%T)"
timeout "$bench_limit" python3 -m kvtune bench --suite traces --policies "${chunks}flashinfer-tensor-core" \
  --heuristic "$res/$study.json" --backend triton --stopping $stop --timer graph \
  --kv-dtype fp8_e4m3 --out "$res/bench-$study" --no-progress --format csv > /dev/null
echo "== bench rc $? $(date -u +%T)"
python3 benchmarks/generalise_table.py "$res" --out "$res/table.json" --markdown "$res/table.md"
cat "$res/table.md"

#!/usr/bin/env bash
# Ready for the next session with device time (H200 first: the misses are the twenty-fifth
# session's H200 matrix): stage 1's launch order "longest-first" (kernels/decode.py
# LAUNCH_ORDERS, MODE 3: items longest first, the KV heads inner; the same bits) against the
# plan's order, alternated three rounds in one process per case (profile_decode.py --time
# --versus-order, 30 paced CUDA-event pairs, L2 flushed before each; both checked against
# float64 first), with the configuration the product launches (--config product) and with the
# table entry. The cases: the 16-bit skew80 misses at 262,144 tokens (the H200 Triton simulator
# model puts longest-first 3-15% ahead on five of them; twenty-eighth session), uniform and
# skewed controls that must not lose, and three fp8 cases (1 byte per element). Read
# versus_order_median_us against median_us.
# Ran as s29_call1.sh (twenty-ninth session), when the plan's order was profile_decode.py's
# default; since longest first is (the product's order), the case names --launch-order plan.
#   bash benchmarks/gpu_calls/launch_order_check.sh [OUT_DIR]
out=${1:-$OUT}
while read -r shape dist batch chunk kv; do
  for cfg in product entry; do
    c=""; [ $cfg = product ] && c="--config product"
    timeout 90 python3 benchmarks/profile_decode.py --shape $shape --dist $dist --batch $batch \
      --chunk $chunk --kv-dtype ${kv:-bf16} $c --time --launch-order plan \
      --versus-order longest-first --rounds 3 \
      2>&1 \
      | grep '^{\|rror' | tee -a $out/launch_order.jsonl | python3 -c "
import json, sys
for l in sys.stdin:
    try: r = json.loads(l)
    except ValueError: print(l.strip()[:200]); continue
    print('$shape', r['kv_dtype'], r['dist'], r['batch'], r['chunk'], r.get('config'),
          r.get('num_tasks'),
          'plan', r.get('median_us'), 'longest-first', r.get('versus_order_median_us'),
          [(round(x['us'], 1), round(x['versus_order_us'], 1)) for x in r.get('rounds', [])],
          r.get('ok'))"
  done
done <<'CASES'
llama3-8b skew80 64 balanced
llama3-70b-tp8 skew80 64 2048
yi-6b skew80 64 2048
g16 skew80 64 2048
hd256 skew80 64 balanced
mha-32 skew80 8 balanced
llama3-8b skew80 8 balanced
llama3-8b skew80 256 balanced
llama3-8b uniform 64 balanced
llama3-8b uniform 8 2048
llama3-70b-tp8 uniform 256 balanced
llama3-70b-tp8 skew80 256 2048
llama3-8b skew80 64 balanced fp8_e4m3
llama3-8b skew80 256 balanced fp8_e4m3
llama3-8b uniform 64 2048 fp8_e4m3
CASES
# MATRIX=1: then the shape matrix of the variants with a skew80 miss (llama3-8b, yi-6b, MHA,
# g16, hd256 at bf16, page 16) with the longest-first launch order and FlashInfer on the same
# plans in the same process (bench_kernels.py's paced timer), for the ratios the issue counts;
# the plan-order matrix of the twenty-fifth session is the reference for its launches.
if [ "${MATRIX:-0}" = 1 ]; then
  timeout 420 python3 benchmarks/bench_kernels.py --sections copy,shapes --variants 0,3,4,5,7 \
    --out $out/matrix_lf 2>&1 | grep -v Warning | tail -30
fi

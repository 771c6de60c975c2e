#!/usr/bin/env bash
# Session 18, call 1 (H100): the flattened persistent stage 1 (kernels/decode_flat.py, config
# suffix -flN) against the per-task loop it computes the same bits as, on the shapes whose split
# plans of short tasks miss 0.85 of copy: llama3-70b-tp8 (one KV head; entry bn128-w8-s3-pa,
# twin bn128-w8-s2-pa), llama3-8b fp8 (bn128-w4-s3-pa-vp) and llama3-8b bf16 (bn64-w4-s4-pa).
# First the device compiler's registers and shared memory of each variant, then the sweeps
# (profile_decode.py --configs: the matrix's timer, the 30-pair loop, same_bits against the
# first label, FlashInfer on the same plan before and after).
#   bash benchmarks/gpu_calls/s18_call1.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
ONE=bn128-w8-s2-pa,bn128-w8-s3-pa,bn128-w8-s2-pa-fl2,bn128-w8-s2-pa-r128-fl2,bn128-w8-s3-pa-fl1,bn64-w4-s3-pa-fl3
FP8=bn128-w4-s3-pa-vp,bn128-w4-s3-pa-vp-fl2,bn128-w4-s3-pa-vp-r168-fl3
BF16=bn64-w4-s4-pa,bn64-w4-s4-pa-fl2,bn64-w4-s3-pa-fl3
timeout 120 python3 benchmarks/compile_survey.py --head-dim 128 --group 8 --kv bf16 --configs $ONE \
  > $OUT/compile.jsonl 2>&1
timeout 60 python3 benchmarks/compile_survey.py --head-dim 128 --group 4 --kv fp8 --configs $FP8 \
  >> $OUT/compile.jsonl 2>&1
timeout 60 python3 benchmarks/compile_survey.py --head-dim 128 --group 4 --kv bf16 --configs $BF16 \
  >> $OUT/compile.jsonl 2>&1
python3 -c "
import json
for l in open('$OUT/compile.jsonl'):
    try: r = json.loads(l)
    except ValueError: continue
    print('compile', r['group'], r['kv'], r['config'], r.get('regs'), r.get('spill_bytes'), r.get('smem_bytes'), r.get('error'))"
date -u
while read -r shape kv dist batch chunk configs; do
  kvarg=""; [ "$kv" != "-" ] && kvarg="--kv-dtype $kv"
  timeout 100 python3 benchmarks/profile_decode.py --shape $shape $kvarg --dist $dist \
    --batch $batch --chunk $chunk --flashinfer --configs ${!configs} 2>&1 \
    | grep '^{\|rror' | tee -a $OUT/flat.jsonl | python3 -c "
import json, sys
for l in sys.stdin:
    try: r = json.loads(l)
    except ValueError: print(l.strip()[:200]); continue
    print(r['shape'], r['dist'], r['batch'], r['chunk'], r.get('config', 'FI-' + r.get('when', '')),
          r.get('num_tasks'), r.get('matrix_us'), r.get('loop_us'), r.get('fraction_of_copy'),
          r.get('same_bits'), r.get('status'))"
done <<'CASES'
llama3-70b-tp8 - uniform 256 balanced ONE
llama3-70b-tp8 - skew80 64 balanced ONE
llama3-70b-tp8 - uniform 64 balanced ONE
llama3-70b-tp8 - skew80 256 balanced ONE
llama3-70b-tp8 - uniform 8 balanced ONE
llama3-70b-tp8 - uniform 256 2048 ONE
llama3-8b fp8_e4m3 uniform 64 balanced FP8
llama3-8b fp8_e4m3 skew80 256 balanced FP8
llama3-8b fp8_e4m3 uniform 64 2048 FP8
llama3-8b - uniform 64 balanced BF16
llama3-8b - skew80 8 balanced BF16
CASES
date -u

#!/usr/bin/env bash
# Thirty-second session, call 5 (H200): call 4 found only the V-pairs loop (-vp) slower at fp8
# head_dim 256 pages 4 and 16 than at 1 and 64 (300 / 291 against 270 us); every other V path
# reads the same at every page. (1) What Triton 3.6 (the device's compiler) makes of that loop
# at pages 1-64 (benchmarks/compile_survey.py: registers, spills, shared memory, instruction
# counts; the local Triton 3.9 compiles pages 4, 16 and 64 alike). (2) The same plan at pages 2,
# 8 and 32, where no call has timed it (profile_decode.py --configs --flashinfer).
#   bash benchmarks/gpu_calls/s32_call5.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
python3 -c "import triton; print('triton', triton.__version__)"
for page in 1 2 4 8 16 32 64; do
  python3 benchmarks/compile_survey.py --head-dim 256 --group 2 --kv fp8 --page $page \
    --configs bn64-w4-s4-pa-vp --out $OUT/cs$page 2>/dev/null | python3 -c "
import json, sys
for line in sys.stdin:
    if line.startswith('{'):
        r = json.loads(line); s = r.get('sass', {})
        print('page', r['page_size'], 'regs', r['regs'], 'spill', r['spill_bytes'], 'smem',
              r['smem_bytes'], 'ptx', r['ptx_all'], 'ld.global', r['ptx_ld.global'], 'cp.async',
              r['ptx_cp.async'], 'sass', s.get('all'),
              {k: v for k, v in s.items() if k.startswith(('LDG', 'LDGSTS', 'IMAD', 'LEA'))})
"
done
tar -C $OUT -czf $OUT/survey.tgz $(cd $OUT && ls -d cs*) && rm -rf $OUT/cs*
date -u
for page in 2 8 32; do
  config_sweep hd256 fp8_e4m3 $page bn64-w4-s4-pa-vp uniform:64:balanced
done
print_sweep

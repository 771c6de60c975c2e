#!/usr/bin/env bash
# Session 18, call 2 (H100): why bn128-w8-s2-pa read 77-127 us in call 1 on the llama3-70b-tp8
# cases that fit one wave at two programs per SM (uniform B=256 fixed-2048: 53.3 us in the
# seventeenth session; uniform B=8 balanced-2x: 62.0). The same sweep with the label first, after
# the flattened variant and again, at this commit and at the seventeenth session's last commit
# (f8396fb, installed beside it); then Nsight Compute's launch statistics (registers, occupancy
# limits, waves) of the plain kernel on the first case.
#   bash benchmarks/gpu_calls/s18_call2.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
# .whl/old_f8396fb.tar: `git archive -o .whl/old_f8396fb.tar f8396fb`, carried with the wheels.
cp -r /tmp/site /tmp/site_old && mkdir -p /tmp/old && tar -xf .whl/old_f8396fb.tar -C /tmp/old \
  && (cd /tmp/old && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site_old . 2>/dev/null)
export PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
show() {
python3 -c "
import json, sys
for l in sys.stdin:
    try: r = json.loads(l)
    except ValueError: print(l.strip()[:200]); continue
    print('$1', r['dist'], r['batch'], r['chunk'], r.get('config', 'FI-' + r.get('when', '')),
          r.get('num_tasks'), r.get('matrix_us'), r.get('loop_us'), r.get('loop_p10_us'),
          r.get('same_bits'), r.get('matrix_quiet_ratio'))"
}
for rev in new old; do
  site=/tmp/site; [ $rev = old ] && site=/tmp/site_old
  for c in "uniform 256 2048" "uniform 8 balanced"; do
    set -- $c
    configs=bn128-w8-s2-pa,bn128-w8-s2-pa-fl2,bn128-w8-s2-pa
    [ $rev = old ] && configs=bn128-w8-s2-pa,bn128-w8-s3-pa,bn128-w8-s2-pa
    (cd $([ $rev = old ] && echo /tmp/old || pwd) && PYTHONPATH=$site timeout 100 python3 \
      benchmarks/profile_decode.py --shape llama3-70b-tp8 --dist $1 --batch $2 --chunk $3 \
      --configs $configs 2>&1) | grep '^{\|rror' | tee -a $OUT/ab.jsonl | show $rev
  done
done
date -u
PYTHONPATH=/tmp/site timeout 120 ncu --kernel-name regex:_attend --launch-skip 2 --launch-count 1 \
  --metrics launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_warps,launch__shared_mem_per_block_dynamic,launch__shared_mem_config_size,launch__waves_per_multiprocessor,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
  python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --dist uniform --batch 256 \
  --chunk 2048 --config bn128-w8-s2-pa --iters 4 2>&1 | grep -v "^==PROF==" | tail -22
date -u

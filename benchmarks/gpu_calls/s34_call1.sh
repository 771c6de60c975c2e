#!/usr/bin/env bash
# Ready for the next session with device time (written in the thirty-third session, not run):
# why -l2 costs fp8 head_dim 256's shallow twin 3.5% on 1,024 equal tasks of 2,048 keys (call 9
# of the thirty-third session: bn64-w4-s3-pa-vp 272.3-272.9 us against 281.3-283.0 with -l2 at
# page 16, three rounds; 2-7% faster with -l2 on the twin's four other plans). First the
# device's own compile of the four configurations (registers, spills, shared memory: three
# programs per SM need at most 168 registers at 128 threads), then Nsight Compute on both
# twins at uniform B=64 fixed-2048 (benchmarks/profile_gpu.sh: --clock-control none,
# --set full, each case checked against float64 first), one line per case of the metrics.
#   bash benchmarks/gpu_calls/s34_call1.sh (ran as the thirty-fourth session call 1)
source benchmarks/gpu_calls/common.sh
kvtune_install
python3 benchmarks/compile_survey.py --head-dim 256 --group 2 --kv fp8 --page 16 \
  --configs bn64-w4-s3-pa-vp,bn64-w4-s3-pa-vp-l2,bn64-w4-s4-pa-vp,bn64-w4-s4-pa-vp-l2 \
  --out /tmp/cs 2>&1 | grep '^{' | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r['config'], r['regs'], r['spill_bytes'], r['smem_bytes'], r.get('ptx_prefetch', 0))"
cases=/tmp/l2_twin_cases.txt
: > $cases
for cfg in bn64-w4-s3-pa-vp bn64-w4-s3-pa-vp-l2; do
  echo "${cfg} --shape hd256 --kv-dtype fp8_e4m3 --page 16 --dist uniform --batch 64 --chunk 2048 --config $cfg" >> $cases
done
timeout 400 bash benchmarks/profile_gpu.sh $OUT/ncu $cases | grep '^==\|^{'
print_ncu_details $OUT/ncu "Duration" "DRAM Throughput" "Achieved Occupancy" \
  "Registers Per Thread" "Theoretical Occupancy" "Block Limit Registers" \
  "Block Limit Shared Mem" "Warp Cycles Per Issued Instruction" "L2 Hit Rate"

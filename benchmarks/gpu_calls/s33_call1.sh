#!/usr/bin/env bash
# Thirty-third session, call 1 (written in the thirty-second session):
# Nsight Compute on the fp8 head_dim-256 V-pairs loop at pages 1, 4, 16 and 64. That session's
# calls 2-5 found it 10-12% slower at pages 2-16 than at 1 and 64 (uniform B=64 balanced-2x,
# 512 tasks: 268.7 / 303.3 / 293.6 / 272.1 us), with the same SASS at pages 2-64 and a pure
# read of the same pages at 0.97-0.98 of copy at every page (docs/PERFORMANCE.md, thirty-second
# session). The profiles say where the cycles go: warp stall reasons per SASS line (long
# scoreboard on the page-id loads, or on the K/V gathers?), L1/L2 sectors and hit rates, DRAM
# throughput, TLB-related stalls. Plain V (bn64-w4-s4-pa) at page 16 is the control: no page
# effect. Each case is checked against float64 before ncu sees it (benchmarks/profile_gpu.sh,
# --clock-control none, --set full). Then one line per case of the metrics that differ.
#   bash benchmarks/gpu_calls/s33_call1.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
cases=/tmp/vpairs_cases.txt
: > $cases
for page in 1 4 16 64; do
  echo "hd256_fp8_p$page --shape hd256 --kv-dtype fp8_e4m3 --page $page --dist uniform --batch 64 --chunk balanced --config bn64-w4-s4-pa-vp" >> $cases
done
echo "hd256_fp8_p16_plainv --shape hd256 --kv-dtype fp8_e4m3 --page 16 --dist uniform --batch 64 --chunk balanced --config bn64-w4-s4-pa" >> $cases
timeout 540 bash benchmarks/profile_gpu.sh $OUT/ncu $cases | grep '^==\|^{'
mkdir -p /tmp/ncu_x && tar -C /tmp/ncu_x -xzf $OUT/ncu/profiles.tgz
python3 - <<'PY'
import csv, glob, os
keep = ("Duration", "DRAM Throughput", "Memory Throughput", "L1/TEX Hit Rate", "L2 Hit Rate",
        "Achieved Occupancy", "Warp Cycles Per Issued Instruction", "Issued Warp Per Scheduler",
        "Registers Per Thread", "Dynamic Shared Memory Per Block")
for path in sorted(glob.glob("/tmp/ncu_x/*.details.csv")):
    vals = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            name = r.get("Metric Name", "")
            if name in keep and name not in vals:
                vals[name] = f"{r.get('Metric Value', '')} {r.get('Metric Unit', '')}".strip()
    print(os.path.basename(path).split(".")[0], vals)
PY

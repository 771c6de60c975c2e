#!/usr/bin/env bash
# Thirty-fourth session, call 2 (issue 16):
# (a) Nsight Compute on fp8 head_dim 128 where decode.py reads 0.74-0.95 of its paged-read
#     ceiling (thirty-second session): yi-6b (G = 8) and llama3-8b (G = 4), page 16, the
#     product's launch (`--config product`), uniform B=64 fixed-2048 and skew80 B=64
#     balanced-2x. Which pipe or stall holds stage 1 (benchmarks/profile_gpu.sh:
#     --clock-control none, --set full, each case checked against float64 first).
# (b) Call 1 found the -l2 shallow twin at a lower SM clock under ncu (1.62 against 1.71 GHz,
#     3% fewer cycles). The two twins timed again by events (profile_decode --configs
#     --flashinfer, -l2 first this time), two rounds, with nvidia-smi sampling the SM clock and
#     the power every 50 ms beside them.
#   bash benchmarks/gpu_calls/s34_call2.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
cases=/tmp/fp8_g8_cases.txt
: > $cases
for shape in yi-6b llama3-8b; do
  echo "${shape}-fix --shape $shape --kv-dtype fp8_e4m3 --page 16 --dist uniform --batch 64 --chunk 2048 --config product" >> $cases
  echo "${shape}-bal --shape $shape --kv-dtype fp8_e4m3 --page 16 --dist skew80 --batch 64 --chunk balanced --config product" >> $cases
done
timeout 300 bash benchmarks/profile_gpu.sh $OUT/ncu $cases | grep '^==\|^{'
print_ncu_details $OUT/ncu "Duration" "DRAM Throughput" "Achieved Occupancy" \
  "Registers Per Thread" "Block Limit Registers" "Block Limit Shared Mem" \
  "Warp Cycles Per Issued Instruction" "SM Frequency"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv,noheader -lms 50 > $OUT/smi.csv &
smi=$!
for round in 1 2; do
  config_sweep hd256 fp8_e4m3 16 bn64-w4-s3-pa-vp-l2,bn64-w4-s3-pa-vp uniform:64:2048
done
kill $smi
print_sweep
python3 - <<'PY'
import os
rows = [l.split(", ") for l in open(os.environ["OUT"] + "/smi.csv") if l.count(",") >= 4]
sm = sorted(int(r[1].split()[0]) for r in rows)
pw = sorted(float(r[3].split()[0]) for r in rows)
print("smi samples", len(rows), "SM MHz min/median/max", sm[0], sm[len(sm) // 2], sm[-1],
      "power W median/max", pw[len(pw) // 2], pw[-1])
PY

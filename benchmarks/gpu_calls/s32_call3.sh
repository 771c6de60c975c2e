#!/usr/bin/env bash
# Thirty-second session, call 3 (H200): the paged-read ceiling (benchmarks/gather_ceiling.py,
# benchmarks/paged_read.py: the plan's K/V bytes read through the page table, no attention,
# checked against float64 sums first) where decode.py stays below 0.85 of copy.
# (1) fp8 head_dim 256 uniform B=64 balanced-2x at pages 1, 4, 16 and 64 (call 2: decode.py
#     268.7 / 303.3 / 293.6 / 272.1 us with the same compiled loop at pages 4-64): does the read
#     alone slow down at pages 4 and 16, with pages shuffled and in order, longest first (the
#     product's order) and in the plan's order?
# (2) the shape matrix with --read-ceiling on fp8 head_dim 64 page 16 (decode.py 0.48-0.69 of
#     copy) and yi-6b fp8 page 16 (G = 8: 0.70-0.81), the read in the product's launch order.
#   bash benchmarks/gpu_calls/s32_call3.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
cases=""
for page in 1 4 16 64; do cases="$cases --case hd256:fp8_e4m3:$page:uniform:64:balanced-2x"; done
timeout 170 python3 benchmarks/gather_ceiling.py $cases --no-tma --launch-order longest-first \
  --read-configs bn64-w4-s3,bn64-w4-s4,bn32-w4-s4 --out $OUT/read_lf 2>&1 | grep -v Warning
date -u
timeout 80 python3 benchmarks/gather_ceiling.py --case hd256:fp8_e4m3:4:uniform:64:balanced-2x \
  --case hd256:fp8_e4m3:64:uniform:64:balanced-2x --layouts shuffled --no-tma \
  --launch-order plan --read-configs bn64-w4-s3,bn64-w4-s4 --out $OUT/read_plan 2>&1 \
  | grep -v Warning
date -u
matrix_run read-v61 70 --full --variants 61 --read-ceiling \
  --read-configs bn32-w4-s3,bn64-w4-s3,bn128-w4-s3,bn64-w4-s4
matrix_run read-v34 60 --full --variants 34 --read-ceiling \
  --read-configs bn32-w4-s3,bn64-w4-s3,bn128-w4-s3,bn64-w4-s4
tar -C $OUT -czf $OUT/read.tgz read_lf read_plan

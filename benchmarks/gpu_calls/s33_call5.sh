#!/usr/bin/env bash
# Thirty-third session, call 5: benchmarks/two_launch_probe.py on issue 16's last 16-bit miss,
# llama3-70b-tp8 bf16 page 16 skew80 B=64 fixed-2048 (one launch 0.89-0.90x FlashInfer in every
# session since the twenty-fifth): the long request's 102-103 tasks at one program per SM
# (bn128-w8-s3-pa) beside the 63 short requests launched on a second stream with each of five
# configurations, against the one launch and FlashInfer 0.5.3 on the same plan in the same
# process. Paced CUDA events, cold L2; every part checked against float64 first.
#   bash benchmarks/gpu_calls/s33_call5.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
timeout 400 python3 benchmarks/two_launch_probe.py --shape llama3-70b-tp8 \
  --long-config bn128-w8-s3-pa \
  --short-configs bn128-w8-s2-pa,bn64-w4-s4-pa,bn64-w4-s3-pa,bn128-w8-s2-pa-r80,bn128-w8-s3-pa \
  2>&1 | grep '^{\|rror' | tee $OUT/probe.jsonl | cut -c1-400

#!/usr/bin/env bash
# Session 16, calls 3-4 (H100, warm after call 2): call 2's matrix part, which found no kvtune
# (its PYTHONPATH was exported only inside merge_pdl_rounds.sh). Call 3 ran variant 1 with
# --merge-pdl off by hand; call 4 runs this script: the listed "variant pdl" pairs.
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for spec in "${@:-1 on}"; do
  set -- $spec
  timeout 110 python3 benchmarks/bench_kernels.py --sections shapes --variants $1 \
    --merge-pdl $2 --settle-s 0 --time-limit-s 95 --out $OUT/shapes_v$1_pdl$2 2>&1 \
    | grep -v Warning | grep '^|\|cases ok\|rror' | tee -a $OUT/call.log
  date -u | tee -a $OUT/call.log
done

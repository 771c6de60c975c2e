#!/usr/bin/env bash
# Session 16, call 2 (H100): the PDL-launched chunked merge against the ordinary launch,
# alternated three times per case in one process (merge_pdl_rounds.sh), then the matrix's
# variants where 16-bit misses remain (1 llama3-70b-tp8, 6 hd64, 7 hd256) with --merge-pdl on,
# and variant 1 with it off, each against FlashInfer with the same plan in the same process.
bash benchmarks/gpu_calls/merge_pdl_rounds.sh 3 2>&1 | tee $OUT/call2.log
for spec in "1 off" "1 on" "6 on" "7 on"; do
  set -- $spec
  timeout 110 python3 benchmarks/bench_kernels.py --sections shapes --variants $1 \
    --merge-pdl $2 --settle-s 0 --time-limit-s 95 --out $OUT/shapes_v$1_pdl$2 2>&1 \
    | grep -v Warning | grep '^|\|cases ok' | tee -a $OUT/call2.log
  date -u | tee -a $OUT/call2.log
done

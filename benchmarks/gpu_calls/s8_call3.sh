#!/usr/bin/env bash
# Session 8, call 3: a register-capped 128-row prefill tile beside one page-ahead decode CTA
# (issue 15); the held-out matrix at 196,608 tokens for llama3-70b-tp8 with the one-program-per-SM
# clause, and the variants call 2 did not reach (issue 16).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Eighth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
timeout 220 python3 benchmarks/hybrid_overlap_probe.py --out $OUT/probe \
  --variants coP1-s3,coP1-s3-T1,coP1-m128r200-a32s4w4,coP1-m128r200-a32s4w2,coP1-m128r200s2-a64s4w2,coP1-m128r168-a32s4w4,coP1-s3-T1-a32s4w2 \
  2>&1 | tee $OUT/probe_log.txt | grep -v Warning
date -u
timeout 340 python3 benchmarks/bench_kernels.py --sections env,copy,shapes --variants 1,5,8 \
  --total-tokens 196608 --settle-s 30 --time-limit-s 300 --out $OUT/m > $OUT/matrix_log.txt 2>&1
tail -3 $OUT/matrix_log.txt
cd $OUT && tar czf m.tgz m && rm -rf m
date -u

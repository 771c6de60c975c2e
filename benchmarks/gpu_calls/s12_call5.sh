#!/usr/bin/env bash
# Session 12, calls 5 and 6 (issue 15): call 4 ran out of its time limit without writing anything (the
# script wrote its results only at the end, and the log filter dropped the progress lines). The
# same comparison on three cases (16, 32 and 64 decodes beside a 512-token chunk at 4K; the
# 32-decode one is the bimodal case of the tenth session), two rounds, results saved after each
# case, every line of the log kept, and Python's stacks dumped if a launch never returns.
# Call 6: the same script on more of the sweep (bash s12_call5.sh TIMEOUT_S SKIP MAX).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u
timeout ${1:-150} python3 benchmarks/bench_colocated_order.py --skip-cases ${2:-1} --max-cases ${3:-3} \
  --rounds 2 --budget-s $(( ${1:-150} - 70 )) --out $OUT/co 2>&1 | grep -v Warning | tail -40 | cut -c1-300
echo "rc ${PIPESTATUS[0]}"
date -u

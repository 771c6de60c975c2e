#!/usr/bin/env bash
# Session 17, call 2 (H100): (1) the copy ceiling at 16 MiB-8 GiB moved (call 1 lost it: the
# default 60 s settle ran into the timeout); (2) the tail merge with a 128-register cap (call 1's
# Nsight Compute profile: Triton 3.6 gives the tail variant of bn128-w8-s2-pa 242 registers per
# thread, so one program per SM where the plain kernel has two with 126) against the chunked
# merge, alternated; (3) matrix variants not yet run with the PDL merge default.
#   bash benchmarks/gpu_calls/s17_call2.sh VARIANT...
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 90 python3 benchmarks/bench_kernels.py --sections env,copy,copy-sizes --settle-s 0 \
  --out $OUT/copy 2>&1 | grep '^copy'
date -u
P="python3 benchmarks/profile_decode.py --time --merge tail --versus chunked --rounds 2"
while read -r dist batch chunk config; do
  timeout 90 $P --shape llama3-70b-tp8 --dist $dist --batch $batch --chunk $chunk \
    --config $config 2>&1 | grep '^{\|Error' | tee -a $OUT/tail_r128.jsonl
done <<'CASES'
uniform 256 balanced bn128-w8-s2-pa-r128
skew80 64 2048 bn128-w8-s2-pa-r128
CASES
date -u
for v in "$@"; do
  timeout 110 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --settle-s 0 --time-limit-s 100 --out $OUT/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror' | tee -a $OUT/matrix.log
  rm -f $OUT/v$v/results.json $OUT/v$v/shapes.md
  date -u | tee -a $OUT/matrix.log
done

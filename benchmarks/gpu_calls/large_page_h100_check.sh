#!/usr/bin/env bash
# Ready for a GPU call on an H100 (written in session 25, on an H200; not run): the page-64 entry
# kernels/decode_config.py LARGE_PAGE_TABLE took in session 25 (bn128-w4-s3 with its shallow
# twin bn128-w4-s2 by wave fill, replacing bn128-w8-s3-pa, which the seventeenth session set on
# an H100 and which ran 3 of 12 H200 matrix cases >= 0.95x FlashInfer) has not run on an H100.
# (1) The page-64 matrix variants at 262,144 and 196,608 tokens (llama3-8b, and MHA 32/32 of the
# full product, held out on the H200 at 9 of 12) against FlashInfer with the same plan; (2) the
# old entry, the new pair and the page-16 entry on the twelve llama3-8b cases (profile_decode.py
# --configs, FlashInfer before and after). Results packed into one tar. Works on any card; the
# rows are compared only with rows of the same card.
#   bash benchmarks/gpu_calls/large_page_h100_check.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
rm -rf /tmp/lp; mkdir -p /tmp/lp
for t in 262144 196608; do
  timeout 60 python3 benchmarks/bench_kernels.py --sections shapes --variants 11 --total-tokens $t \
    --read-ceiling --settle-s 0 --time-limit-s 50 --out /tmp/lp/t$t-v11 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-230
  timeout 60 python3 benchmarks/bench_kernels.py --sections shapes --full --variants 38 \
    --total-tokens $t --settle-s 0 --time-limit-s 50 --out /tmp/lp/t$t-full38 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-230
  rm -f /tmp/lp/*/bench_log.txt; tar -C /tmp/lp -czf $OUT/large_page.tgz .
done
P64=bn128-w8-s3-pa,bn128-w4-s3,bn128-w4-s2,bn64-w4-s4-pa,bn64-w4-s3-pa
while read -r dist batch chunk; do
  timeout 60 python3 benchmarks/profile_decode.py --shape llama3-8b --page 64 --dist $dist \
    --batch $batch --chunk $chunk --configs $P64 --flashinfer 2>&1 \
    | grep '^{\|rror' | tee -a /tmp/lp/rows.jsonl | python3 benchmarks/profile_rows.py
done <<'CASES'
uniform 8 2048
uniform 8 balanced
uniform 64 2048
uniform 64 balanced
uniform 256 2048
skew80 8 2048
skew80 8 balanced
skew80 64 2048
skew80 64 balanced
skew80 256 2048
skew80 256 balanced
CASES
tar -C /tmp/lp -czf $OUT/large_page.tgz .
date -u

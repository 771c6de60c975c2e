#!/usr/bin/env bash
# Session 22, call 6 (H100): the matrix timer now paced (a GPU lead-in covering the host's
# enqueue of the whole batch): host_gap_probe.py again (its `matrix` column is the paced timer),
# then the shape matrix's llama3-70b-tp8 bf16 and fp8 and llama3-8b fp8 variants (1, 12, 9) at
# 262,144 tokens against FlashInfer.
#   bash benchmarks/gpu_calls/s22_call6.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 80 python3 benchmarks/host_gap_probe.py --rounds 2 --out $OUT/gap 2>&1 | grep -v Warning | tail -14
for v in 1 12 9; do
  timeout 130 python3 benchmarks/bench_kernels.py --sections shapes --variants $v \
    --settle-s 0 --time-limit-s 120 --out $OUT/v$v 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | tee -a $OUT/matrix.log
  rm -f $OUT/v$v/shapes.md $OUT/v$v/bench_log.txt
  date -u | tee -a $OUT/matrix.log
done

#!/usr/bin/env bash
# Session 17, call 5 (H100): the head_dim 256 matrix variant (7) against FlashInfer with the
# register-capped twin rule (commit after call 4) at 262,144 and 196,608 tokens, and Nsight
# Compute's launch statistics of the capped twin on the case it runs (programs per SM).
#   bash benchmarks/gpu_calls/s17_call5.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
for tokens in 262144 196608; do
  timeout 110 python3 benchmarks/bench_kernels.py --sections shapes --variants 7 \
    --total-tokens $tokens --settle-s 0 --time-limit-s 100 --out $OUT/v7_$tokens 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | tee -a $OUT/matrix.log
  rm -f $OUT/v7_$tokens/results.json $OUT/v7_$tokens/shapes.md $OUT/v7_$tokens/bench_log.txt
  date -u | tee -a $OUT/matrix.log
done
cat > /tmp/cases.txt <<'CASES'
hd256_capped --shape hd256 --dist skew80 --batch 8 --chunk balanced --config bn64-w4-s2-r168
hd256_entry --shape hd256 --dist skew80 --batch 8 --chunk balanced --config bn64-w4-s2
CASES
timeout 120 bash benchmarks/profile_gpu.sh /tmp/ncu /tmp/cases.txt | grep '^==\|^{'
for n in hd256_capped hd256_entry; do
  grep -E '"(Registers Per Thread|Block Limit Registers|Block Limit Shared Mem|Theoretical Occupancy|Achieved Occupancy|Duration|Dynamic Shared Memory Per Block|DRAM Throughput)"' \
    /tmp/ncu_work_$n 2>/dev/null
done
cd /tmp && mkdir -p x && tar xzf /tmp/ncu/profiles.tgz -C x && for n in hd256_capped hd256_entry; do
  echo "== $n"; grep -E 'Registers Per Thread|Block Limit Registers|Block Limit Shared Mem|Theoretical Occupancy|Achieved Occupancy|"Duration"|Dynamic Shared Memory Per Block|DRAM Throughput' x/$n.details.csv | cut -d, -f12-16
done | tee $OUT/ncu_summary.txt

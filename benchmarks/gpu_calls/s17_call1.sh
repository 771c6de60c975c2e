#!/usr/bin/env bash
# Session 17, call 1 (H100): (1) the copy ceiling at 16 MiB-8 GiB moved (bench_kernels
# --sections copy-sizes), (2) Nsight Compute on the tail merge against the chunked merge and on
# llama3-70b-tp8 stage 1 (benchmarks/gpu_calls/s17_ncu_cases.txt), (3) the twin rule's one-task
# clause (twin_one_task_check.sh: deep vs twin + FlashInfer, then the llama3-70b-tp8 matrix at
# 262,144 and 196,608 tokens).
#   bash benchmarks/gpu_calls/s17_call1.sh [MATRIX_SECONDS]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 60 python3 benchmarks/bench_kernels.py --sections env,copy,copy-sizes --out $OUT/copy \
  2>&1 | grep -v Warning | tail -16
date -u
timeout 200 bash benchmarks/profile_gpu.sh $OUT/ncu benchmarks/gpu_calls/s17_ncu_cases.txt \
  | grep '^==\|^{'
echo "u256_bal_chunked --shape llama3-70b-tp8 --dist uniform --batch 256 --chunk balanced --config bn128-w8-s2-pa" > /tmp/merge_case.txt
KERNEL_REGEX=_merge_jobs timeout 60 bash benchmarks/profile_gpu.sh $OUT/ncu_merge /tmp/merge_case.txt \
  | grep '^==\|^{'
date -u
bash benchmarks/gpu_calls/twin_one_task_check.sh ${1:-90} 2>&1 | grep -v '^20\|^NVIDIA'

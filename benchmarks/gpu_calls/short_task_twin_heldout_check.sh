#!/usr/bin/env bash
# Ready for the next session with device time (H200; written in the thirty-first session, not
# run: its device time was spent): SHORT_TASK_TWIN narrowed after that session's call 8 (several
# KV heads only; tasks of one length up to 4,096 keys or of any lengths up to 2,048) on the
# held-out fp8 variants call 8 ran it on: qwen2.5-7b page 1 (G = 7), yi-6b page 16 (G = 8),
# llama3-70b-tp8 page 16 (one KV head: back to the entry's rules); and MHA 32/32 page 16 (G = 1,
# never timed with the rule). llama3-8b's launches are those of call 8. bench_kernels --sections
# shapes against FlashInfer 0.5.3's fp8 decode on the same plans (paced CUDA events, cold L2,
# checked against float64 first). The first process compiles FlashInfer.
#   bash benchmarks/gpu_calls/short_task_twin_heldout_check.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/m9
run() {  # name, limit, then bench_kernels arguments
  local name=$1 limit=$2; shift 2
  timeout $((limit + 8)) python3 benchmarks/bench_kernels.py --sections shapes "$@" --settle-s 0 \
    --time-limit-s $limit --out /tmp/m9/$name 2>&1 | grep 'cases ok\|rror' | head -3
  rm -f /tmp/m9/$name/bench_log.txt
  tar -C /tmp/m9 -czf $OUT/matrix.tgz .
  date -u
}
run full-v24 45 --full --variants 24   # qwen2.5-7b fp8 p1
run full-v34 25 --full --variants 34   # yi-6b fp8 p16
run full-v16 25 --full --variants 16   # llama3-70b-tp8 fp8 p16
run full-v43 40 --full --variants 43   # mha-32 fp8 p16

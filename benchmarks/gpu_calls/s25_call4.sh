#!/usr/bin/env bash
# Session 25, call 4 (NVIDIA H200), after the table changes of calls 2-3 (page 64: bn128-w4-s3
# with its twin bn128-w4-s2 by wave fill; head_dim 64: bn128-w4-s4-pa with its twin s3-pa):
# (1) the matrix variants they change at 262,144 tokens and, held out, 196,608: llama3-8b page 64
# (11), head_dim 64 (6), page 1 (10, the control: unchanged); (2) held-out variants of the full
# product the changes reach: MHA page 64 (38), head_dim 64 page 1 (54), page 64 (56), fp16 (58);
# (3) the fp8 variants never timed against FlashInfer on this card: qwen2.5-7b (25), g16 (52),
# MHA (43); (4) the twelfth session's fp8 file (tuned on an H200) on traces beside FlashInfer's
# fp8 planner with today's kernel (two alternated rounds, CUDA-graph replays).
#   bash benchmarks/gpu_calls/s25_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
rm -rf /tmp/m4; mkdir -p /tmp/m4
run_matrix() {  # out-name, extra args...
  local name=$1; shift
  timeout 60 python3 benchmarks/bench_kernels.py --sections shapes --settle-s 0 \
    --time-limit-s 50 --out /tmp/m4/$name "$@" 2>&1 \
    | grep -v Warning | grep '^| [a-z]\|cases ok\|rror\|^copy' | cut -c1-230
  rm -f /tmp/m4/$name/bench_log.txt
  tar -C /tmp/m4 -czf $OUT/call4.tgz .  # after each: a killed call still returns
}
for t in 262144 196608; do
  for v in 11 6 10; do run_matrix t$t-v$v --variants $v --total-tokens $t --read-ceiling; done
done
date -u
for v in 38 54 56 58 25 52 43; do run_matrix full-v$v --full --variants $v; done
date -u
timeout 260 python3 -m kvtune bench --suite traces --kv-dtype fp8_e4m3 --backend triton \
  --policies flashinfer-tensor-core --heuristic benchmarks/gpu_calls/s12_fp8_heuristic.json \
  --timer graph --rounds 2 --no-progress --format csv \
  --stopping min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1 \
  --out /tmp/m4/traces > /tmp/m4/traces.csv 2> /tmp/m4/traces.err
tail -3 /tmp/m4/traces.err
tar -C /tmp/m4 -czf $OUT/call4.tgz .
date -u

#!/usr/bin/env bash
# Ready for the next session with device time (any H200): the s26 fp8 file on uniform batches,
# which its tune and its held-out check (traces only) never measured. Its 33-128 bucket is the
# makespan family at 2 slots per SM, which cuts 48 x 4,096-token requests into 768 pieces where
# FlashInfer's planner launches 384 unsplit; the twenty-fourth session saw the capped twin run
# such 320-448-program plans in one wave and a file's splits lose to them (arxiv B=40-48), and
# the twenty-seventh saw the same rule lose 2-4.5% in hybrid serial steps. FlashInfer's fp8
# planner on the Triton kernel beside it, CUDA-graph replays, two alternated rounds; the verdict
# line per total is what to read (slower beyond the same-launch noise must be 0).
#   bash benchmarks/gpu_calls/uniform_fp8_check.sh [OUT_DIR]
out=${1:-/tmp/ufp8}
stop=min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1
for total in 196608 262144 393216 786432; do
  timeout 60 python3 -m kvtune bench --distribution uniform --param total_tokens=$total \
    --batch-sizes 33,40,48,64,96,128 --kv-dtype fp8_e4m3 --backend triton \
    --policies flashinfer-tensor-core --heuristic benchmarks/gpu_calls/s26_fp8_heuristic.json \
    --timer graph --rounds 2 --no-progress --stopping $stop --out $out 2>&1 \
    | grep -v Warning | grep -i "tuned:\|rows\|uniform" | cut -c1-240
done

#!/usr/bin/env bash
# Ready for the next session with device time (written in the thirty-fourth session, not run).
# (a) The fp8 side split at head_dim 256 (docs/PERFORMANCE.md, thirty-fourth session, call 9):
#     8/1/256 skew80 B=64 fixed-2048 ran 70.0 us with the split (1.369x FlashInfer) where the
#     entry alone had run 66.2 in call 4. The product's launch (the split), the entry alone and
#     the twin alone, on 8/1/256 and 2/1/256, same call; decides whether side_launch_split
#     should skip fp8 caches.
# (b) fp8 4/2/256 (two KV heads, the "many" entry bn64-w4-s4-pa-vp-l2 and its s3 twin): 7/12
#     at 1.4x, misses on fixed-2048 plans of about two tasks per SM; the one-KV-head pair
#     (bn128-w8-s3-pa-vp / bn128-w8-s2-pa-vp-r128) beside them.
# (c) Shapes of one KV head whose "one-per-sm" entries were never timed: starcoder 48/1/128
#     (G = 48), falcon-7b 71/1/64 (G = 71), 8/1/64 (head_dim 64: _ONE_16[64] and _ONE_8[64] are
#     predictions), bf16 and fp8 at page 16.
# profile_decode --configs --flashinfer and bench_kernels --sections shapes: paced CUDA events,
# cold L2, FlashInfer 0.5.3 on the same plan in the same process, checked against float64.
#   bash benchmarks/gpu_calls/one_kv_heldout_check.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
for shape in 8/1/256 2/1/256; do
  SWEEP_TIMEOUT_S=120 config_sweep $shape fp8_e4m3 16 \
    product,bn128-w8-s3-pa-vp,bn128-w8-s2-pa-vp-r128 skew80:64:2048
done
SWEEP_TIMEOUT_S=150 config_sweep 4/2/256 fp8_e4m3 16 \
  product,bn64-w4-s4-pa-vp-l2,bn64-w4-s3-pa-vp-l2,bn128-w8-s3-pa-vp,bn128-w8-s2-pa-vp-r128 \
  uniform:8:2048 uniform:256:2048 skew80:8:2048 uniform:64:balanced
print_sweep
grep -o '"launch_config": "[^"]*"' $OUT/configs.jsonl
matrix_run heldout_one_kv 300 --heads 48/1/128,71/1/64,8/1/64

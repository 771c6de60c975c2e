#!/usr/bin/env bash
# Ready for the next session with device time (H200; written in the twenty-ninth session, not
# run): the hybrid steps' decode launch (kernels/decode.py through kernels/hybrid.py
# decode_parts) longest first, the decode-only product's order since the twenty-ninth session,
# against the plan's order every hybrid file was validated with. The 15 held-out batches of
# hybrid_held_out.sh twice in one call, plan order then longest first (kvtune bench
# --launch-order; serial fallbacks and colocated steps both run the decode launch), with the
# shipped H200 file and kvtune's serial step; rows say launch_order. Compare each policy's
# median per case across the two runs (different processes: read the serial step's drift
# between them as the noise floor).
#   [ROUNDS=2] [LIMIT_S=110] bash benchmarks/gpu_calls/hybrid_launch_order_check.sh [OUT_DIR]
out=${1:-$OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
file=benchmarks/gpu_calls/s28_hybrid_heuristic_h200_makespan.json
for order in plan longest-first; do
  mkdir -p /tmp/h/$order
  LAUNCH_ORDER=$order bash benchmarks/gpu_calls/hybrid_held_out.sh $file /tmp/h/$order ${LIMIT_S:-110}
  date -u
done
tar -C /tmp/h -czf $out/hybrid_order.tgz .

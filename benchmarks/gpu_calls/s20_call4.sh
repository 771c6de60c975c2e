#!/usr/bin/env bash
# Session 20, call 4 (H100): `kvtune tune --revalidate` of the thirteenth session's H100 hybrid
# file against today's serial step (Gluon prefill tile since the nineteenth session): both
# shipped buckets measured against hybrid-serial on every hybrid-holdout (now with 3072-token
# chunks) and hybrid case that falls in them, 2 interleaved rounds, the tune's ship-or-defer rule.
#   bash benchmarks/gpu_calls/s20_call4.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 470 python3 -m kvtune tune --study s20-reval \
  --revalidate benchmarks/gpu_calls/s13_hybrid_heuristic_h100.json --backend triton \
  --timer events --stopping quiet_retries=1 --finalist-rounds 2 \
  --validate hybrid-holdout --validate hybrid --out $OUT/reval 2>&1 | grep -v Warning | tail -14
echo "rc ${PIPESTATUS[0]}"
cd $OUT/reval && for d in */; do cp $d/hybrid_heuristic*.json $OUT/ 2>/dev/null; done
cd $OUT && tar czf reval.tgz reval && rm -rf reval
date -u

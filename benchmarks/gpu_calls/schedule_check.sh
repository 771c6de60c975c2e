#!/usr/bin/env bash
# Ready for a GPU call (written in session 25; not run): does the order of the work list close
# the skew80 B=64 misses of the H200 matrix (0.914-0.94x FlashInfer with the same chunks, where no
# stage-1 configuration did; docs/PERFORMANCE.md, twenty-fifth session)? FlashInfer's
# tensor-core decode hands its work items to its CTAs balanced by cost; kvtune's static plan
# launches one program per task in request order. Per shape, skew80 B=64 (262,144 tokens), the
# 2048-token chunk under the four schedules on the Triton kernel, and the same chunk on
# FlashInfer (its fixed_split_size), each checked, CUDA-graph replays, two alternated rounds.
#   bash benchmarks/gpu_calls/schedule_check.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
rm -rf /tmp/sc; mkdir -p /tmp/sc
stop=min_samples=10,min_time_ms=10,max_noise=0.02,timeout_s=1,quiet_retries=1
c=fixed-split:chunk_tokens=2048
for shape in llama3-8b yi-6b g16 llama3-70b-tp8; do
  timeout 100 python3 -m kvtune bench --distribution skew80 --batch-sizes 64 --shape $shape \
    --backend triton --timer graph --rounds 2 --stopping $stop --no-progress --format csv \
    --policies $c,$c:schedule=static-heavy-first,$c:schedule=persistent-round-robin,$c:schedule=persistent-heavy-first \
    --out /tmp/sc/triton-$shape > /tmp/sc/triton-$shape.csv 2> /tmp/sc/triton-$shape.err
  timeout 60 python3 -m kvtune bench --distribution skew80 --batch-sizes 64 --shape $shape \
    --backend flashinfer --timer graph --rounds 2 --stopping $stop --no-progress --format csv \
    --policies $c --out /tmp/sc/fi-$shape > /tmp/sc/fi-$shape.csv 2> /tmp/sc/fi-$shape.err
  tail -1 /tmp/sc/triton-$shape.err /tmp/sc/fi-$shape.err
  tar -C /tmp/sc -czf $OUT/schedule_check.tgz .
done
date -u

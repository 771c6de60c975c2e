#!/usr/bin/env bash
# Session 11, call 2 (issue 15): the hybrid tune of call 1 resumed (results/s11/res carried
# back: 5 of 6 buckets decided there), then the file it writes judged on 15 hybrid batches that
# no suite holds and that neither its search nor its ship/defer check measured (other decode
# counts, chunk and context sizes, continuous-batching seeds 300-301, speculative decodes),
# each beside kvtune's serial step in the same process. Timer: CUDA events, cold L2, one guard
# retry (the guard's give-up after 8 disturbed rows in a row).
# Run on the device machine from the repository root, with .whl/ and results/s11 carried.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 300 python3 -m kvtune tune --study s11-hybrid --suite hybrid-quick --backend triton \
  --timer events --trials 4 --finalist-rounds 2 --finalists 2 --stopping quiet_retries=1 \
  --out results/s11/res --no-progress --resume > $OUT/tune_log.txt 2>&1
echo "tune rc $?"
grep -v Warning $OUT/tune_log.txt | tail -12
date -u
python3 benchmarks/gpu_calls/s11_guard_summary.py results/s11/res 2>&1 | cut -c1-400
file=$(ls -t results/s11/res/*/hybrid_heuristic.json 2>/dev/null | head -1)
echo "file: $file"
[ -n "$file" ] || { cd results/s11 && tar czf $OUT/res.tgz res; exit 0; }
cp "$file" $OUT/s11_hybrid_heuristic.json
bash benchmarks/gpu_calls/hybrid_held_out.sh "$file" $OUT 120
date -u
cd results/s11 && tar czf $OUT/res.tgz res
cd $OUT && tar czf bench.tgz bench && rm -rf bench

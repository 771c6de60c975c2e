#!/usr/bin/env bash
# Session 9, call 5 (issue 15): the hybrid kernel's prefill tile configurations on prefill-only
# batches (2048 after 8K, 512 after 4K, 2048 after 16K, 1536 after 12K), each against the default
# tile of the same call and FlashInfer's BatchPrefill on the same pages (benchmarks/
# prefill_tile_probe.py: CUDA events, L2 flushed outside them, median of 10; every tile checked
# against the float64 reference before it is timed; copy bandwidth of the same process).
# Run on the device machine from the repository root, with .whl/ from ../shared/device/wheels.sh
# (carry [".whl"]); writes under $OUT. Results: docs/PERFORMANCE.md, "Ninth session".
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . 2>/dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 MAX_JOBS=16
date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 480 python3 benchmarks/prefill_tile_probe.py --flashinfer --out $OUT/p 2>&1 \
  | grep -v Warning | tail -12
echo "probe rc ${PIPESTATUS[0]}"
python3 -c "import json; print(json.load(open('$OUT/p/prefill_tile_probe.json'))['copy'])"
date -u

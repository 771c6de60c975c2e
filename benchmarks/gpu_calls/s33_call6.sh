#!/usr/bin/env bash
# Thirty-third session, call 6: the side split in the product (decode_config.side_launch_split,
# DecodeLaunch.side; set on call 5's one case) on the llama3-70b-tp8 16-bit matrix variants:
# bf16 page 16 (variant 10; the rule was set on its skew80 B=64 fixed-2048 case), and held out
# page 64 (11), page 1 (9) and fp16 page 16 (13): bench_kernels.py --sections shapes, FlashInfer
# 0.5.3 on the same plan in the same process (paced CUDA events, cold L2, each output checked
# against float64 first). Then the split case through profile_decode.py --config product
# --graph --time: a CUDA graph of the two-stream launch replayed and compared bit for bit with
# the eager launch.
#   bash benchmarks/gpu_calls/s33_call6.sh
source benchmarks/gpu_calls/common.sh
kvtune_install
matrix_run full-v10 60 --full --variants 10   # llama3-70b-tp8 bf16 p16
matrix_run full-v11 60 --full --variants 11   # llama3-70b-tp8 bf16 p64
matrix_run full-v9 60 --full --variants 9     # llama3-70b-tp8 bf16 p1
matrix_run full-v13 60 --full --variants 13   # llama3-70b-tp8 fp16 p16
timeout 120 python3 benchmarks/profile_decode.py --shape llama3-70b-tp8 --page 16 \
  --dist skew80 --batch 64 --chunk 2048 --config product --graph --time 2>&1 | grep '^{\|rror'
python3 - <<'PY'
import csv, glob
for path in sorted(glob.glob("/tmp/matrix/full-v*/shapes.csv")):
    for r in csv.DictReader(open(path)):
        print(r["variant"], r["dist"], r["batch"], r["plan"], r["num_tasks"], r["triton_config"],
              round(float(r["triton_us"]), 1), round(float(r["flashinfer_us"]), 1),
              round(float(r["speed_vs_flashinfer"]), 3), r["triton_status"])
PY

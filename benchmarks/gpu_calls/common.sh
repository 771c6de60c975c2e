# Sourced by GPU call scripts written from the thirty-first session on (the scripts that already
# ran keep their own copies of these lines, as they ran). Run from the repository root.

# Install the carried wheels (.whl) and this checkout into /tmp/site, print the card.
kvtune_install() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl \
    && python3 -m pip install -q --upgrade --no-deps --no-build-isolation --target /tmp/site . \
      2>/dev/null
  export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
  date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
}

# config_sweep SHAPE KV_DTYPE PAGE CONFIGS DIST:BATCH:CHUNK...: profile_decode.py --configs
# --flashinfer on each case, one JSON line per timed launch appended to $OUT/configs.jsonl.
# SHAPE: a name or QO/KV/HD; SWEEP_TIMEOUT_S (default 70): the limit of each case's process.
config_sweep() {
  local shape=$1 kv=$2 page=$3 cfgs=$4; shift 4
  for case in "$@"; do
    IFS=: read dist batch chunk <<< "$case"
    timeout ${SWEEP_TIMEOUT_S:-70} python3 benchmarks/profile_decode.py --shape "$shape" \
      --kv-dtype $kv --page $page --dist $dist --batch $batch --chunk $chunk --configs $cfgs \
      --flashinfer --settle-s 0 2>&1 | grep '^{\|rror' \
      | sed "s|^{|{\"shape\": \"$shape\", \"page\": $page, |" >> $OUT/configs.jsonl
    date -u
  done
}

# print_sweep: one line per row of $OUT/configs.jsonl.
print_sweep() {
  python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/configs.jsonl") if l.startswith("{")]
for r in rows:
    print(r["shape"], r["page"], r["dist"], r["batch"], r["chunk"], r.get("num_tasks"),
          r["backend"], r.get("config") or r.get("when"), r.get("status"),
          round(r.get("matrix_us") or 0, 1), r.get("fraction_of_copy"))
PY
}

# matrix_run NAME LIMIT_S ARGS...: bench_kernels.py --sections shapes ARGS into /tmp/matrix/NAME,
# all results so far packed into $OUT/matrix.tgz after each run.
matrix_run() {
  local name=$1 limit=$2; shift 2
  mkdir -p /tmp/matrix
  timeout $((limit + 8)) python3 benchmarks/bench_kernels.py --sections shapes "$@" --settle-s 0 \
    --time-limit-s $limit --out /tmp/matrix/$name 2>&1 | grep 'cases ok\|rror' | head -3
  rm -f /tmp/matrix/$name/bench_log.txt
  tar -C /tmp/matrix -czf $OUT/matrix.tgz .
  date -u
}

# print_ncu_details DIR METRIC...: unpack DIR/profiles.tgz (benchmarks/profile_gpu.sh) and print,
# per profiled case, the first value of each named metric of its details page.
print_ncu_details() {
  local dir=$1; shift
  rm -rf /tmp/ncu_x && mkdir -p /tmp/ncu_x && tar -C /tmp/ncu_x -xzf $dir/profiles.tgz
  python3 - "$@" <<'PY'
import csv, glob, os, sys
keep = sys.argv[1:]
for path in sorted(glob.glob("/tmp/ncu_x/*.details.csv")):
    vals = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            name = r.get("Metric Name", "")
            if name in keep and name not in vals:
                vals[name] = f"{r.get('Metric Value', '')} {r.get('Metric Unit', '')}".strip()
    print(os.path.basename(path).split(".")[0], vals)
PY
}

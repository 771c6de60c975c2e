#!/usr/bin/env bash
# Nsight Compute profiles of the Triton stage-1 decode kernel (benchmarks/profile_decode.py), one
# per case, with the clocks left alone (--clock-control none, as METHOD.md asks), and the pages a
# reader needs exported as text beside each report:
#   NAME.details.csv   every section of `--set full` (throughput, occupancy, warp states, pipes)
#   NAME.raw.csv       every collected metric
#   NAME.sass.csv      per SASS instruction: executed count and warp-state samples (stall reasons)
#
#   bash benchmarks/profile_gpu.sh OUT CASES_FILE
#
# The reports and exports are written to a scratch folder and packed into OUT/profiles.tgz
# (the device machine returns at most 8 files); OUT/profiles.log has the progress and the
# check line of every case.
#
# CASES_FILE: one case per line, "NAME profile_decode.py-arguments" (# starts a comment). Each
# case is checked against the float64 reference by profile_decode.py before ncu sees a launch,
# and a case whose check fails is not profiled. KERNEL_REGEX (default _attend_kernel, stage 1)
# picks the kernel: e.g. KERNEL_REGEX=_merge_jobs for the chunked merge.
# Needs ncu on the PATH (Firecracker machines;
# /work/.library/device/KINDS.md) and the checkout importable (PYTHONPATH).
set -uo pipefail
out=${1:?usage: profile_gpu.sh OUT CASES_FILE}
cases=${2:?usage: profile_gpu.sh OUT CASES_FILE}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
work=$(mktemp -d)
exec > >(tee "$out/profiles.log") 2>&1
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "== ncu: ${ncu_bin:-missing} $(${ncu_bin:-false} --version 2>/dev/null | tail -1)"
while read -r name args; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if ! python3 "$here/profile_decode.py" $args --iters 0 > "$work/$name.check.json"; then
    echo "== $name: check failed, not profiled: $(cat "$work/$name.check.json")"; continue
  fi
  # shellcheck disable=SC2086
  timeout 240 "$ncu_bin" --clock-control none --set full --import-source no \
      -k regex:"${KERNEL_REGEX:-_attend_kernel}" --launch-skip 2 --launch-count 1 \
      -f -o "$work/$name" \
      python3 "$here/profile_decode.py" $args --iters 4 > "$work/$name.ncu.log" 2>&1
  rc=$?
  if [[ -f "$work/$name.ncu-rep" ]]; then
    "$ncu_bin" -i "$work/$name.ncu-rep" --page details --csv > "$work/$name.details.csv" 2>&1
    "$ncu_bin" -i "$work/$name.ncu-rep" --page raw --csv > "$work/$name.raw.csv" 2>&1
    "$ncu_bin" -i "$work/$name.ncu-rep" --page source --csv --print-source sass \
        > "$work/$name.sass.csv" 2>&1
  fi
  echo "== $name: ncu rc $rc, $(( $(date +%s) - t0 )) s"
  cat "$work/$name.check.json"
done < "$cases"
rm -f "$work"/*.ncu-rep.tmp
tar czf "$out/profiles.tgz" -C "$work" .

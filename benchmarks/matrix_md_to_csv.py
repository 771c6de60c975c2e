"""Rows of bench_kernels.py's shape matrix rebuilt from the markdown table a GPU call printed,
for when its shapes.csv did not come back (the device returns a limited number of files).

    python benchmarks/matrix_md_to_csv.py CALL.log OUT.csv [--shapes g16,qwen2.5-7b]
        [--device-model h100]

Each table row (`| variant | dist | B | plan | programs/SM | Triton us | FlashInfer us | ...`)
becomes a shapes.csv row with the columns benchmarks/sim_on_matrix.py reads: the variant's shape,
the case's chunk and task count rebuilt as bench_kernels builds them (262,144 tokens, seed 0, on
the model's device; a task count that disagrees with the row's programs/SM stops the script),
and the two times as printed (one decimal). The times are the GPU's; nothing is computed.
"""

from __future__ import annotations

import argparse
import csv
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench_kernels as bk  # noqa: E402


def table_rows(path: str):
    """The data rows of every matrix table in `path`, as lists of cell strings."""
    with open(path) as f:
        for line in f:
            if line.startswith("| ") and not line.startswith("| variant"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) >= 11 and not set(cells[0]) <= {"-"}:
                    yield cells


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("out")
    ap.add_argument("--shapes", default=None, help="comma-separated shape names to keep")
    ap.add_argument("--device-model", default="h100")
    args = ap.parse_args(argv)
    from kvtune.harness.device import device_model

    device = device_model(args.device_model)
    labels = {bk.variant_label(v): v for v in bk.full_variants() + bk.default_variants()}
    keep = None if args.shapes is None else set(args.shapes.split(","))
    rows = []
    for c in table_rows(args.log):
        v = labels.get(c[0])
        if v is None or (keep is not None and v[0] not in keep):
            continue
        shape = bk.variant_shape(v)
        batch = bk.matrix_batch(c[1], int(c[2]), shape, bk.TOTAL_TOKENS)
        plan, chunk = bk.matrix_plan(c[3], batch.kv_lens, shape, device)
        if abs(plan.num_tasks / device.sm_count - float(c[4])) > 0.01:
            print(f"matrix_md_to_csv: error: {c[0]} {c[1]} B={c[2]} {c[3]}: {plan.num_tasks} "
                  f"tasks rebuilt, the row says {c[4]} programs/SM", file=sys.stderr)
            return 2
        rows.append({"variant": c[0], "shape": v[0], "dtype": v[1], "kv_dtype": v[2],
                     "page_size": v[3], "dist": c[1], "batch": c[2], "plan": c[3],
                     "chunk_tokens": chunk, "num_tasks": plan.num_tasks,
                     "triton_us": c[5], "triton_status": "ok", "flashinfer_us": c[6],
                     "flashinfer_status": "ok", "triton_config": c[10]})
    if not rows:
        print("matrix_md_to_csv: error: no matrix row in the log (or none of --shapes)",
              file=sys.stderr)
        return 2
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

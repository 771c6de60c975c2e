"""`kvtune calibrate`: fit the simulator's constants for one kernel to GPU measurement rows."""

from __future__ import annotations

import sys

from kvtune.cli.common import add_command


def add_parser(sub) -> None:
    from kvtune.harness.calibration import DEFAULT_HOLDOUT_SHARE, DEFAULT_MAX_FIT_ROWS
    from kvtune.harness.device import SIM_KERNELS

    p = add_command(sub, "calibrate", "fit the simulator's constants to GPU runs", [
        "kvtune calibrate --from results/<run> --kernel triton -o h200-triton.json",
        ("kvtune calibrate --from results/<a> --from results/<b> --held-out results/<c> "
         "--kernel flashinfer-tensor-core -o h200-flashinfer-tensor-core.json"),
    ], "Fits one simulator model (device, kernel) to the rows of GPU bench runs with robust least "
       "squares, holds out a share of the batches (and every row of --held-out runs), prints the "
       "fitted constants, the fit error and the held-out rank agreement, and writes the "
       "calibration file that --device-model takes. Rows that did not run (status not ok) are "
       "dropped; extra columns are ignored.")
    p.add_argument("--from", dest="runs", action="append", required=True, metavar="RUN_DIR",
                   help="a GPU bench run folder (repeatable)")
    p.add_argument("--held-out", action="append", default=[], metavar="RUN_DIR",
                   help="a run used only to evaluate the fit (repeatable), e.g. other traces/seeds")
    p.add_argument("--kernel", required=True, help="the kernel to model: " + ", ".join(SIM_KERNELS))
    p.add_argument("-o", "--out", required=True, help="calibration file to write (.json)")
    p.add_argument("--holdout-share", type=float, default=DEFAULT_HOLDOUT_SHARE,
                   help=f"share of the batches held out, 0 <= x < 1 (default {DEFAULT_HOLDOUT_SHARE})")
    p.add_argument("--max-rows", type=int, default=DEFAULT_MAX_FIT_ROWS,
                   help=f"most rows fitted, whole batches (default {DEFAULT_MAX_FIT_ROWS})")
    p.add_argument("--max-evaluations", type=int, default=60,
                   help="most model evaluations of the optimizer (default 60)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out choice (default 0)")
    p.add_argument("--name", help="device name in the file (default: the preset matching the GPU)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from pathlib import Path

    from kvtune.harness.calibration import calibrate, format_result
    from kvtune.harness.device import check_sim_kernel, write_calibration
    from kvtune.harness.fidelity import load_rows

    check_sim_kernel(args.kernel)
    out = Path(args.out)
    if out.suffix.lower() != ".json":
        raise ValueError(f"out: {str(out)!r} must end in .json (--device-model tells files by it)")
    if args.max_rows < 2 or args.max_evaluations < 1:
        raise ValueError("max-rows: >= 2 and max-evaluations: >= 1 required")
    rows = load_rows(args.runs)
    held = load_rows(args.held_out) if args.held_out else None
    result = calibrate(rows, args.kernel, holdout_share=args.holdout_share, held_out=held,
                       seed=args.seed, max_fit_rows=args.max_rows,
                       max_evaluations=args.max_evaluations, name=args.name,
                       command=args.command_line)
    for reason, count in sorted(rows.dropped.items()):
        print(f"kvtune calibrate: dropped {count} rows ({reason})", file=sys.stderr)
    print(format_result(result))
    write_calibration(result.model, out)
    print(f"wrote {out}")
    return 0

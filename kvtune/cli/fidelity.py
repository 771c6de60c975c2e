"""`kvtune fidelity`: re-run GPU cases on the simulator and say how well it ranks them."""

from __future__ import annotations

import sys

from kvtune.cli.common import add_command, print_json


def add_parser(sub) -> None:
    from kvtune.harness.device import DEVICE_MODELS, SIM_KERNELS

    p = add_command(sub, "fidelity", "compare the simulator with GPU runs", [
        "kvtune fidelity --gpu results/<gpu-run>",
        "kvtune fidelity --gpu results/<gpu-run> --device-model h200-triton.json",
        "kvtune fidelity --gpu results/<gpu-run> --device-model h200 --sim-kernel flashinfer-cuda-core",
    ], "Plans every GPU row's batch again, simulates it with the model, and prints per-batch "
       "Spearman of the policy ranking, top-1 agreement, the GPU regret of the simulator's pick "
       "and the latency error by batch size, one table per kernel found in the rows.")
    p.add_argument("--gpu", action="append", required=True, metavar="RUN_DIR",
                   help="a GPU bench run folder (repeatable)")
    p.add_argument("--device-model", help="preset (" + ", ".join(DEVICE_MODELS) + ") or calibration "
                   "file (default: the preset matching the runs' GPU)")
    p.add_argument("--sim-kernel", help="compare only rows of this kernel: " + ", ".join(SIM_KERNELS)
                   + " (default: every kernel in the rows; a calibration file's own)")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from kvtune.harness.device import (
        is_calibration_path,
        model_for_gpu_name,
        sim_model,
    )
    from kvtune.harness.fidelity import fidelity, format_report, load_rows

    rows = load_rows(args.gpu)
    name = args.device_model
    if name is None:
        gpu = next(iter(rows.devices.values()))
        preset = model_for_gpu_name(gpu.name)
        if preset is None:
            raise ValueError(f"device-model: no preset matches GPU {gpu.name!r}; give "
                             "--device-model (a preset or a calibration file)")
        name = preset.name
    if args.sim_kernel is not None:
        kernels = [args.sim_kernel]
    elif is_calibration_path(name):
        kernels = [sim_model(name).kernel]
    else:
        kernels = rows.kernels()
    for reason, count in sorted(rows.dropped.items()):
        print(f"kvtune fidelity: dropped {count} rows ({reason})", file=sys.stderr)
    summaries = {}
    for kernel in kernels:
        model = sim_model(name, kernel)
        report, _ = fidelity(rows, kernel, model)
        summaries[kernel] = {"model": model.label, **report.summary}
        if not args.json:
            print(format_report(report, f"{kernel}: {model.device.name}, {model.label}"))
            print()
    if args.json:
        print_json(summaries)
    return 0

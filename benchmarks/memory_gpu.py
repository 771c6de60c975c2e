"""GPU memory of `kvtune tune --backend triton` (issue 13): peak PyTorch reserved memory against
the batch cache's cap, and the one-line refusal of a batch that cannot fit.

    python3 benchmarks/memory_gpu.py OUT [--dry-run]

1. `kvtune tune --backend triton --workers 1` on a short suite of large batches (two batches of
   8 GB of KV cache each for llama3-8b), in this process, so that
   torch.cuda.max_memory_reserved() is the tune's own peak; the run verifies every configuration
   before it times it, and measures the device copy bandwidth (its ceiling; the report gives the
   batches' bytes as seconds of copy at that bandwidth for scale).
2. `kvtune bench` of a batch that needs about 1 TB (256 requests of 1M tokens): it must exit 2
   with one line naming the case, the GB needed and the GB free, before allocating anything.
Writes OUT/memory.json and OUT/memory.md. --dry-run runs both on the simulator (no GPU): the
tune, and the refusal through the triton backend's pure check (batch_need_bytes, check_fit).
Fits one minute on an H100/H200.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

TUNE = ["tune", "--study", "memory", "--distribution", "uniform", "--batch-sizes", "64,256",
        "--param", "total_tokens=2097152", "--buckets", "1-64,65-256", "--trials", "3",
        "--sampler", "random", "--finalists", "1", "--finalist-rounds", "1", "--workers", "1",
        "--baselines", "fa3,fixed-split", "--timeout-s", "15", "--validate", "none",
        "--no-adaptive", "--no-stress", "--no-progress"]
STOPPING = "min_samples=5,min_time_ms=5,max_noise=0.05,timeout_s=0.5"
TOO_LARGE = ["bench", "--distribution", "uniform", "--batch-sizes", "256",
             "--param", f"total_tokens={256 * (1 << 20)}", "--policies", "fa3", "--no-progress"]


def run_cli(argv):
    from kvtune.cli import main

    import traceback

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except Exception:  # noqa: BLE001 - a crash is a result of this benchmark too
            traceback.print_exc()
            code = 1
    return code, err.getvalue()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    dry = "--dry-run" in argv
    out = Path([a for a in argv if a != "--dry-run"][0])
    out.mkdir(parents=True, exist_ok=True)
    backend = ["--backend", "simulator", "--device-model", "h100"] if dry else [
        "--backend", "triton", "--stopping", STOPPING]
    report: dict = {"dry_run": dry}
    gpu = None
    if not dry:
        import torch

        torch.cuda.reset_peak_memory_stats()
        props = torch.cuda.get_device_properties(0)
        gpu = {"name": props.name, "total_bytes": int(props.total_memory)}
        report["gpu"] = gpu
    t0 = time.time()
    code, err = run_cli(TUNE + backend + ["--out", str(out / "results")])
    report["tune"] = {"exit": code, "wall_s": round(time.time() - t0, 1), "stderr_tail": err[-2000:]}
    runs = sorted((out / "results").glob("*-tune-*/manifest.json"))
    if runs:
        man = json.loads(runs[-1].read_text())
        report["tune"].update(status=man.get("status"), rows=man.get("rows"),
                              failed_rows=man.get("failed_rows"),
                              ceiling_bytes_per_s=man.get("ceiling_bytes_per_s"),
                              ceiling_kind=man.get("ceiling_kind"))
    if not dry:
        import torch

        from kvtune.harness.backends.triton import CACHE_SHARE

        peak = int(torch.cuda.max_memory_reserved())
        cap = gpu["total_bytes"] // CACHE_SHARE
        report["tune"].update(peak_reserved_bytes=peak, cache_cap_bytes=cap,
                              peak_fraction_of_gpu=peak / gpu["total_bytes"])
        ceiling = report["tune"].get("ceiling_bytes_per_s")
        if ceiling:
            report["tune"]["batch_kv_bytes"] = 2097152 * 4096
            report["tune"]["batch_copy_time_s_at_ceiling"] = 2097152 * 4096 / ceiling
    # The batch that cannot fit: one line, exit 2, nothing allocated.
    if dry:
        from kvtune.harness.backends.triton import batch_need_bytes, check_fit
        from kvtune.workloads.selection import CaseSettings, resolve_shape, resolve_suite

        settings = CaseSettings(distribution="uniform", batch_sizes="256",
                                params=(f"total_tokens={256 * (1 << 20)}",))
        case = resolve_suite(settings, resolve_shape(settings)).cases[0]
        try:
            check_fit(f"case {case.case_id}", batch_need_bytes(case.batch()), 80 * 10**9)
            code, err = 0, ""
        except ValueError as exc:
            code, err = 2, f"kvtune: error: {exc}\n"
    else:
        code, err = run_cli(TOO_LARGE + ["--backend", "triton", "--out", str(out / "results")])
    lines = [line for line in err.strip().splitlines() if line.startswith("kvtune: error:")]
    ok = code == 2 and len(lines) == 1 and "needs" in lines[0] and "GB free" in lines[0] and "case" in lines[0]
    report["too_large"] = {"exit": code, "line": lines[0] if lines else err[-500:], "refused_in_one_line": ok}
    if not dry:
        import torch

        report["too_large"]["reserved_after_bytes"] = int(torch.cuda.memory_reserved())
    (out / "memory.json").write_text(json.dumps(report, indent=2) + "\n")
    t = report["tune"]
    md = ["# GPU memory of kvtune tune (issue 13)", "",
          f"- device: {gpu['name'] if gpu else 'simulator (dry run)'}",
          f"- tune: exit {t['exit']}, status {t.get('status')}, {t.get('rows')} rows "
          f"({t.get('failed_rows')} not ok), wall {t['wall_s']} s"]
    if gpu:
        md.append(f"- peak torch reserved: {t['peak_reserved_bytes'] / 1e9:.1f} GB of "
                  f"{gpu['total_bytes'] / 1e9:.1f} GB ({t['peak_fraction_of_gpu']:.1%}); batch cache "
                  f"cap {t['cache_cap_bytes'] / 1e9:.1f} GB")
        if t.get("ceiling_bytes_per_s"):
            md.append(f"- copy bandwidth (ceiling): {t['ceiling_bytes_per_s'] / 1e12:.2f} TB/s; one batch's "
                      f"KV cache ({t['batch_kv_bytes'] / 1e9:.1f} GB) is {t['batch_copy_time_s_at_ceiling'] * 1e3:.2f} ms of copy")
    md.append(f"- too-large batch: exit {report['too_large']['exit']}, one line: "
              f"{report['too_large']['refused_in_one_line']}: `{report['too_large']['line']}`")
    (out / "memory.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    good = t["exit"] == 0 and ok
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())

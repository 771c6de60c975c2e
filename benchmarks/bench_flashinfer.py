"""GPU benchmark: FlashInfer's decode with its own heuristics, with a tuned chunk per batch-size
bucket, and kvtune's Triton kernel, on the threshold and prod-mix suites, in one run.

Not a test: it needs a CUDA GPU and flashinfer-python 0.5.x. Everything goes through the
project's harness (open_backend, Runner, the correctness gate, the shared timers, RunWriter), so
every row is verified against the float64 reference before it is timed and the result folders
open in the dashboard. One invocation does, in order:
  open      both backends (each measures the device copy bandwidth: the ceiling);
  measure   per case (threshold suite: uniform, skew40, skew60, skew80, 2x40 at 262,144 tokens,
            batch 1..512; then prod-mix seed by seed), FlashInfer, then Triton, each backend
            freeing its batch before the other builds one:
              flashinfer  flashinfer-tensor-core and flashinfer-cuda-core (FlashInfer's own
                          planners, nothing passed) and fixed-split at every chunk of --grid
                          (fixed_split_size on the tensor-core path);
              triton      fa3, trtllm-oversub and the parametric rule at every chunk of --grid
                          (max_waves 16, max_splits 128, 2 CTAs per SM, static);
  tune      per batch-size bucket (1-8, 9-32, 33-128, 129-512) the grid chunk with the smallest
            geometric-mean latency over the bucket's cases, on each kernel: FlashInfer's tuned
            fixed_split_size table, and Triton's `tuned` BucketedPolicy. The tuned rows are the
            grid measurements of the chosen chunk (in-sample: chosen on the cases they report);
            --remeasure-tuned measures them again in a second pass instead;
  write     results/<run>/ for flashinfer (main rows + tuned), triton (main rows + tuned) and the
            grid (both kernels), and summary.md with the table.
A deadline (--deadline-s) stops measuring new cases and still tunes and writes what was measured.

Usage (repository root, on the GPU machine):
  PYTHONPATH=$PWD python benchmarks/bench_flashinfer.py --out $OUT [--smoke]
      [--grid 512,1024,2048,4096,8192,16384] [--prod-mix-seeds 0,1,2] [--timer auto]
      [--min-samples 10 --min-time-ms 10 --max-noise 0.01 --timeout-s 1] [--deadline-s 380]
--smoke: one skew80 and one uniform batch at B=64 on both FlashInfer paths (own planner and a
2048-token fixed split), the graph timer once, and Triton's fa3: checks that flashinfer installs,
JIT-compiles, verifies and times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from kvtune.harness import gate
from kvtune.harness.backends.select import open_backend
from kvtune.harness.runner import CaseRun, Runner
from kvtune.harness.stopping import StoppingRule, WarmupRule
from kvtune.harness.store import RunWriter
from kvtune.kernels import policies
from kvtune.studies.buckets import default_buckets
from kvtune.workloads.suites import get_suite

DEFAULT_GRID = "512,1024,2048,4096,8192,16384"
FI_DEFAULTS = ("flashinfer-tensor-core", "flashinfer-cuda-core")
TRITON_BASELINES = ("fa3", "trtllm-oversub")
# The parametric knobs held fixed while Triton's chunk is tuned: the fixed-split start point of
# studies/start_points.py with the tensor-core planner's 2 CTAs per SM.
TRITON_GRID_KNOBS = {"max_waves": 16, "max_splits": 128, "ctas_per_sm": 2, "schedule": "static"}
THROTTLE_PAUSE_S = 0.5  # the gate's pause before re-measuring a throttled row (default 2 s)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- cases and policies ------------------------------------------------------------------------

def suite_cases(prod_mix_seeds: tuple[int, ...]) -> list:
    """Threshold cases, then prod-mix cases of the given seeds (suite order)."""
    cases = list(get_suite("threshold").cases)
    cases += [c for c in get_suite("prod-mix").cases if c.seed in prod_mix_seeds]
    return cases


def fi_grid_policy(chunk: int):
    return policies.get("fixed-split", chunk_tokens=chunk)


def triton_grid_policy(chunk: int):
    return policies.get("parametric", min_tokens_per_cta=chunk, **TRITON_GRID_KNOBS)


# -- measuring ---------------------------------------------------------------------------------

class Phase:
    """One backend's rows: the run folder of its main rows and the grid rows (kept apart)."""

    def __init__(self, label: str, opened, writer: RunWriter) -> None:
        self.label, self.opened, self.writer = label, opened, writer
        self.main: list[dict] = []
        self.grid: list[dict] = []
        self.runner = Runner(opened.backend, opened.device, opened.ceiling_bytes_per_s,
                             run_id=writer.run_id)

    def measure(self, case, policy, **columns) -> dict:
        t0 = time.perf_counter()
        row, _ = self.runner.measure_one(case, policy)
        row.update(columns)
        row["wall_s"] = time.perf_counter() - t0
        status = row["status"]
        lat = f"{row['latency_us']:9.1f} us" if status == "ok" else f"{status}: {row.get('message', '')}"
        path = row.get("fi_path")
        extra = f" [{path} {row.get('fi_planner')}, agrees={row.get('fi_plan_agrees')}]" if path else ""
        log(f"  {self.label:10s} {case.case_id:24s} {columns.get('series', policy.name):28s} "
            f"{lat}{extra} ({row['wall_s']:.2f} s)")
        return row


def open_phase(name: str, args, out_dir: Path, kind: str, extra_manifest: dict):
    opened = open_backend(name, timer=args.timer, cold_l2=True)
    backend = opened.backend
    backend.stopping = stopping_rule(args)
    if hasattr(backend, "warmup"):
        backend.warmup = WarmupRule(max_runs=8)
    log(f"opened {name}: {opened.notice}")
    manifest = {
        "kind": kind,
        "command": " ".join(sys.argv),
        "suite": "threshold+prod-mix",
        "backend": backend.name,
        "device": opened.device.to_dict(),
        "simulated": False,
        "ceiling_bytes_per_s": opened.ceiling_bytes_per_s,
        "ceiling_kind": opened.ceiling_kind,
        "environment": {**opened.environment, "stopping": stopping_rule(args).to_dict(),
                        "throttle_pause_s": THROTTLE_PAUSE_S},
        **extra_manifest,
    }
    writer = RunWriter.create(out_dir / "results", manifest, kind=kind)
    return Phase(name, opened, writer)


def stopping_rule(args) -> StoppingRule:
    return StoppingRule(min_samples=args.min_samples, min_time_ms=args.min_time_ms,
                        max_noise=args.max_noise, timeout_s=args.timeout_s)


def run_flashinfer_case(phase: Phase, case: CaseRun, grid: list[int]) -> None:
    for name in FI_DEFAULTS:
        phase.main.append(phase.measure(case, policies.get(name), series=f"{name} (own planner)",
                                        phase="main"))
    for chunk in grid:
        phase.grid.append(phase.measure(case, fi_grid_policy(chunk), series=f"fi-tc fixed {chunk}",
                                        phase="grid", grid_chunk_tokens=chunk))


def run_triton_case(phase: Phase, case: CaseRun, grid: list[int]) -> None:
    for name in TRITON_BASELINES:
        phase.main.append(phase.measure(case, policies.get(name), series=f"triton {name}",
                                        phase="main"))
    for chunk in grid:
        phase.grid.append(phase.measure(case, triton_grid_policy(chunk),
                                        series=f"triton parametric {chunk}", phase="grid",
                                        grid_chunk_tokens=chunk))


# -- tuning from the grid ----------------------------------------------------------------------

def tune_buckets(grid_rows: list[dict], buckets) -> list[dict]:
    """Per bucket: the grid chunk with the smallest geometric-mean latency over the bucket's
    cases, among chunks that ran (status ok) on every one of them."""
    table = []
    for bucket in buckets:
        rows = [r for r in grid_rows if bucket.holds(r["batch_size"])]
        cases = sorted({r["case_id"] for r in rows})
        if not cases:
            continue
        scores = {}
        for chunk in sorted({r["grid_chunk_tokens"] for r in rows}):
            lat = {r["case_id"]: r["latency_us"] for r in rows
                   if r["grid_chunk_tokens"] == chunk and r["status"] == "ok"
                   and math.isfinite(r["latency_us"]) and r["latency_us"] > 0}
            if set(lat) == set(cases):
                scores[chunk] = float(np.exp(np.mean(np.log([lat[c] for c in cases]))))
        if not scores:
            continue
        best = min(scores, key=lambda c: (scores[c], c))
        workspace = max([0] + [r["fi_workspace_bytes"] for r in rows
                               if r["grid_chunk_tokens"] == best
                               and _finite(r.get("fi_workspace_bytes"))])
        table.append({"min_batch": bucket.min_batch, "max_batch": bucket.max_batch,
                      "chunk_tokens": int(best), "cases": len(cases),
                      "geomean_us": {int(c): s for c, s in scores.items()},
                      "max_workspace_bytes_seen": int(workspace)})
    return table


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def bucket_of(table: list[dict], batch: int) -> dict | None:
    return next((b for b in table if b["min_batch"] <= batch <= b["max_batch"]), None)


def tuned_rows_from_grid(grid_rows: list[dict], table: list[dict], policy_name: str,
                         policy_params: dict | None, series: str) -> list[dict]:
    """The grid rows of each case's chosen chunk, labelled as the tuned heuristic's rows."""
    out = []
    for r in grid_rows:
        b = bucket_of(table, r["batch_size"])
        if b is None or r["grid_chunk_tokens"] != b["chunk_tokens"]:
            continue
        row = dict(r)
        row.update(series=series, phase="tuned", tuned_bucket=f"{b['min_batch']}-{b['max_batch']}",
                   tuned_from="grid (in-sample)")
        if policy_params is not None:
            row["policy"] = policy_name
            row["policy_params"] = json.dumps(policy_params, sort_keys=True)
        out.append(row)
    return out


def triton_tuned_policy(table: list[dict]):
    buckets = [{"min_batch": b["min_batch"], "max_batch": b["max_batch"],
                "params": {"min_tokens_per_cta": b["chunk_tokens"], **TRITON_GRID_KNOBS}}
               for b in table]
    return policies.get("tuned", buckets=buckets)


class TunedChunkPolicy:
    """fixed-split with the chunk of the batch's bucket (FlashInfer's tuned table)."""

    name = "fixed-split"

    def __init__(self, table: list[dict]) -> None:
        self.table = table

    def _policy(self, batch: int):
        b = bucket_of(self.table, batch) or self.table[-1]
        return fi_grid_policy(b["chunk_tokens"])

    def plan(self, kv_lens, shape, device):
        return self._policy(len(kv_lens)).plan(kv_lens, shape, device)

    def params(self) -> dict:
        return {"buckets": self.table}


# -- the summary table -------------------------------------------------------------------------

def summary(fi_rows: list[dict], tr_rows: list[dict], fi_grid: list[dict], ceiling: float,
            device: str, fi_table, tr_table, header: str) -> str:
    """Markdown: one line per case, latency in us per series, the floor (min bytes / ceiling)."""
    series = ["flashinfer-tensor-core (own planner)", "flashinfer-cuda-core (own planner)",
              "fi-tc tuned", "fi-tc fixed 2048", "triton fa3", "triton trtllm-oversub",
              "triton tuned"]
    short = ["FI-TC default", "FI-CC default", "FI-TC tuned", "FI-TC 2048", "Triton fa3",
             "Triton trtllm-oversub", "Triton tuned"]
    cell: dict[tuple[str, str], str] = {}
    meta: dict[str, dict] = {}
    for r in fi_rows + tr_rows + [g for g in fi_grid if g.get("grid_chunk_tokens") == 2048]:
        meta.setdefault(r["case_id"], r)
        text = f"{r['latency_us']:.0f}" if r["status"] == "ok" else f"!{r['status']}"
        if r.get("phase") == "tuned":
            text += f" ({r['grid_chunk_tokens']})"
        cell[(r["case_id"], r["series"])] = text
    lines = [header, "",
             "| case | B | " + " | ".join(short) + " | floor |",
             "|---|---|" + "---|" * len(short) + "---|"]
    for case_id, r in meta.items():
        floor = r["bytes_moved"] / ceiling * 1e6 if ceiling and r.get("bytes_moved") else float("nan")
        vals = [cell.get((case_id, s), "") for s in series]
        lines.append(f"| {r['distribution']} s{r['seed']} | {r['batch_size']} | " + " | ".join(vals)
                     + f" | {floor:.0f} |")
    lines += ["", (f"Latency in us (median), {device}; floor = minimal bytes / measured copy "
                   f"bandwidth {ceiling / 1e12:.2f} TB/s. Tuned cells give the bucket's chunk."), ""]
    for label, table in (("FlashInfer tensor-core fixed_split_size", fi_table),
                         ("Triton parametric min_tokens_per_cta", tr_table)):
        lines.append(f"Tuned {label} per bucket:")
        for b in table:
            ws = b.get("max_workspace_bytes_seen", 0)
            lines.append(f"- {b['min_batch']}-{b['max_batch']}: {b['chunk_tokens']} tokens "
                         f"({b['chunk_tokens'] // 16} pages), {b['cases']} cases"
                         + (f", float workspace up to {ws / 2**20:.0f} MiB" if ws else ""))
        lines.append("")
    return "\n".join(lines)


# -- the runs ----------------------------------------------------------------------------------

def run_smoke(args, out_dir: Path) -> int:
    import torch

    t0 = time.perf_counter()
    fi = open_phase("flashinfer", args, out_dir, "bench", {"smoke": True})
    cases = [CaseRun(c.case_id, c.batch()) for c in get_suite("threshold").cases
             if c.batch_size == 64 and c.distribution in ("skew80", "uniform")]
    assert cases, "no B=64 threshold cases"
    log(f"flashinfer {fi.opened.backend.version}, torch {torch.__version__}, "
        f"{torch.cuda.get_device_name(0)}; open took {time.perf_counter() - t0:.1f} s")
    for case in cases:
        for name in FI_DEFAULTS:
            fi.main.append(fi.measure(case, policies.get(name), series=name, phase="main"))
        fi.main.append(fi.measure(case, fi_grid_policy(2048), series="fi-tc fixed 2048", phase="main"))
    fi.writer.write_rows(fi.main)
    fi.writer.finish("complete", rows=len(fi.main))
    # The graph timer once: a second backend instance (the timer is chosen at construction).
    try:
        from kvtune.harness.backends.flashinfer import FlashInferBackend

        g = FlashInferBackend(fi.opened.device, timer="graph", cold_l2=True,
                              stopping=stopping_rule(args))
        runner = Runner(g, fi.opened.device, fi.opened.ceiling_bytes_per_s)
        row, _ = runner.measure_one(cases[0], fi_grid_policy(2048))
        log(f"  graph timer: {row['status']} {row.get('latency_us', float('nan')):.1f} us "
            f"timer={row.get('timer')} copies={row.get('input_copies')} {row.get('message', '')}")
        g.close()
    except Exception as exc:  # noqa: BLE001 - the smoke reports, it does not stop
        log(f"  graph timer: ERROR {type(exc).__name__}: {exc}")
    fi.opened.backend.close()
    try:
        tr = open_phase("triton", args, out_dir, "bench", {"smoke": True})
        tr.main.append(tr.measure(cases[0], policies.get("fa3"), series="triton fa3", phase="main"))
        tr.opened.backend.close()
    except Exception as exc:  # noqa: BLE001
        log(f"  triton: ERROR {type(exc).__name__}: {exc}")
    log(f"smoke done in {time.perf_counter() - t0:.1f} s")
    for r in fi.main:
        log(f"{r['case_id']:24s} {r['series']:28s} {r['status']:6s} {r['latency_us']:9.1f} us "
            f"{r.get('fi_path')} {r.get('fi_planner')} chunk={r.get('fi_chunk_tokens')} "
            f"items={r.get('fi_items')} agrees={r.get('fi_plan_agrees')} ws={r.get('fi_workspace_bytes')} "
            f"timer={r.get('timer')} n={r.get('samples')} wall={r['wall_s']:.2f}s {r.get('message', '')}")
    return 0


def run_full(args, out_dir: Path) -> int:
    import torch

    start = time.perf_counter()
    deadline = start + args.deadline_s
    grid = [int(x) for x in args.grid.split(",")]
    seeds = tuple(int(x) for x in args.prod_mix_seeds.split(",") if x.strip())
    cases = [CaseRun(c.case_id, c.batch()) for c in suite_cases(seeds)]
    buckets = default_buckets(max(c.batch.batch_size for c in cases))
    note = {"grid_chunk_tokens": grid, "prod_mix_seeds": list(seeds),
            "triton_grid_knobs": TRITON_GRID_KNOBS, "date": dt.date.today().isoformat()}
    fi = open_phase("flashinfer", args, out_dir, "bench", note)
    tr = None
    if not args.skip_triton:
        try:
            tr = open_phase("triton", args, out_dir, "bench", note)
        except Exception as exc:  # noqa: BLE001 - FlashInfer's rows still count
            log(f"triton backend unavailable: {type(exc).__name__}: {exc}")
    log(f"{len(cases)} cases, grid {grid}; {torch.cuda.get_device_name(0)}; "
        f"flashinfer {fi.opened.backend.version}")
    stopped_at = None
    # Case by case, both kernels in turn, each freeing its batch before the other builds one (a
    # prod-mix batch holds up to 32 GB of cache); prod-mix seed by seed, so a deadline leaves
    # whole seeds measured on both kernels.
    prod_mix = sorted((c for c in cases if c.batch.distribution == "prod-mix"),
                      key=lambda c: (c.batch.seed, c.batch.batch_size))
    threshold = [c for c in cases if c.batch.distribution != "prod-mix"]
    for case in threshold + prod_mix:
        if time.perf_counter() > deadline:
            stopped_at = case.case_id
            break
        for phase, run_case in ((fi, run_flashinfer_case), (tr, run_triton_case)):
            if phase is None:
                continue
            try:
                run_case(phase, case, grid)
            except Exception:  # noqa: BLE001 - keep what was measured
                log(f"{phase.label} {case.case_id}: ERROR\n{traceback.format_exc()}")
            phase.opened.backend.close()
            phase.writer.write_rows(phase.main + phase.grid)
    if stopped_at:
        log(f"deadline of {args.deadline_s} s reached: not measured from {stopped_at} on")

    fi_table = tune_buckets(fi.grid, buckets)
    fi_tuned = tuned_rows_from_grid(fi.grid, fi_table, "fixed-split", None, "fi-tc tuned")
    phases = [fi] + ([tr] if tr else [])
    tr_table, tr_tuned = [], []
    if tr is not None:
        tr_table = tune_buckets(tr.grid, buckets)
        if tr_table:
            tuned = triton_tuned_policy(tr_table)
            tr_tuned = tuned_rows_from_grid(tr.grid, tr_table, tuned.name, tuned.params(),
                                            "triton tuned")
    if args.remeasure_tuned and time.perf_counter() < deadline + 60:
        fi_tuned, tr_tuned = remeasure(fi, tr, cases, fi_table, tr_table)
    fi.main += fi_tuned
    if tr is not None:
        tr.main += tr_tuned
    grid_rows = fi.grid + (tr.grid if tr else [])
    grid_writer = RunWriter.create(out_dir / "results", {
        **fi.writer.manifest, "kind": "grid", "backend": "flashinfer+triton",
        "tuned_tables": {"flashinfer": fi_table, "triton": tr_table}}, kind="grid")
    grid_writer.write_rows(grid_rows)
    grid_writer.finish("complete", rows=len(grid_rows))
    for phase, table in zip(phases, (fi_table, tr_table)):
        phase.writer.write_rows(phase.main)
        phase.writer.update(tuned_table=table, stopped_at=stopped_at)
        failed = sum(r["status"] != "ok" for r in phase.main)
        phase.writer.finish("complete", rows=len(phase.main), failed_rows=failed)
    ceiling = fi.opened.ceiling_bytes_per_s
    header = (f"# FlashInfer vs kvtune Triton, {torch.cuda.get_device_name(0)}, "
              f"{dt.date.today().isoformat()}\n\ncommand: `{' '.join(sys.argv)}`; timer "
              f"{fi.opened.backend.timer_name} (cold L2), stopping {stopping_rule(args).to_dict()}; "
              f"copy bandwidth {ceiling / 1e12:.3f} TB/s"
              + (f" (triton's open measured {tr.opened.ceiling_bytes_per_s / 1e12:.3f})" if tr else "")
              + (f"; deadline reached, cases from {stopped_at} on not measured" if stopped_at else ""))
    text = summary(fi.main, tr.main if tr else [], fi.grid, ceiling, torch.cuda.get_device_name(0),
                   fi_table, tr_table, header)
    (out_dir / "summary.md").write_text(text + "\n")
    print(text, flush=True)
    log(f"done in {time.perf_counter() - start:.0f} s; runs: {fi.writer.run_id}"
        + (f", {tr.writer.run_id}" if tr else "") + f", {grid_writer.run_id}")
    return 0


def remeasure(fi: Phase, tr: Phase | None, cases, fi_table, tr_table):
    """Second pass: the tuned heuristics measured afresh through the Runner."""
    fi_rows, tr_rows = [], []
    fi_policy = TunedChunkPolicy(fi_table)
    for case in cases:
        b = bucket_of(fi_table, case.batch.batch_size)
        if b is not None:
            fi_rows.append(fi.measure(case, fi_policy, series="fi-tc tuned", phase="tuned",
                                      grid_chunk_tokens=b["chunk_tokens"],
                                      tuned_bucket=f"{b['min_batch']}-{b['max_batch']}",
                                      tuned_from="remeasured"))
    fi.opened.backend.close()
    if tr is not None and tr_table:
        policy = triton_tuned_policy(tr_table)
        for case in cases:
            b = bucket_of(tr_table, case.batch.batch_size)
            tr_rows.append(tr.measure(case, policy, series="triton tuned", phase="tuned",
                                      grid_chunk_tokens=b["chunk_tokens"] if b else None,
                                      tuned_from="remeasured"))
        tr.opened.backend.close()
    return fi_rows, tr_rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="output folder (default $OUT or ./bench_out)")
    p.add_argument("--smoke", action="store_true", help="the short install/JIT/verify/time check")
    p.add_argument("--grid", default=DEFAULT_GRID, help=f"chunk sizes in tokens (default {DEFAULT_GRID})")
    p.add_argument("--prod-mix-seeds", default="0,1,2", help="prod-mix seeds (default 0,1,2; empty: none)")
    p.add_argument("--timer", default="auto", help="auto, cupti, events or graph")
    p.add_argument("--min-samples", type=int, default=10)
    p.add_argument("--min-time-ms", type=float, default=10.0)
    p.add_argument("--max-noise", type=float, default=0.01)
    p.add_argument("--timeout-s", type=float, default=1.0)
    p.add_argument("--deadline-s", type=float, default=380.0,
                   help="stop measuring new cases after this many seconds (default 380)")
    p.add_argument("--remeasure-tuned", action="store_true",
                   help="measure the tuned heuristics in a second pass instead of reusing the grid")
    p.add_argument("--skip-triton", action="store_true")
    args = p.parse_args(argv)
    import os

    out_dir = Path(args.out or os.environ.get("OUT") or "bench_out")
    out_dir.mkdir(parents=True, exist_ok=True)
    # The gate re-measures a throttled row after a pause; 2 s per row would eat the budget.
    gate.gate_and_measure = functools.partial(gate.gate_and_measure, throttle_pause_s=THROTTLE_PAUSE_S)
    return run_smoke(args, out_dir) if args.smoke else run_full(args, out_dir)


if __name__ == "__main__":
    sys.exit(main())

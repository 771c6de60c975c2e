"""A bench run: every case of a suite with every policy on one backend, stored under results/.

Order of work (what is written when):
1. Everything that can be checked is checked (cases, policies, backend settings) before a
   folder is created.
2. The backend is opened (a GPU backend measures the copy bandwidth, its ceiling).
3. The run folder is created with its manifest (`running`); rows are appended as they come, so
   a crash keeps all but the last few.
4. The manifest is finished: `complete` with the row counts, or `failed` with the error.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass, field

from kvtune.kernels.policies import from_specs
from kvtune.workloads.selection import CaseSettings, resolve_shape, resolve_suite

DEFAULT_POLICIES = "flashinfer-tensor-core,fa3,trtllm-oversub,no-split"
DEFAULT_RESULTS_DIR = "results"
# Rows are written to disk every this many rows (a crash loses at most these).
FLUSH_EVERY_ROWS = 50


@dataclass(frozen=True)
class BackendSettings:
    """How to measure: backend name (auto, simulator, triton, flashinfer), the simulator's
    device model, GPU timer (auto, cupti, events, graph), L2 state and GPU stopping rule
    ("KEY=VALUE,...")."""

    backend: str = "auto"
    device_model: str | None = None
    timer: str = "auto"
    warm_l2: bool = False
    stopping: str | None = None


@dataclass(frozen=True)
class BenchSettings:
    """A bench run: which cases, which policies (comma-separated specs), how, and where to."""

    cases: CaseSettings = field(default_factory=CaseSettings)
    policies: str = DEFAULT_POLICIES
    measure: BackendSettings = field(default_factory=BackendSettings)
    out: str = DEFAULT_RESULTS_DIR
    progress: bool = True


@dataclass
class BenchOutcome:
    """What a finished bench run gives back: its rows, folder and the backend's notice."""

    rows: list
    root: object
    notice: str
    live: bool
    backend_name: str
    device_name: str

    @property
    def failed_rows(self) -> int:
        return sum(1 for r in self.rows if r["status"] != "ok")


def run_bench(settings: BenchSettings, command: str = "") -> BenchOutcome:
    """Run the bench described by `settings`; `command` is recorded in the manifest."""
    from tqdm import tqdm

    from kvtune.harness.backends.select import check_cases_fit, check_choices, open_backend
    from kvtune.harness.runner import CaseRun, Runner
    from kvtune.harness.store import RunWriter, check_output_dir

    m = settings.measure
    shape = resolve_shape(settings.cases)
    suite = resolve_suite(settings.cases, shape)
    policies = from_specs(settings.policies)
    check_choices(m.backend, m.device_model, m.timer, m.stopping)
    check_output_dir(settings.out)
    cases = [CaseRun(c.case_id, c.batch()) for c in suite.cases]
    opened = open_backend(m.backend, device_model_name=m.device_model, timer=m.timer,
                          cold_l2=not m.warm_l2, stopping=m.stopping)
    try:
        check_cases_fit(opened.backend, cases)
    except ValueError:
        opened.backend.close()
        raise
    print(f"kvtune bench: {opened.notice}", file=sys.stderr)
    manifest = {
        "kind": "bench",
        "command": command,
        "suite": suite.name,
        "suite_description": suite.description,
        "cases": [c.to_dict() for c in suite.cases],
        "policies": [{"name": p.name, "params": p.params()} for p in policies],
        "backend": opened.backend.name,
        "device": opened.device.to_dict(),
        "simulated": not opened.device.live,
        "ceiling_bytes_per_s": opened.ceiling_bytes_per_s,
        "ceiling_kind": opened.ceiling_kind,
        "environment": opened.environment,
        "shape": shape.to_dict(),
    }
    writer = RunWriter.create(settings.out, manifest, kind="bench")
    rows: list[dict] = []

    def keep(row):
        rows.append(row)
        if len(rows) % FLUSH_EVERY_ROWS == 0:
            writer.write_rows(rows)

    runner = Runner(opened.backend, opened.device, opened.ceiling_bytes_per_s,
                    run_id=writer.run_id, on_row=keep)
    total = len(cases) * len(policies)
    try:
        with tqdm(total=total, desc="bench", unit="cfg", disable=(not settings.progress) or None,
                  file=sys.stderr) as bar:
            runner.run(cases, policies, progress=bar)
        writer.write_rows(rows)
    except BaseException as exc:
        if rows:
            writer.write_rows(rows)
        writer.finish("failed", error=" ".join(f"{type(exc).__name__}: {exc}".split()), rows=len(rows))
        if not isinstance(exc, (KeyboardInterrupt, ValueError)):
            traceback.print_exc()
        raise
    finally:
        opened.backend.close()
    outcome = BenchOutcome(rows, writer.root, opened.notice, opened.device.live,
                           opened.backend.name, opened.device.name)
    writer.finish("complete", rows=len(rows), failed_rows=outcome.failed_rows)
    return outcome


__all__ = ["BackendSettings", "BenchOutcome", "BenchSettings", "DEFAULT_POLICIES",
           "DEFAULT_RESULTS_DIR", "run_bench"]

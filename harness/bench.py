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

import hashlib
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvtune.kernels.policies import from_spec
from kvtune.kernels.policies import names as policy_names
from kvtune.kernels.specs import split_policy_specs, tuned_path
from kvtune.workloads.batch import AttentionBatch
from kvtune.workloads.selection import CaseSettings, resolve_shape, resolve_suite

# The series a bench runs when none are given (BenchSettings.policies None): the decode default,
# or the hybrid one when any case holds a request with q_len > 1 (decode policies cannot plan
# those; the hybrid policies plan q_len-1 batches as well). default_policies() picks.
DEFAULT_POLICIES = "flashinfer-tensor-core,fa3,trtllm-oversub,no-split"
HYBRID_DEFAULT_POLICIES = "hybrid-serial,hybrid-streams,hybrid-fused,hybrid-colocated,pod"
DEFAULT_RESULTS_DIR = "results"
# Rows are written to disk every this many rows (a crash loses at most these).
FLUSH_EVERY_ROWS = 50


@dataclass(frozen=True)
class BackendSettings:
    """How to measure: backend name (auto, simulator, triton, flashinfer), the simulator's
    device model (a preset name or a calibration file) and the kernel it stands in for
    (sim_kernel: triton, flashinfer-tensor-core, flashinfer-cuda-core; None = triton or the
    calibration file's), GPU timer (auto, cupti, events, graph), L2 state, GPU stopping rule
    ("KEY=VALUE,..."), FlashInfer's CUDA-graph mode (flashinfer backend only) and kvtune's
    stage-1 launch order (triton backend only: kernels.plan.LAUNCH_ORDERS; None the product's,
    kernels.plan.product_launch_order, for decodes and hybrid steps' decode launches alike)."""

    backend: str = "auto"
    device_model: str | None = None
    sim_kernel: str | None = None
    timer: str = "auto"
    warm_l2: bool = False
    stopping: str | None = None
    cuda_graph: bool = False
    launch_order: str | None = None


@dataclass(frozen=True)
class BenchSettings:
    """A bench run: which cases, which policies (comma-separated specs, `tuned:path=FILE` among
    them), which tuned heuristic files besides (`heuristics`, paths), how, and where to.

    policies None: default_policies() of the cases (DEFAULT_POLICIES, or HYBRID_DEFAULT_POLICIES
    when a case has q_len > 1), then the heuristics; a string is taken as given.

    rounds: each case's policies measured that many times in alternating order and merged
    (harness.rounds; 1..20): a comparison of two policies then carries no drift between their
    measurements.

    load_heuristic(path, shape) -> Policy reads a heuristic file (kvtune.studies.export's
    load_heuristic, which the CLI passes: the harness does not import the studies layer);
    needed when any heuristic is given.
    """

    cases: CaseSettings = field(default_factory=CaseSettings)
    policies: str | None = None
    measure: BackendSettings = field(default_factory=BackendSettings)
    out: str = DEFAULT_RESULTS_DIR
    progress: bool = True
    heuristics: tuple = ()
    load_heuristic: Callable | None = None
    rounds: int = 1


def file_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def default_policies(batches) -> str:
    """The policies a bench runs when none are given: HYBRID_DEFAULT_POLICIES when any batch
    (DecodeBatch or AttentionBatch) holds a request with q_len > 1 (a prefill chunk or a
    speculative decode), else DEFAULT_POLICIES."""
    if any(isinstance(b, AttentionBatch) and b.max_q_len > 1 for b in batches):
        return HYBRID_DEFAULT_POLICIES
    return DEFAULT_POLICIES


def resolve_series(policies: str, heuristics=(), shape=None, load_heuristic=None) -> list:
    """The run's series in the order typed: every spec of `policies`, then every heuristic file.

    A spec's series label is the spec as typed (`fixed-split:chunk_tokens=4096`); a heuristic's
    is `tuned:<file stem>` (with `~<sha256 prefix>` when two files share a stem) and its rows
    carry `heuristic_path` and `heuristic_sha256`. ValueError for an unknown policy, a bad
    file, or a spec given twice."""
    from kvtune.harness.runner import Series

    known = set(policy_names())
    specs = split_policy_specs(policies, lambda name: name.lower() in known)
    specs += [f"tuned:path={h}" for h in heuristics]
    if not specs:
        raise ValueError("policies: empty; give at least one policy name or --heuristic FILE")
    out, labels = [], set()
    for spec in specs:
        path = tuned_path(spec)
        if path is None:
            item = Series(spec, from_spec(spec))
        else:
            if load_heuristic is None:
                raise ValueError("policies: tuned:path=FILE needs a heuristic loader (kvtune bench)")
            policy = load_heuristic(path, shape)
            sha = file_sha256(path)
            label = f"tuned:{Path(path).stem}"
            if sha in labels:
                raise ValueError(f"policies: heuristic {path} given twice (same sha256); allowed: "
                                 "each file once")
            labels.add(sha)
            if label in labels:
                label = f"{label}~{sha[:8]}"
            item = Series(label, policy, {"heuristic_path": str(path), "heuristic_sha256": sha})
        if item.label in labels:
            raise ValueError(f"policies: {item.label!r} given twice; allowed: each series once")
        labels.add(item.label)
        out.append(item)
    return out


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
    from kvtune.harness.rounds import check_rounds
    from kvtune.harness.runner import CaseRun, Runner
    from kvtune.harness.store import RunWriter, check_output_dir

    m = settings.measure
    shape = resolve_shape(settings.cases)
    suite = resolve_suite(settings.cases, shape)
    cases = [CaseRun(c.case_id, c.batch()) for c in suite.cases]
    specs = settings.policies
    if specs is None:
        specs = default_policies(c.batch for c in cases)
    policies = resolve_series(specs, settings.heuristics, shape, settings.load_heuristic)
    for item in policies:  # a tuned file for another shape is refused before anything runs
        check_for = getattr(item.policy, "check_for", None)
        if check_for is not None:
            check_for(shape)
    check_choices(m.backend, m.device_model, m.timer, m.stopping, m.sim_kernel)
    rounds = check_rounds(settings.rounds)
    check_output_dir(settings.out)
    opened = open_backend(m.backend, device_model_name=m.device_model, timer=m.timer,
                          cold_l2=not m.warm_l2, stopping=m.stopping, kernel=m.sim_kernel,
                          cuda_graph=m.cuda_graph, launch_order=m.launch_order)
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
        "policies": [{"name": s.policy.name, "params": s.policy.params(), "series": s.label,
                      **s.columns} for s in policies],
        "backend": opened.backend.name,
        "device": opened.device.to_dict(),
        "simulated": not opened.device.live,
        "ceiling_bytes_per_s": opened.ceiling_bytes_per_s,
        "ceiling_kind": opened.ceiling_kind,
        "environment": opened.environment,
        "shape": shape.to_dict(),
        "rounds": rounds,
    }
    writer = RunWriter.create(settings.out, manifest, kind="bench")
    rows: list[dict] = []

    def keep(row):
        rows.append(row)
        if len(rows) % FLUSH_EVERY_ROWS == 0:
            writer.write_rows(rows)

    runner = Runner(opened.backend, opened.device, opened.ceiling_bytes_per_s,
                    run_id=writer.run_id, on_row=keep)
    total = len(cases) * len(policies) * rounds
    try:
        with tqdm(total=total, desc="bench", unit="cfg", disable=(not settings.progress) or None,
                  file=sys.stderr) as bar:
            runner.run(cases, policies, progress=bar, rounds=rounds)
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


__all__ = [
    "DEFAULT_POLICIES",
    "DEFAULT_RESULTS_DIR",
    "HYBRID_DEFAULT_POLICIES",
    "BackendSettings",
    "BenchOutcome",
    "BenchSettings",
    "default_policies",
    "file_sha256",
    "resolve_series",
    "run_bench",
]

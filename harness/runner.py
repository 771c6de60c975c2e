"""Runner: every (case, policy) of a suite through one backend, one row each.

The runner plans each case with each policy, hands the plan to the correctness gate (which
verifies before it times, and never times a wrong output), and turns the result into a flat row.
It knows nothing of studies or the CLI: it takes plain objects and returns plain rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from kvtune.harness.backends import Backend, Measurement
from kvtune.harness.store import json_default
from kvtune.kernels.hybrid_plan import HybridPlan
from kvtune.kernels.plan import DeviceSpec, Plan, Policy
from kvtune.workloads.batch import AttentionBatch, DecodeBatch

# Per-request arrays are stored for batches up to this size (the dashboard's timeline and
# hover text use them); larger batches keep only the summary columns, to keep files small.
MAX_STORED_REQUESTS = 4096


# Hybrid plans add their knobs; AttentionBatch rows add prefill_tokens, num_prefills,
# num_decodes, max_q_len, q_tokens (and q_lens up to MAX_STORED_REQUESTS requests).
HYBRID_PLAN_COLUMNS = ("sm_policy", "prefill_split_cap_waves", "prefill_block_m", "prefill_tasks",
                       "decode_tasks", "decode_schedule", "decode_ahead", "decode_kernel")


def plan_case(policy: Policy, batch, device: DeviceSpec):
    """(plan, batch) of `batch` under `policy`.

    A hybrid policy (one with plan_hybrid) plans an AttentionBatch, or a DecodeBatch turned into
    one (q_len 1); a decode policy plans a DecodeBatch, or an AttentionBatch whose q_lens are all
    1. ValueError for a decode policy on a batch with longer queries.
    """
    if hasattr(policy, "plan_hybrid"):
        if not isinstance(batch, AttentionBatch):
            batch = AttentionBatch.decode(batch)
        return policy.plan_hybrid(batch.q_lens, batch.kv_lens, batch.shape, device), batch
    if isinstance(batch, AttentionBatch) and batch.max_q_len > 1:
        raise ValueError(f"policy {policy.name} plans decode batches (q_len 1) only; this batch "
                         f"has q_len up to {batch.max_q_len}: use hybrid-serial, hybrid-streams, "
                         "hybrid-fused, hybrid-colocated, pod or hybrid-parametric")
    return policy.plan(batch.kv_lens, batch.shape, device), batch


@dataclass
class CaseRun:
    """What the runner needs of a case: a batch and an identifier."""

    case_id: str
    batch: DecodeBatch | AttentionBatch


@dataclass(frozen=True)
class Series:
    """A policy as one series of a run: `label` is what the rows' `series` column holds (the
    policy spec as the user typed it, or `tuned:<file stem>`); `columns` are added to its rows
    (a heuristic's `heuristic_path` and `heuristic_sha256`)."""

    label: str
    policy: Policy
    columns: dict = field(default_factory=dict)


def as_series(item) -> Series:
    """A Series as is; a bare Policy becomes the series named after the policy."""
    return item if isinstance(item, Series) else Series(item.name, item)


@dataclass
class Runner:
    """Plans and measures cases with policies on one backend.

    backend: a Backend (simulator, triton, flashinfer). device: the DeviceSpec policies plan for
    (the backend's device). ceiling_bytes_per_s: the bandwidth efficiency columns divide by
    (measured copy bandwidth on a GPU, the model's achievable bandwidth in the simulator).
    """

    backend: Backend
    device: DeviceSpec
    ceiling_bytes_per_s: float | None = None
    run_id: str = ""
    on_row: Callable[[dict], None] | None = None
    extra_columns: dict = field(default_factory=dict)

    def measure_one(self, case: CaseRun, policy, series: str | None = None) -> tuple[dict, Plan | None]:
        """Plan `case` with `policy` (a Policy or a Series), gate and measure it; returns the row
        and the plan. series: the row's `series` label (default: the Series' label, else the
        policy's name)."""
        item = as_series(policy)
        policy, label = item.policy, series or item.label
        row, plan = self._measure(case, policy)
        row["series"] = label
        row.update(item.columns)
        return row, plan

    def _measure(self, case: CaseRun, policy: Policy) -> tuple[dict, Plan | None]:
        from kvtune.harness.gate import gate_and_measure

        batch = case.batch
        t0 = time.perf_counter()
        try:
            plan, batch = plan_case(policy, batch, self.device)
            case = CaseRun(case.case_id, batch)
        except ValueError as exc:
            meas = Measurement(status="failed", message=f"plan: {exc}")
            return self._row(case, policy, None, meas, 0.0), None
        plan_us = (time.perf_counter() - t0) * 1e6
        meas = gate_and_measure(self.backend, batch, plan)
        return self._row(case, policy, plan, meas, plan_us), plan

    def run(self, cases: Iterable[CaseRun], policies: Sequence, progress=None,
            rounds: int = 1) -> list[dict]:
        """Measure every case with every policy (Policy or Series), in case order then policy
        order. rounds (1..harness.rounds.MAX_ROUNDS): each case's policies are measured that
        many times, in alternating order (round_order), and each policy's rounds merged into one
        row (merge_rounds), so that a drift between back-to-back measurements falls on every
        policy of the case alike. progress advances once per measurement."""
        from kvtune.harness.rounds import check_rounds, merge_rounds, round_order

        rounds = check_rounds(rounds)
        series = [as_series(p) for p in policies]
        rows = []

        def keep(row):
            rows.append(row)
            if self.on_row:
                self.on_row(row)

        for case in cases:
            taken: dict[int, list[dict]] = {i: [] for i in range(len(series))}
            for r in range(rounds):
                for i in round_order(range(len(series)), r):
                    row, _ = self.measure_one(case, series[i])
                    if rounds == 1:
                        keep(row)  # at once: a crash later keeps it
                    else:
                        taken[i].append(row)
                    if progress is not None:
                        progress.update(1)
            if rounds > 1:  # a case's rows once all its rounds are in
                for i in range(len(series)):
                    keep(merge_rounds(taken[i]))
        return rows

    def _row(self, case: CaseRun, policy: Policy, plan: Plan | None, meas: Measurement, plan_us: float) -> dict:
        batch = case.batch
        row = {
            "run_id": self.run_id,
            "case_id": case.case_id,
            "distribution": batch.distribution,
            "dist_params": json.dumps(batch.params, sort_keys=True, default=json_default),
            "batch_size": batch.batch_size,
            "seed": batch.seed,
            **{k: v for k, v in batch.shape.to_dict().items()},
            "total_tokens": batch.total_tokens,
            "max_kv_len": int(batch.kv_lens.max()),
            "policy": policy.name,
            "policy_params": json.dumps(policy.params(), sort_keys=True, default=json_default),
            "backend": self.backend.name,
            "device": self.device.name,
            "simulated": not self.device.live,
            "plan_us": plan_us,
        }
        row.update(meas.to_row())
        ceiling = self.ceiling_bytes_per_s
        bw = row.get("achieved_bytes_per_s", float("nan"))
        row["ceiling_bytes_per_s"] = ceiling if ceiling else float("nan")
        row["bw_fraction"] = bw / ceiling if ceiling and bw == bw else float("nan")
        if plan is not None:
            summary = plan.summary()
            row.update({k: summary[k] for k in ("num_items", "num_tasks", "grid_size", "max_splits", "split_requests", "schedule", "ctas_per_sm")})
            row["waves"] = plan.waves(self.device.sm_count)
            row["plan_notes"] = json.dumps(plan.notes, sort_keys=True, default=json_default)
            if batch.batch_size <= MAX_STORED_REQUESTS:
                row["kv_lens"] = batch.kv_lens.tolist()
                row["splits"] = plan.splits.tolist()
            if isinstance(plan, HybridPlan):
                hs = plan.summary()
                row.update({k: hs[k] for k in HYBRID_PLAN_COLUMNS})
        if isinstance(batch, AttentionBatch):
            row.update(batch.summary())
            if batch.batch_size <= MAX_STORED_REQUESTS:
                row["q_lens"] = batch.q_lens.tolist()
        row.update(self.extra_columns)
        return row

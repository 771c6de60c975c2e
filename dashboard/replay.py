"""The SM timeline of a stored measurement, rebuilt from plain data and re-simulated.

A measurement row keeps the batch's kv_lens, its shape fields and the policy's name and parameters
(JSON); the run's manifest keeps the device. From those the batch is rebuilt, the policy comes from
the registry (`kernels.policies.get(name, **params)`), and the simulator predicts its timeline.
Nothing stored is unpickled or executed. The timeline is the simulator's model, also for runs
measured on a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
from kvtune.kernels.plan import AttentionShape, DeviceSpec

SHAPE_FIELDS = ("num_qo_heads", "num_kv_heads", "head_dim", "page_size", "dtype")
DEVICE_FIELDS = ("name", "sm_count", "l2_bytes", "hbm_bytes_per_s", "max_ctas_per_sm", "live")


@dataclass(frozen=True)
class Replay:
    """One policy's plan of one batch, simulated.

    timeline: SimResult.to_frame(). time_us / stage1_us / merge_us: predicted times (us).
    num_slots: CTA slots modelled (sm_count x the plan's CTAs per SM). kv_lens: tokens per request.
    plan: describe_plan()'s numbers (splits, tasks, grid, waves, ...).
    """

    policy: str
    timeline: pd.DataFrame
    time_us: float
    stage1_us: float
    merge_us: float
    num_slots: int
    sm_count: int
    kv_lens: np.ndarray
    plan: dict


def device_from_manifest(manifest: dict) -> DeviceSpec:
    """The DeviceSpec a run planned for (manifest["device"]); ValueError naming what is missing."""
    device = manifest.get("device")
    if not isinstance(device, dict):
        raise ValueError("device: the run's manifest has no device record")  # noqa: TRY004
    missing = [f for f in DEVICE_FIELDS if f not in device and f not in ("max_ctas_per_sm", "live")]
    if missing:
        raise ValueError(f"device: the manifest's device lacks {', '.join(missing)}")
    return DeviceSpec(**{f: device[f] for f in DEVICE_FIELDS if f in device})


def shape_from_row(row: dict) -> AttentionShape:
    """The AttentionShape of a measurement row (its shape columns)."""
    missing = [f for f in SHAPE_FIELDS if row.get(f) is None]
    if missing:
        raise ValueError(f"shape: the row lacks {', '.join(missing)}")
    fields = {f: (str(row[f]) if f == "dtype" else int(row[f])) for f in SHAPE_FIELDS}
    # Rows written before fp8 caches have no kv_dtype: their cache was of the query type.
    kv_dtype = row.get("kv_dtype")
    if isinstance(kv_dtype, str) and kv_dtype:
        fields["kv_dtype"] = kv_dtype
    return AttentionShape(**fields)


def policy_from_row(row: dict):
    """The registry policy of a row, rebuilt from its name and JSON parameters; an oracle
    configuration (`oracle-splits`: one split count per request, studies/oracle.py) is rebuilt
    from its stored split counts."""
    from kvtune.kernels import policies

    try:
        params = json.loads(row.get("policy_params") or "{}")
    except ValueError as exc:
        raise ValueError(f"policy_params: not valid JSON ({exc})") from None
    if not isinstance(params, dict):
        raise ValueError("policy_params: not a JSON object")  # noqa: TRY004
    from kvtune.studies.oracle import ExplicitSplitPolicy

    if str(row["policy"]) == ExplicitSplitPolicy.name:
        try:
            return ExplicitSplitPolicy(
                splits=tuple(int(s) for s in params["splits"]),
                schedule=str(params.get("schedule", "static")),
                ctas_per_sm=int(params.get("ctas_per_sm", 1)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"policy_params: not an oracle configuration ({exc})") from None
    return policies.get(str(row["policy"]), **params)


def row_constants(row: dict):
    """The simulator constants a simulated row was made with (its sim_constants column), else
    the defaults (GPU rows, older runs)."""
    from kvtune.harness.sim_model import DEFAULT_CONSTANTS, SimConstants

    text = row.get("sim_constants")
    if not isinstance(text, str) or not text:
        return DEFAULT_CONSTANTS
    return SimConstants.from_dict(json.loads(text))


def replay_row(row: dict, device: DeviceSpec) -> Replay:
    """Re-plan and simulate the batch of a measurement row with its own policy on `device`.

    ValueError when the row lacks its per-request lengths (batches above 4096 requests store only
    summaries) or holds something the planners reject.
    """
    from kvtune.harness.backends.simulator import SimulatorBackend
    from kvtune.kernels import policies
    from kvtune.workloads.batch import DecodeBatch

    kv_lens = row.get("kv_lens")
    if kv_lens is None or len(kv_lens) == 0:
        raise ValueError(
            "kv_lens: this row has no per-request lengths (batches above 4096 requests "
            "keep only summary columns)"
        )
    shape = shape_from_row(row)
    policy = policy_from_row(row)
    if hasattr(policy, "plan_hybrid") and row.get("q_lens") is not None and len(row["q_lens"]):
        return replay_hybrid_row(row, policy, shape, device)
    batch = DecodeBatch(np.asarray(kv_lens, dtype=np.int64), shape=shape)
    plan = policy.plan(batch.kv_lens, shape, device)
    result = SimulatorBackend(device, row_constants(row)).simulate(batch, plan)
    return Replay(
        policy=str(row["policy"]),
        timeline=result.to_frame(),
        time_us=float(result.time_us),
        stage1_us=float(result.stage1_us),
        merge_us=float(result.merge_us),
        num_slots=int(result.num_slots),
        sm_count=device.sm_count,
        kv_lens=batch.kv_lens,
        plan={
            k: v
            for k, v in policies.describe_plan(plan, device).items()
            if k != "splits_per_request"
        },
    )


def replay_hybrid_row(row: dict, policy, shape: AttentionShape, device: DeviceSpec) -> Replay:
    """A hybrid batch (q_lens stored beside kv_lens): re-planned with plan_hybrid and simulated
    by harness/sim_hybrid.py. The timeline has a `kind` column ("prefill" or "decode") so the
    chart can show which CTAs ran prefill tiles and which ran decode pieces."""
    from kvtune.harness.sim_hybrid import simulate_hybrid

    q_lens = np.asarray(row["q_lens"], dtype=np.int64)
    kv_lens = np.asarray(row["kv_lens"], dtype=np.int64)
    if q_lens.shape != kv_lens.shape:
        raise ValueError(f"q_lens: {q_lens.shape[0]} entries for {kv_lens.shape[0]} kv_lens")
    plan = policy.plan_hybrid(q_lens, kv_lens, shape, device)
    result = simulate_hybrid(plan, shape, device, row_constants(row))
    timeline = hybrid_timeline(plan, result, shape)
    stage1 = max(result.prefill_us, result.decode_us)
    return Replay(
        policy=str(row["policy"]), timeline=timeline, time_us=float(result.time_us),
        stage1_us=float(stage1), merge_us=float(result.merge_us),
        num_slots=device.sm_count * min(plan.ctas_per_sm, device.max_ctas_per_sm),
        sm_count=device.sm_count, kv_lens=kv_lens,
        plan={**plan.summary(), "waves": plan.waves(device.sm_count)},
    )


def hybrid_timeline(plan, result, shape: AttentionShape) -> pd.DataFrame:
    """One row per task of a simulated hybrid launch, in the columns of SimResult.to_frame()
    plus `kind`, labelled by harness.sim_hybrid.hybrid_task_ids; slot: the simulator's slot of
    the task within its SM."""
    from kvtune.harness.sim_hybrid import hybrid_task_ids

    ids = hybrid_task_ids(plan, shape)
    return pd.DataFrame({
        "request": ids["request"], "split": ids["split"], "kv_head": ids["kv_head"],
        "sm": np.asarray(result.sm, dtype=np.int64),
        "start_us": np.asarray(result.start_us, dtype=float),
        "end_us": np.asarray(result.end_us, dtype=float),
        "bytes": ids["keys"].astype(float) * shape.kv_bytes_per_token_per_head,
        "kind": np.where(np.asarray(result.kind) == 1, "prefill", "decode"),
        "slot": np.asarray(result.slot, dtype=np.int64),
    })


__all__ = ["Replay", "device_from_manifest", "hybrid_timeline", "policy_from_row",
           "replay_hybrid_row", "replay_row", "shape_from_row"]

"""Split policies by name: the field's heuristics, the parametric rule and the tuned table.

Public entry of the policy modules:
  get(name, **overrides) -> Policy     names() -> list[str]     parameters(name) -> dict
  describe_plan(plan, device) -> dict  (what `kvtune plan` prints)
A policy's `params()` are plain JSON-able values; `get(policy.name, **policy.params())` rebuilds a
policy that plans identically, which is how measurements and exported heuristics store them.
"""

from __future__ import annotations

from kvtune.kernels.baselines import (
    FA3Policy,
    FixedSplitPolicy,
    NoSplitPolicy,
    SGLangTritonPolicy,
    VllmTritonPolicy,
    fa3_num_splits_heuristic,
)
from kvtune.kernels.baselines_flashinfer import (
    FlashInferCudaCorePolicy,
    FlashInferTensorCorePolicy,
    TrtllmGenPolicy,
    TrtllmOversubPolicy,
    fa2_cta_tile_q,
)
from kvtune.kernels.hybrid_policies import HYBRID_POLICIES
from kvtune.kernels.parametric import (
    AdaptiveChunkPolicy,
    Bucket,
    BucketedPolicy,
    MakespanChunkPolicy,
    ParametricPolicy,
)
from kvtune.kernels.plan import DeviceSpec, Plan, Policy
from kvtune.kernels.specs import parse_assignments

_POLICIES = {
    cls.name: cls
    for cls in (
        FlashInferCudaCorePolicy,
        FlashInferTensorCorePolicy,
        FA3Policy,
        TrtllmGenPolicy,
        TrtllmOversubPolicy,
        SGLangTritonPolicy,
        VllmTritonPolicy,
        FixedSplitPolicy,
        NoSplitPolicy,
        ParametricPolicy,
        AdaptiveChunkPolicy,
        MakespanChunkPolicy,
        BucketedPolicy,
        *HYBRID_POLICIES,  # plan_hybrid(q_lens, kv_lens, shape, device): kernels/hybrid_policies.py
    )
}


def names() -> list[str]:
    """Registry names, in a stable order (the field's heuristics first)."""
    return list(_POLICIES)


def _policy_class(name: str):
    key = str(name).strip().lower()
    if key not in _POLICIES:
        raise ValueError(f"policy: {name!r} unknown; allowed: {', '.join(_POLICIES)}")
    return _POLICIES[key]


def parameters(name: str) -> dict:
    """The default parameters of policy `name` (what `params()` of `get(name)` returns)."""
    return _policy_class(name).default_params()


def get(name: str, **overrides) -> Policy:
    """The policy called `name` with `overrides` replacing its default parameters.

    ValueError names the allowed policies for an unknown name, the allowed parameters for an
    unknown override, and the field and range for a bad value.
    """
    cls = _policy_class(name)
    allowed = cls.default_params()
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise ValueError(
            f"{cls.name}: parameter {unknown[0]!r} unknown; allowed: {', '.join(allowed)}"
        )
    return cls.from_params(**overrides)


def from_spec(spec: str) -> Policy:
    """'fixed-split:chunk_tokens=4096' -> that policy with the override; plain names too."""
    name, *assignments = str(spec).strip().split(":")
    return get(name, **parse_assignments(assignments, f"policies ({name})"))


def from_specs(text: str) -> list[Policy]:
    """'fa3,fixed-split:chunk_tokens=4096' -> [Policy, ...]; ValueError for an empty list."""
    specs = [s for s in str(text).split(",") if s.strip()]
    if not specs:
        raise ValueError("policies: empty; give at least one policy name")
    return [from_spec(s) for s in specs]


def describe_plan(plan: Plan, device: DeviceSpec) -> dict:
    """Plain numbers about a plan for the CLI and logs.

    splits_per_request is the full list (B entries); waves = tasks / (sm_count * ctas_per_sm).
    """
    splits = plan.splits
    tokens = plan.item_tokens()
    slots = device.sm_count * plan.ctas_per_sm
    return {
        "batch_size": plan.batch_size,
        "total_tokens": int(plan.kv_lens.sum()),
        "max_kv_len": int(plan.kv_lens.max()),
        "splits_per_request": [int(s) for s in splits],
        "split_requests": plan.num_split_requests,
        "max_splits": int(splits.max()),
        "mean_splits": float(splits.mean()),
        "num_items": plan.num_items,
        "num_tasks": plan.num_tasks,
        "grid_size": plan.grid_size,
        "schedule": plan.schedule,
        "ctas_per_sm": plan.ctas_per_sm,
        "cta_slots": slots,
        "waves": plan.num_tasks / slots,
        "min_item_tokens": int(tokens.min()),
        "max_item_tokens": int(tokens.max()),
        "device": device.name,
        "notes": dict(plan.notes),
    }


__all__ = [
    "get",
    "from_spec",
    "from_specs",
    "names",
    "parameters",
    "describe_plan",
    "FlashInferCudaCorePolicy",
    "FlashInferTensorCorePolicy",
    "FA3Policy",
    "TrtllmGenPolicy",
    "TrtllmOversubPolicy",
    "SGLangTritonPolicy",
    "VllmTritonPolicy",
    "FixedSplitPolicy",
    "NoSplitPolicy",
    "ParametricPolicy",
    "BucketedPolicy",
    "Bucket",
    "fa2_cta_tile_q",
    "fa3_num_splits_heuristic",
]

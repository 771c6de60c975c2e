"""Where a split policy changes regime as the batch grows: the vertical rules of the latency chart.

A baseline's plan changes character at batch sizes fixed by its planner, the device and the
attention shape: FlashInfer's tensor-core planner stops splitting above floor(2 S / H_kv), its
CUDA-core planner once B * H_kv reaches occupancy * S, vLLM's Triton backend leaves its 3D kernel
above 128 / H_kv, FA3 drops its dynamic per-request split above 992. Nothing here hard-codes those
numbers: `regime_thresholds` runs the policy's own planner over batch sizes and reports every batch
size whose regime differs from the one below it.

The probe batch is one long request beside B-1 one-page requests, the batch most favourable to
splitting a planner can meet: a size-based planner that does not split it splits no batch of that
size. A regime is whether any request is split plus the planner's own flags in its plan notes
(boolean or text notes such as FlashInfer's `split_kv`, FA3's `dynamic_split`, vLLM's `kernel`).

A tuned heuristic changes regime at its bucket boundaries, which come from its table, not a sweep.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from kvtune.kernels.plan import MAX_BATCH, AttentionShape, DeviceSpec, Policy

DEFAULT_LONG_TOKENS = 131_072
# Batch sizes planned exactly before the sweep turns geometric (cheap, and where most rules are).
EXACT_SWEEP_UP_TO = 64
# Geometric samples per doubling above EXACT_SWEEP_UP_TO; a change between two samples is then
# bisected to its exact batch size. A regime that flips and flips back between two samples
# (a gap of at most ~9% of B) is missed; no planner here does that.
SAMPLES_PER_DOUBLING = 8


@dataclass(frozen=True)
class Threshold:
    """A vertical rule: from `batch_size` on, `policy` plans in the regime `after`.

    batch_size: first batch size (requests, >= 2) of the new regime; the rule is drawn between
        batch_size - 1 and batch_size. kind: "regime" (a baseline's planner) or "bucket" (a tuned
        heuristic's bucket boundary). label: short text for the chart; detail: longer text.
    """

    policy: str
    batch_size: int
    kind: str
    label: str
    detail: str = ""

    @property
    def rule_x(self) -> float:
        """Where the rule is drawn: halfway between the last batch of the old regime and the first
        of the new one (in batch-size units)."""
        return self.batch_size - 0.5

    def to_dict(self) -> dict:
        return {
            "policy": self.policy,
            "batch_size": self.batch_size,
            "kind": self.kind,
            "label": self.label,
            "detail": self.detail,
        }


def probe_kv_lens(batch_size: int, long_tokens: int, page_size: int) -> np.ndarray:
    """One request of `long_tokens` and `batch_size - 1` requests of one page (tokens)."""
    kv = np.full(batch_size, page_size, dtype=np.int64)
    kv[0] = max(long_tokens, page_size)
    return kv


def plan_regime(
    policy: Policy, kv_lens: np.ndarray, shape: AttentionShape, device: DeviceSpec
) -> tuple:
    """(splits anything, sorted (note, value) pairs of the plan's boolean and text notes)."""
    plan = policy.plan(kv_lens, shape, device)
    flags = tuple(sorted((k, v) for k, v in plan.notes.items() if isinstance(v, (bool, str))))
    return (bool((plan.splits > 1).any()), flags)


def sweep_batch_sizes(max_batch: int) -> list[int]:
    """1..EXACT_SWEEP_UP_TO, then SAMPLES_PER_DOUBLING geometric steps per doubling to max_batch."""
    top = int(min(max(max_batch, 1), MAX_BATCH))
    sizes = set(range(1, min(top, EXACT_SWEEP_UP_TO) + 1))
    if top > EXACT_SWEEP_UP_TO:
        steps = int(np.ceil(np.log2(top / EXACT_SWEEP_UP_TO) * SAMPLES_PER_DOUBLING))
        grid = EXACT_SWEEP_UP_TO * 2.0 ** (np.arange(steps + 1) / SAMPLES_PER_DOUBLING)
        sizes.update(round(b) for b in grid if b <= top)
        sizes.add(top)
    return sorted(sizes)


def regime_thresholds(
    policy: Policy,
    shape: AttentionShape,
    device: DeviceSpec,
    max_batch: int,
    long_tokens: int = DEFAULT_LONG_TOKENS,
) -> list[Threshold]:
    """Every batch size in 2..max_batch where `policy`'s regime differs from the batch below it.

    policy: any Policy; shape, device: what it plans for (the run's). max_batch: requests, >= 1.
    long_tokens: the probe's long request, tokens (use the run's longest kv_len).
    """
    if max_batch < 1:
        raise ValueError(f"max_batch: {max_batch} out of range; allowed: 1..{MAX_BATCH}")
    cache: dict[int, tuple] = {}

    def regime(b: int) -> tuple:
        if b not in cache:
            cache[b] = plan_regime(
                policy, probe_kv_lens(b, long_tokens, shape.page_size), shape, device
            )
        return cache[b]

    sizes = sweep_batch_sizes(max_batch)
    found = []
    for lo, hi in itertools.pairwise(sizes):
        if regime(lo) == regime(hi):
            continue
        # Bisect to the first batch size whose regime differs from regime(lo).
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if regime(mid) == regime(lo):
                lo = mid
            else:
                hi = mid
        found.append(_regime_threshold(policy.name, hi, regime(hi - 1), regime(hi)))
    return found


def _regime_threshold(name: str, batch_size: int, before: tuple, after: tuple) -> Threshold:
    changes = []
    if before[0] != after[0]:
        changes.append("splits" if after[0] else "no split")
    old_flags, new_flags = dict(before[1]), dict(after[1])
    for key in sorted(set(old_flags) | set(new_flags)):
        if key == "split_kv" and before[0] != after[0]:
            continue  # says the same as the split change
        old, new = old_flags.get(key), new_flags.get(key)
        if old != new:
            changes.append(_flag_text(key, new))
    text = ", ".join(changes) or "plan changes"
    return Threshold(
        policy=name,
        batch_size=batch_size,
        kind="regime",
        label=f"{name}: {text} from B={batch_size}",
        detail=(
            f"{name} at B={batch_size - 1}: {_regime_text(before)}; "
            f"at B={batch_size}: {_regime_text(after)}"
        ),
    )


def _flag_text(key: str, value) -> str:
    if isinstance(value, bool):
        return f"{key} {'on' if value else 'off'}"
    return f"{key} {value}"


def _regime_text(regime: tuple) -> str:
    parts = ["splits" if regime[0] else "no split"]
    parts += [_flag_text(k, v) for k, v in regime[1]]
    return ", ".join(parts)


def bucket_thresholds(
    buckets, policy: str = "tuned", max_batch: int | None = None
) -> list[Threshold]:
    """Rules at the start of every bucket after the first of a tuned table.

    buckets: (min_batch, max_batch, params) triples or dicts with min_batch/max_batch, in any order.
    max_batch: leave out boundaries above it (None keeps all).
    """
    ranges = sorted((_bucket_range(b) for b in buckets), key=lambda r: r[0])
    out = []
    for lo, hi in ranges[1:]:
        if max_batch is not None and lo > max_batch:
            continue
        out.append(
            Threshold(
                policy=policy,
                batch_size=lo,
                kind="bucket",
                label=f"{policy} bucket {lo}-{hi}",
                detail=f"{policy}: bucket of batch sizes {lo}..{hi} starts at B={lo}",
            )
        )
    return out


def _bucket_range(bucket) -> tuple[int, int]:
    if isinstance(bucket, dict):
        return int(bucket["min_batch"]), int(bucket["max_batch"])
    if hasattr(bucket, "min_batch"):
        return int(bucket.min_batch), int(bucket.max_batch)
    lo, hi = bucket[0], bucket[1]
    return int(lo), int(hi)


def policy_thresholds(
    name: str,
    params: dict,
    shape: AttentionShape,
    device: DeviceSpec,
    max_batch: int,
    long_tokens: int = DEFAULT_LONG_TOKENS,
) -> list[Threshold]:
    """Thresholds of the registry policy `name` with `params` (as stored in measurements).

    The tuned table (`tuned`) gives its bucket boundaries; a parametric or batch-invariant policy
    gives whatever its planner sweep finds (often none). ValueError for an unknown policy or bad
    parameters (the registry's message).
    """
    from kvtune.kernels import policies

    policy = policies.get(name, **params)
    if name == "tuned":
        return bucket_thresholds(policy.buckets, policy=name, max_batch=max_batch)
    return regime_thresholds(policy, shape, device, max_batch, long_tokens)


__all__ = [
    "DEFAULT_LONG_TOKENS",
    "Threshold",
    "bucket_thresholds",
    "plan_regime",
    "policy_thresholds",
    "probe_kv_lens",
    "regime_thresholds",
    "sweep_batch_sizes",
]

"""Hybrid-batch policies: how a batch of prefill chunks and decodes is cut and scheduled.

Every policy here has `plan_hybrid(q_lens, kv_lens, shape, device) -> HybridPlan` and, for
decode-only callers, `plan(kv_lens, shape, device) -> Plan` (the decode part of a q_len-1 batch).
Registered in kernels/policies.py:

- hybrid-serial: prefill tiles then decodes in two launches; the decodes planned by
  `decode_policy` (default FlashInfer's tensor-core planner), the prefill tiles split along the
  keys to fill one wave (FlashInfer's chunked-prefill split-KV). The baseline.
- hybrid-streams: the same cut, the two launches on two CUDA streams.
- hybrid-fused: the same cut in one launch over one work list, longest kv range first.
- hybrid-colocated: the same cut with 64-row prefill tiles, as a persistent prefill grid of one
  program per SM beside the decode grid (schedule colocated, kernels/hybrid_plan.py).
- pod: POD-Attention's rule (Kamath et al. 2025, section 4): SM-aware CTA scheduling with the
  proportional policy; 2 CTAs per SM (128-row prefill tiles) when the batch is prefill-dominant
  (modelled prefill time, FLOPs at the tensor-core rate, above the decode's bytes at HBM rate),
  4 CTAs per SM (64-row tiles) otherwise; prefill kv splits capped at two waves.
- hybrid-parametric: every knob tunable (schedule, CTAs per SM, SM policy, prefill split cap,
  prefill tile, and the five decode split knobs of the parametric rule, or the decode-only
  makespan family's rule over the same knobs: decode_family).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kvtune.kernels.hybrid_plan import (
    HYBRID_SCHEDULES,
    MAX_DECODE_Q_LEN,
    PREFILL_BLOCK_M,
    SM_POLICIES,
    HybridPlan,
    build_prefill_tiles,
    prefill_kv_splits,
)
from kvtune.kernels.plan import (
    MAX_KV_LEN_TOKENS,
    SCHEDULES,
    AttentionShape,
    DeviceSpec,
    Plan,
    SplitParams,
    check_shape,
    as_kv_lens,
)
from kvtune.kernels.policy_common import PolicyBase, check_choice, check_int

# Dense bf16 tensor-core rates (datasheet, FLOP/s): the prefill side of the POD rule and of the
# simulator. A device not listed falls back to FALLBACK_FLOPS_PER_BYTE x its HBM bandwidth.
TENSOR_FLOPS_PER_S = {"h100": 989e12, "h200": 989e12, "a100": 312e12, "h20": 148e12,
                      "b200": 2250e12, "l40s": 362e12}
FALLBACK_FLOPS_PER_BYTE = 250.0
# Decode split rules of hybrid-parametric (decode_family): "" the parametric rule of its split
# knobs; "makespan" the decode heuristics' makespan family (kernels/tuned_planner.py), which
# keeps the engine's own chunk unless another is modelled clearly faster.
DECODE_FAMILIES = ("", "makespan")


def preset_key(device: DeviceSpec) -> str | None:
    """The TENSOR_FLOPS_PER_S preset a device's name contains ("NVIDIA H100 80GB HBM3" -> "h100";
    "h200" is tried before "h20"), or None."""
    low = device.name.lower().replace(" ", "")
    for key in ("h200", "h100", "h20", "a100", "b200", "l40s"):
        if key in low:
            return key
    return None


def tensor_flops_per_s(device: DeviceSpec) -> float:
    """The device's dense 16-bit tensor-core rate, FLOP/s (by preset name, else an estimate)."""
    rate = getattr(device, "tensor_flops_per_s", None)
    if rate:
        return float(rate)
    key = preset_key(device)
    if key is not None:
        return TENSOR_FLOPS_PER_S[key]
    return FALLBACK_FLOPS_PER_BYTE * device.hbm_bytes_per_s


def check_lengths(q_lens, kv_lens) -> tuple[np.ndarray, np.ndarray]:
    """Validated int64 (q_lens, kv_lens); ValueError naming q_lens for a bad q_len."""
    kv = as_kv_lens(kv_lens)
    q = np.asarray(q_lens)
    if q.shape != kv.shape:
        raise ValueError(f"q_lens: {q.shape} entries for {kv.shape} kv_lens; allowed: one each")
    q = q.astype(np.int64)
    if (q < 1).any() or (q > kv).any() or (q > MAX_KV_LEN_TOKENS).any():
        raise ValueError("q_lens: every q_len must be in 1..kv_len")
    return q, kv


def modelled_times_s(q, kv, shape: AttentionShape, device: DeviceSpec) -> tuple[float, float]:
    """(prefill, decode) seconds on `device`: causal FLOPs of the chunks at the tensor-core rate,
    K/V bytes of the decodes at HBM bandwidth."""
    pre = q > MAX_DECODE_Q_LEN
    pairs = (q * (kv - q) + q * (q + 1) // 2)[pre].sum()
    flops = 4.0 * pairs * shape.num_qo_heads * shape.head_dim
    dec_bytes = float(kv[~pre].sum()) * shape.num_kv_heads * shape.kv_bytes_per_token_per_head
    return flops / tensor_flops_per_s(device), dec_bytes / device.hbm_bytes_per_s


# Achieved fractions of the datasheet rates the partition rule assumes: the Triton prefill tile
# reached ~0.2 of the bf16 tensor rate in the first H200 run (before the page-ahead tile, which
# should do better), the decodes ~0.8 of HBM bandwidth (docs/KERNEL_NOTES.md, hybrid).
PREFILL_TENSOR_EFFICIENCY = 0.3
DECODE_HBM_EFFICIENCY = 0.8


def decode_sm_share_rule(q, kv, shape: AttentionShape, device: DeviceSpec) -> float:
    """The proportional SM split (POD-Attention's spirit): the decode part gets the share of SMs
    that makes both parts end together when each scales with its SMs, t_d / (t_p + t_d) of the
    modelled times (prefill FLOPs at PREFILL_TENSOR_EFFICIENCY of the tensor rate, decode bytes
    at DECODE_HBM_EFFICIENCY of HBM bandwidth), clamped to 0.1..0.9."""
    t_p, t_d = modelled_times_s(q, kv, shape, device)
    t_p, t_d = t_p / PREFILL_TENSOR_EFFICIENCY, t_d / DECODE_HBM_EFFICIENCY
    if t_p + t_d <= 0:
        return 0.5
    return float(min(0.9, max(0.1, t_d / (t_p + t_d))))


def make_hybrid_plan(q_lens, kv_lens, shape: AttentionShape, device: DeviceSpec, *,
                     decode_planner, schedule: str, ctas_per_sm: int, sm_policy: str,
                     prefill_split_cap_waves: int, prefill_block_m: int,
                     min_prefill_split_tokens: int = 1024, decode_sm_share: float = 0.0,
                     decode_ahead: bool = False, decode_kernel: bool | None = None,
                     notes: dict | None = None) -> HybridPlan:
    """Cut the batch: decodes by `decode_planner(kv_lens) -> Plan`, prefill tiles of
    `prefill_block_m` rows split along the keys within `prefill_split_cap_waves` waves.
    The `partitioned` schedule gets decode_programs = its decode share of the SMs (one program
    each): `decode_sm_share` in 0.05..0.95, or 0 for decode_sm_share_rule (proportional).
    decode_ahead, decode_kernel: HybridPlan.decode_ahead, HybridPlan.decode_kernel."""
    q, kv = check_lengths(q_lens, kv_lens)
    G = shape.group_size
    if G > prefill_block_m:
        raise ValueError(f"num_qo_heads: {G} query heads per KV head exceed the {prefill_block_m}"
                         "-row prefill tile; allowed: at most 128 per KV head")
    dec = np.flatnonzero(q <= MAX_DECODE_Q_LEN)
    decode_plan = decode_planner(kv[dec]) if dec.size else None
    slots = device.sm_count * ctas_per_sm
    splits = prefill_kv_splits(q, kv, group_size=G, block_m=prefill_block_m,
                               num_kv_heads=shape.num_kv_heads, slots=slots,
                               cap_waves=prefill_split_cap_waves)
    tiles = build_prefill_tiles(q, kv, group_size=G, block_m=prefill_block_m,
                                page_size=shape.page_size, kv_splits=splits,
                                min_split_tokens=min_prefill_split_tokens)
    programs, share = 0, 0.0
    if schedule == "partitioned" and dec.size:
        share = float(decode_sm_share) or decode_sm_share_rule(q, kv, shape, device)
        programs = int(min(max(1, round(share * device.sm_count)),
                           device.sm_count * ctas_per_sm, decode_plan.num_tasks))
        notes = dict(notes or {}, decode_sm_share=share)
    return HybridPlan(q_lens=q, kv_lens=kv, decode_requests=dec, decode_plan=decode_plan,
                      decode_programs=programs, decode_ahead=bool(decode_ahead),
                      decode_kernel=None if decode_kernel is None else bool(decode_kernel),
                      prefill_block_m=prefill_block_m, schedule=schedule, ctas_per_sm=ctas_per_sm,
                      sm_policy=sm_policy, prefill_split_cap_waves=prefill_split_cap_waves,
                      sm_count=device.sm_count, num_kv_heads=shape.num_kv_heads,
                      page_size=shape.page_size, group_size=G,
                      notes=dict(notes or {}, prefill_kv_splits=splits), **tiles)


def _decode_policy(name: str):
    """A decode policy of the registry by name, with its defaults (imported from the policy
    modules directly: kernels/policies.py imports this module)."""
    from kvtune.kernels import baselines, baselines_flashinfer, parametric

    classes = (baselines_flashinfer.FlashInferCudaCorePolicy,
               baselines_flashinfer.FlashInferTensorCorePolicy, baselines.FA3Policy,
               baselines_flashinfer.TrtllmGenPolicy, baselines_flashinfer.TrtllmOversubPolicy,
               baselines.SGLangTritonPolicy, baselines.VllmTritonPolicy, baselines.FixedSplitPolicy,
               baselines.NoSplitPolicy, parametric.ParametricPolicy)
    table = {c.name: c for c in classes}
    if name not in table:
        raise ValueError(f"decode_policy: {name!r} unknown; allowed: {', '.join(table)}")
    return table[name].from_params(**table[name].default_params())


class _HybridBase(PolicyBase):
    """plan() for decode-only callers: the decode plan of the batch with q_len 1 everywhere."""

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec) -> Plan:
        kv = as_kv_lens(kv_lens)
        return self.plan_hybrid(np.ones_like(kv), kv, shape, device).decode_plan


@dataclass(frozen=True)
class HybridSerialPolicy(_HybridBase):
    """Prefill launch then decode launch (see the module docstring). decode_policy: a registered
    decode policy name; prefill_block_m: 64 or 128; prefill_split_cap_waves: 1..64."""

    decode_policy: str = "flashinfer-tensor-core"
    prefill_block_m: int = 128
    prefill_split_cap_waves: int = 1
    name: ClassVar[str] = "hybrid-serial"
    schedule: ClassVar[str] = "serial"

    def __post_init__(self) -> None:
        _decode_policy(self.decode_policy)
        if self.prefill_block_m not in PREFILL_BLOCK_M:
            raise ValueError(f"prefill_block_m: {self.prefill_block_m} not allowed; "
                             "allowed: 64, 128")
        check_int("prefill_split_cap_waves", self.prefill_split_cap_waves, 1, 64)

    def plan_hybrid(self, q_lens, kv_lens, shape: AttentionShape,
                    device: DeviceSpec) -> HybridPlan:
        dpol = _decode_policy(self.decode_policy)
        ctas = 2 if self.prefill_block_m == 128 else 4
        return make_hybrid_plan(q_lens, kv_lens, shape, device,
                                decode_planner=lambda kv: dpol.plan(kv, shape, device),
                                schedule=self.schedule, ctas_per_sm=ctas, sm_policy="50:50",
                                prefill_split_cap_waves=self.prefill_split_cap_waves,
                                prefill_block_m=self.prefill_block_m,
                                notes={"policy": self.name})


@dataclass(frozen=True)
class HybridStreamsPolicy(HybridSerialPolicy):
    """hybrid-serial's cut, its two launches on two CUDA streams."""

    name: ClassVar[str] = "hybrid-streams"
    schedule: ClassVar[str] = "streams"


@dataclass(frozen=True)
class HybridFusedPolicy(HybridSerialPolicy):
    """hybrid-serial's cut in one launch over one work list, longest kv range first."""

    name: ClassVar[str] = "hybrid-fused"
    schedule: ClassVar[str] = "fused"


@dataclass(frozen=True)
class HybridColocatedPolicy(HybridSerialPolicy):
    """hybrid-serial's cut with 64-row prefill tiles, run co-located: a persistent prefill grid
    of one program per SM beside the decode grid (the only tile that leaves room for decode
    programs on its SM; eighth session, docs/PERFORMANCE.md)."""

    prefill_block_m: int = 64
    name: ClassVar[str] = "hybrid-colocated"
    schedule: ClassVar[str] = "colocated"


@dataclass(frozen=True)
class PodPolicy(_HybridBase):
    """POD-Attention's rule (module docstring). sm_policy: "proportional" (the paper's choice
    for loaded batches) or "50:50"; prefill_split_cap_waves: 2 in the paper."""

    decode_policy: str = "flashinfer-tensor-core"
    sm_policy: str = "proportional"
    prefill_split_cap_waves: int = 2
    name: ClassVar[str] = "pod"

    def __post_init__(self) -> None:
        _decode_policy(self.decode_policy)
        check_choice("sm_policy", self.sm_policy, SM_POLICIES)
        check_int("prefill_split_cap_waves", self.prefill_split_cap_waves, 1, 64)

    def plan_hybrid(self, q_lens, kv_lens, shape: AttentionShape,
                    device: DeviceSpec) -> HybridPlan:
        q, kv = check_lengths(q_lens, kv_lens)
        pre_s, dec_s = modelled_times_s(q, kv, shape, device)
        prefill_dominant = pre_s >= dec_s
        ctas = 2 if prefill_dominant else 4
        dpol = _decode_policy(self.decode_policy)
        return make_hybrid_plan(q, kv, shape, device,
                                decode_planner=lambda k: dpol.plan(k, shape, device),
                                schedule="sm-aware", ctas_per_sm=ctas, sm_policy=self.sm_policy,
                                prefill_split_cap_waves=self.prefill_split_cap_waves,
                                prefill_block_m=128 if prefill_dominant else 64,
                                notes={"policy": self.name, "prefill_model_us": pre_s * 1e6,
                                       "decode_model_us": dec_s * 1e6,
                                       "prefill_dominant": bool(prefill_dominant)})


@dataclass(frozen=True)
class HybridParametricPolicy(_HybridBase):
    """Every hybrid knob (the tuning space of `kvtune tune --suite hybrid`).

    schedule: one of HYBRID_SCHEDULES. ctas_per_sm: 1..8. sm_policy: 50:50 or proportional.
    prefill_split_cap_waves: 1..64. prefill_block_m: 64 or 128. min_prefill_split_tokens:
    1..1,048,576. Decode split knobs as SplitParams: min_tokens_per_cta, max_waves, max_splits,
    decode_schedule (one of kernels.plan.SCHEDULES). decode_sm_share (schedule partitioned): the
    decodes' share of SMs, 0.05..0.95, or 0 for the proportional rule (decode_sm_share_rule).
    decode_ahead: true or false, the decode launch's loop (HybridPlan.decode_ahead).
    decode_kernel: true, false or null: single-token decodes through kernels/decode.py or as the
    hybrid kernel's items where both can run; null: the schedule's default
    (HybridPlan.decode_kernel).
    decode_family: "" (the parametric rule of the decode split knobs) or "makespan": the decodes
    planned by the decode heuristics' makespan family (kernels/parametric.py
    MakespanChunkPolicy, with min_tokens_per_cta, max_splits and ctas_per_sm, its default
    largest chunk, and piece_cost_tokens, 0..1,048,576, null: its default): the engine's own
    chunk unless another chunk's modelled busiest slot is clearly shorter; its pieces run in
    request order (decode_schedule and max_waves are not used).
    """

    schedule: str = "sm-aware"
    ctas_per_sm: int = 2
    sm_policy: str = "proportional"
    prefill_split_cap_waves: int = 2
    prefill_block_m: int = 128
    min_prefill_split_tokens: int = 1024
    min_tokens_per_cta: int = 2048
    max_waves: int = 1
    max_splits: int = 32
    decode_schedule: str = "static"
    decode_sm_share: float = 0.0
    decode_ahead: bool = False
    decode_kernel: bool | None = None
    decode_family: str = ""
    piece_cost_tokens: int | None = None
    name: ClassVar[str] = "hybrid-parametric"

    def __post_init__(self) -> None:
        check_choice("schedule", self.schedule, HYBRID_SCHEDULES)
        check_int("ctas_per_sm", self.ctas_per_sm, 1, 8)
        check_choice("sm_policy", self.sm_policy, SM_POLICIES)
        check_int("prefill_split_cap_waves", self.prefill_split_cap_waves, 1, 64)
        if self.prefill_block_m not in PREFILL_BLOCK_M:
            raise ValueError(f"prefill_block_m: {self.prefill_block_m} not allowed; "
                             "allowed: 64, 128")
        check_int("min_prefill_split_tokens", self.min_prefill_split_tokens, 1, MAX_KV_LEN_TOKENS)
        check_choice("decode_schedule", self.decode_schedule, SCHEDULES)
        share = self.decode_sm_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) \
                or not (share == 0 or 0.05 <= share <= 0.95):
            raise ValueError(f"decode_sm_share: {share!r} out of range; allowed: 0 (proportional "
                             "rule) or 0.05..0.95")
        if not isinstance(self.decode_ahead, bool):
            raise ValueError(f"decode_ahead: {self.decode_ahead!r} not allowed; allowed: true, "
                             "false")
        if self.decode_kernel is not None and not isinstance(self.decode_kernel, bool):
            raise ValueError(f"decode_kernel: {self.decode_kernel!r} not allowed; allowed: true, "
                             "false, null (the schedule's default)")
        if self.decode_family not in DECODE_FAMILIES:
            raise ValueError(f"decode_family: {self.decode_family!r} not allowed; allowed: '' "
                             "(the parametric rule of the decode knobs) or 'makespan'")
        if self.piece_cost_tokens is not None:
            check_int("piece_cost_tokens", self.piece_cost_tokens, 0, MAX_KV_LEN_TOKENS)
        self.split_params()  # validates the decode knobs

    def split_params(self) -> SplitParams:
        return SplitParams(min_tokens_per_cta=self.min_tokens_per_cta, max_waves=self.max_waves,
                           max_splits=self.max_splits, ctas_per_sm=self.ctas_per_sm,
                           schedule=self.decode_schedule)

    def plan_hybrid(self, q_lens, kv_lens, shape: AttentionShape,
                    device: DeviceSpec) -> HybridPlan:
        from kvtune.kernels.parametric import ParametricPolicy, family_policy

        if self.decode_family:
            dpol = family_policy(self.decode_family, self.split_params(),
                                 piece_cost_tokens=self.piece_cost_tokens)
        else:
            dpol = ParametricPolicy(self.split_params())
        return make_hybrid_plan(q_lens, kv_lens, shape, device,
                                decode_planner=lambda k: dpol.plan(k, shape, device),
                                schedule=self.schedule, ctas_per_sm=self.ctas_per_sm,
                                sm_policy=self.sm_policy,
                                prefill_split_cap_waves=self.prefill_split_cap_waves,
                                prefill_block_m=self.prefill_block_m,
                                min_prefill_split_tokens=self.min_prefill_split_tokens,
                                decode_sm_share=float(self.decode_sm_share),
                                decode_ahead=self.decode_ahead,
                                decode_kernel=self.decode_kernel, notes={"policy": self.name})


# Buckets of a tuned hybrid heuristic (studies/hybrid_tune.py): decodes in the batch and prefill
# tokens, inclusive ranges. A batch without a decode belongs to no bucket: its prefill has nothing
# to share the SMs with, so the co-location knobs (64-row tiles, more CTAs per SM) can only cost
# (tenth session: 0.80-0.91x of serial on prefill-only batches, docs/PERFORMANCE.md), and the
# engine's own prefill launch runs it.
DECODE_BUCKETS = ((1, 16), (17, 64), (65, 256), (257, 1 << 16))
CHUNK_BUCKETS = ((0, 0), (1, 1024), (1025, 4096), (4097, 1 << 36))
# 1.1: a bucket's schedule may be "colocated" (kvtune before 1.1 refuses such a bucket).
# 1.2: `deferred_buckets` (buckets whose winner failed its held-out check; a reader of 1.1 sees
# them as outside every bucket, which is what they mean), `validation`, and the knob
# `decode_ahead` (kvtune before 1.2 refuses a bucket that names it).
# 1.3: the knob `decode_kernel` (kvtune before 1.3 refuses a bucket that names it).
# 1.4: the knobs `decode_family` and `piece_cost_tokens` (kvtune before 1.4 refuses a bucket that
# names them).
HYBRID_SCHEMA = "kvtune-hybrid-heuristic/1.4"


def bucket_key(num_decodes: int, prefill_tokens: int) -> tuple[int, int, int, int] | None:
    """(min_decodes, max_decodes, min_prefill_tokens, max_prefill_tokens) holding the batch, or
    None for a batch without decodes (prefill only: no bucket, see DECODE_BUCKETS)."""
    if num_decodes < 1:
        return None
    d = next(b for b in DECODE_BUCKETS if b[0] <= num_decodes <= b[1])
    c = next(b for b in CHUNK_BUCKETS if b[0] <= prefill_tokens <= b[1])
    return (*d, *c)


@dataclass(frozen=True)
class HybridTunedPolicy(_HybridBase):
    """hybrid-parametric with knobs per (decodes, prefill tokens) bucket, as `kvtune tune --suite
    hybrid` writes them (hybrid_heuristic.json). path: that file; a batch outside every shipped
    bucket of it (in a deferred bucket, or in none) is planned as the engine plans it:
    `hybrid-serial` (prefill launch, then the decodes under FlashInfer's rule). So is a batch
    without a decode, whatever the file's ranges say (files before the tenth session had a
    0-decode bucket edge; see DECODE_BUCKETS). A shape other than the file's (heads, head_dim,
    page, query or KV dtype) is refused, naming the field, as a decode heuristic refuses it."""

    path: str = ""
    name: ClassVar[str] = "hybrid-tuned"

    def __post_init__(self) -> None:
        if self.path:
            _load_buckets(self.path)  # validates the file now, not at the first plan

    def check_for(self, shape: AttentionShape) -> None:
        """ValueError naming the field where `shape` is not the one the file was tuned for, so
        that a bench or tune refuses the file before it measures anything (plan_hybrid checks
        it again per batch)."""
        tuned_for = _load_buckets(self.path)[0] if self.path else None
        if tuned_for:  # every tune writes it; a hand-made file may leave it out
            check_shape(tuned_for, shape)

    def plan_hybrid(self, q_lens, kv_lens, shape: AttentionShape,
                    device: DeviceSpec) -> HybridPlan:
        self.check_for(shape)
        buckets = _load_buckets(self.path)[1] if self.path else []
        q, kv = check_lengths(q_lens, kv_lens)
        dec = int((q <= MAX_DECODE_Q_LEN).sum())
        pre = int(q[q > MAX_DECODE_Q_LEN].sum())
        for (dlo, dhi, clo, chi), pol in (buckets if dec else []):
            if dlo <= dec <= dhi and clo <= pre <= chi:
                return pol.plan_hybrid(q, kv, shape, device)
        return HybridSerialPolicy().plan_hybrid(q, kv, shape, device)


def _load_buckets(path: str) -> tuple[dict, list]:
    """(the file's shape dict or None, [((min_decodes, max_decodes, min_prefill, max_prefill),
    HybridParametricPolicy)] of the shipped buckets) of a hybrid_heuristic.json
    (`deferred_buckets` are not read: they plan as the engine does); ValueError naming `path`
    for an unreadable or foreign file. Read again when the file's modification time or size
    changed (a file re-written under the same name plans with its new buckets in a
    long-running process too)."""
    import os

    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    return _read_buckets(path, stamp)


@functools.lru_cache(maxsize=16)
def _read_buckets(path: str, stamp) -> tuple[dict, list]:
    """_load_buckets for one (modification time, size) stamp of the file."""
    import json

    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"path: cannot read hybrid heuristic {path!r}: {exc}") from None
    if str(doc.get("schema", "")).split("/")[0] != HYBRID_SCHEMA.split("/")[0]:
        raise ValueError(f"path: {path!r} is not a {HYBRID_SCHEMA} file")
    out = []
    for b in doc.get("buckets", []):
        pol = HybridParametricPolicy(**b["params"])  # validates every knob
        out.append(((b["min_decodes"], b["max_decodes"], b["min_prefill_tokens"],
                     b["max_prefill_tokens"]), pol))
    return doc.get("shape"), out


HYBRID_POLICIES = (HybridSerialPolicy, HybridStreamsPolicy, HybridFusedPolicy,
                   HybridColocatedPolicy, PodPolicy, HybridParametricPolicy, HybridTunedPolicy)


def is_hybrid_policy(policy) -> bool:
    return hasattr(policy, "plan_hybrid")


__all__ = [
    "DECODE_FAMILIES",
    "HYBRID_POLICIES",
    "TENSOR_FLOPS_PER_S",
    "HybridColocatedPolicy",
    "HybridFusedPolicy",
    "HybridParametricPolicy",
    "HybridSerialPolicy",
    "HybridStreamsPolicy",
    "HybridTunedPolicy",
    "bucket_key",
    "PodPolicy",
    "is_hybrid_policy",
    "make_hybrid_plan",
    "modelled_times_s",
    "tensor_flops_per_s",
]

"""A discrete-event model of one split-KV decode launch on a GPU described by a DeviceSpec.

This is a MODEL, never a measurement. It predicts how long a Plan takes from how its tasks
(work items x KV heads) land on CTA slots and share HBM bandwidth:

- CTA slots: `sm_count x r`, r the CTAs per SM the launch runs at (resident_ctas_per_sm): the
  kernel's own occupancy when the constants give one (`kernel_ctas_per_sm`: FlashInfer sizes its
  registers itself; kvtune's Triton kernel runs its 4-warp variant at a fixed occupancy whatever
  the plan counted, and its one-CTA-per-SM variant, `single_cta_variant`, alone on an SM), else
  the plan's ctas_per_sm; capped by the device's `max_ctas_per_sm`. With `config_residency`
  (kvtune's Triton kernel) a static launch takes the count of the stage-1 configuration it runs
  (kernels.decode.launch_config, decode_config.RESIDENT_PER_SM) where that is a register-capped
  twin (three) or a one-per-SM entry (configured_ctas_per_sm).
  Slot `s` is slot `s // sm_count` of SM `s % sm_count`, because the block
  scheduler spreads the first CTAs over the SMs before it doubles up on any of them.
- Dispatch. Static grids: CTA `i` runs task `i`; CTAs start in grid order, each on the first free
  slot (lowest slot id among slots freed at the same instant). Persistent grids launch
  `plan.grid_size` CTAs the same way; under `persistent-round-robin` CTA `i` runs tasks
  i, i+grid, i+2*grid, ... in order; under `persistent-heavy-first` an atomic counter hands the
  next task of the (longest-first) list to whichever CTA frees first.
- Each task first spends a fixed start time on its slot without touching HBM (a CTA's launch and
  prologue, `cta_start_us`; a persistent CTA's later tasks pay `persistent_task_us` instead), then
  streams its bytes. A kernel whose loop steps a fixed block of tokens (`block_tokens`;
  `single_cta_block_tokens` for the one-CTA-per-SM variant) also spends, per task, the time its
  partial last block's masked tokens would take at the per-CTA cap: the iteration waits out a
  whole block's memory latency but moves only the valid tokens' bytes (tile quantisation).
  Streaming tasks share the achievable HBM bandwidth equally and none exceeds the per-CTA rate
  cap; n streaming tasks get together the smooth roofline
  bw / (1 + (bw / (n cap)) ** k) ** (1 / k) (k = `saturation_sharpness`; inf = min(n cap, bw)):
  near saturation the loaded memory latency grows, so n CTAs get less than n x cap.
- Split requests add a merge launch that reads every partial output and LSE and writes the final
  output (every request when the plan says `split_kv` is on: FlashInfer then writes partials for
  all of them); the first launch adds `launch_us`, the merge `merge_launch_us` + `merge_fixed_us`
  + `merge_per_split_us` x the most splits of one request (its serial loop) + `merge_row_us` x
  merged (request, query head) rows per SM (one short latency-bound program each) + its bytes at
  the bandwidth. The merge starts when the first launch ends, but not before `merge_issue_us`
  after it started (the host issues it; eager launches from Python).
- The per-CTA rate cap depends on the kernel and the plan: `cta_rate_cap_bytes_per_s` for a CTA
  of the reference shape (512 KV bytes per token and head: head_dim 128, 2-byte elements), scaled
  by (bytes per token / 512) ** `inflight_exponent` (a wider row keeps more bytes in flight) and
  by r ** -`residency_exponent` for a launch running r CTAs per SM (the slots' r: the variant's
  warps and co-resident CTAs share an SM's load pipes; exponent 0 = no effect, 1 = one SM-wide
  rate split r ways).
- An fp8 KV cache (kv_dtype fp8_e4m3) counts 1 byte per element, and its streaming tasks share
  `fp8_stream_efficiency` x the bandwidth: the kernel's e4m3 -> fp16 conversion competes for
  the SMs' issue slots, so a full GPU streams fp8 bytes below the 16-bit kernel's rate; and
  each CTA's cap is `fp8_cta_rate_factor` x the 16-bit one (1.0 for kvtune's kernel; about 0.4
  for FlashInfer's fp8 decode, which converts at about its 16-bit element rate per CTA).
- Programs the kernel launches beyond the plan's tasks (plan.notes: `launched_ctas`, the whole
  grid; `kv_reads_per_task`, programs per task that each re-read its KV, SGLang with G > 16)
  cost `empty_cta_us` of slot time each when they have no work, spread over the slots. Only for
  a kernel that launches them: kvtune's Triton kernel runs any plan with one program per task
  (grid (items, KV heads), or plan.grid_size persistent programs) whatever grid the upstream
  kernel the plan imitates would launch (`one_program_per_task`).

Because all streaming tasks get the same rate, the model keeps one clock S(t) = bytes served to
each streaming task so far; a task that starts streaming at S0 with b bytes ends when S = S0 + b,
so a heap of those finish points gives the next event in O(log n). A plan of 100,000 tasks
simulates in a fraction of a second.

One set of constants stands for one (device, kernel): harness/calibration.py fits them to GPU
rows, harness/device.py loads the fitted files. Not modelled: L2 hits, clock changes, jitter
between CTAs (equal tasks started together finish together, so wave quantization is sharper than
on a GPU), the host's jitter between two eager launches.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass

import numpy as np
from kvtune.kernels.plan import (DTYPE_BYTES, KV_DTYPE_BYTES, AttentionShape, DeviceSpec, Plan,
                                 check_launch_order, launch_tasks, product_launch_order)

FLOAT32_BYTES = 4


@dataclass(frozen=True)
class SimConstants:
    """The model's constants. Defaults are fitted by hand to one H200 (132 SMs, datasheet 4.8 TB/s)
    running FlashInfer 0.5.3's tensor-core decode (bf16, 8 KV heads, G=4, head_dim 128, page 16,
    262,144 total tokens, median of triton.testing.do_bench); see shared/BACKGROUND.md section 2.
    A later fit to measurements replaces them; every field can be overridden.

    hbm_efficiency: fraction of the device's `hbm_bytes_per_s` that decode streaming reaches,
        0 < x <= 1.25 (a calibration's device holds the measured read + write copy bandwidth,
        which a read-mostly decode can beat by a few percent). Default 0.87: a device copy measured 4.28 TB/s (0.89 of 4.8) and uniform
        batches reached about 4.1 TB/s (0.86) including launch and start overheads, which the
        model charges separately.
    cta_rate_cap_bytes_per_s: most bytes/s one CTA streams, > 0 (inf: no cap). Default 40 GB/s:
        skew80 at B=48 and B=256 (no split, one CTA of 107 MB per KV head) ran 2681 and 2702 us;
        the model then says about 2730 and 2746 us, and 1385 us for B=32 (2 CTAs of 53.7 MB per
        head; measured 1484). The cap belongs to that kernel: FlashInfer's CUDA-core kernel ran
        the same B=256 batch in 11.8 ms, so modelling it needs its own constants.
    cta_start_us: time a newly started CTA holds its slot before it streams (launch of the block,
        prologue, first loads in flight), >= 0. Default 1.5 us: uniform B=256 (2048 CTAs, ~8
        waves) ran 273 us against 262 us for B=16 (one wave) on the same bytes.
    persistent_task_us: the same for each task after the first of a persistent CTA (fetching the
        next tile, new pointers, pipeline refill), >= 0. Default 0.5 us: not measured; chosen
        below cta_start_us because block launch is skipped.
    launch_us: cost of one kernel launch as CUDA-event timing sees it (launch latency, ramp and
        drain), >= 0. Default 3 us, typical of Hopper; with the others it puts uniform B=16 at
        about 267 us against 262 measured.
    merge_fixed_us: fixed work of the merge kernel beyond its launch and its bytes (a tiny,
        latency-bound kernel), >= 0. Default 2 us.
    merge_launch_us: launch cost of the merge kernel, >= 0. Default 3 us (= launch_us).
    residency_exponent: how the per-CTA cap falls for a launch built for r CTAs per SM
        (cap * r ** -x, r = the plan's ctas_per_sm), 0..2. Default 0.
    inflight_exponent: how the per-CTA cap scales with KV bytes per token and head relative to
        512, -4..4. Default 0 (one cap for every shape).
    empty_cta_us: slot time of a launched program with no work (it reads its bounds and exits),
        >= 0. Default 0.5 us: not measured.
    kernel_ctas_per_sm: CTAs per SM the kernel runs at whatever the plan counted, 0..32; 0 (the
        default) = the plan's ctas_per_sm. Sets the slots and the residency of the rate cap.
    single_cta_variant: plans built for one CTA per SM run a variant that fills the SM (kvtune's
        Triton kernel), so they get 1 CTA per SM even when kernel_ctas_per_sm is set. Default
        False.
    saturation_sharpness: k of the smooth roofline of the streaming tasks (see the module
        docstring), >= 0.5; inf (the default) = the hard min(n x cap, bandwidth).
    merge_issue_us: earliest start of the merge kernel after the first launch started (the host
        issues it after the first), >= 0. Default 0.
    merge_per_split_us: merge time per split of the most split request (the merge loops over a
        request's partials), >= 0. Default 0.
    merge_row_us: SM time per merged (request, query head) row (one short, latency-bound merge
        program each, spread over the SMs), >= 0. Default 0.
    block_tokens: KV tokens per step of the kernel's inner loop, 0..4096; 0 (the default) = no
        tile quantisation. A task of t tokens then runs ceil(t / block_tokens) steps; the masked
        tokens of its last step cost their time at the per-CTA cap, on the task's slot, without
        HBM traffic (added to the task's start cost).
    single_cta_block_tokens: the same for plans run by the one-CTA-per-SM variant
        (single_cta_variant and the plan's ctas_per_sm 1), 0..4096; 0 = block_tokens.
    one_program_per_task: the kernel launches one program per planned task and nothing else
        (kvtune's Triton kernel, harness/backends/triton.py: grid (items, KV heads) or the
        plan's persistent grid), so the extra programs an upstream kernel would launch
        (plan.notes launched_ctas, kv_reads_per_task) are not modelled. Default False (the
        kernel the plan imitates launches them).
    config_residency: take each launch's CTAs per SM from the stage-1 configuration kvtune's
        Triton kernel runs it with (kernels.decode.launch_config on the device's SMs,
        kernels.decode_config.RESIDENT_PER_SM: a register-capped twin runs three where its
        entry runs two, llama3-70b-tp8's deep entry one; configured_ctas_per_sm) where it
        differs from what the constants give (kernel_ctas_per_sm, the plan's; plans built for
        one CTA per SM keep single_cta_variant). A launch with more CTAs per SM than that gets their slots, and each CTA the cap
        of the constants' count times (that count / its own): the SM's rate shared by more
        programs, so a third program adds slots (latency hiding, backfill), not bandwidth; a
        launch with fewer gets the cap law's value at its own count. Default False (the count
        the constants give, as every calibration before the twenty-fourth session was fitted).
    config_residency_law: with config_residency, a launch at more CTAs per SM than the
        constants count gets the cap law's value at its own count too (cap x r ** -
        residency_exponent), instead of the counted cap shared r ways. Default False (shared:
        a program beyond the count adds slots, not bandwidth). True in the H200 Triton file
        since the thirty-second session: with the fp8 head_dim-64 entry counted at its four
        programs per SM, the shared rule put its balanced-2x launches 18-51% slower than the
        GPU ran them (docs/PERFORMANCE.md).
    fp8_stream_efficiency: share of the streaming bandwidth (hbm_bytes_per_s x hbm_efficiency)
        the first launch reaches when the shape's KV cache is fp8 (kv_dtype fp8_e4m3), 0 < x <= 1.
        Default 1.0: fp8 streams like 16-bit KV at 1 byte per element (the bytes-only model);
        16-bit shapes never read it, nor does the merge launch (fp32 partials). Why a bandwidth
        share rather than a per-CTA cap: the fp8 kernel's e4m3 -> fp16 conversion takes issue
        slots the SM's CTAs share, so it lowers what a full GPU streams, while a lone program
        per SM (one KV head) is held by its memory latency as at 16 bits. Fitted by
        benchmarks/fit_fp8_sim.py on fp8 rows, the other constants held.
    fp8_cta_rate_factor: the per-CTA cap (cta_rate_cap_bytes_per_s, in bytes) times this for an
        fp8 KV cache, 0 < x <= 1. Default 1.0 (the cap in bytes as at 16 bits: Triton's lone
        program is held by its memory latency, above). FlashInfer's fp8 decode converts inside
        each CTA at about its 16-bit element rate, so one of its CTAs streams about half the
        bytes per second (llama3-70b-tp8, one KV head: bf16 60 us, fp8 59 us on an H100).
        Fitted with fp8_stream_efficiency by benchmarks/fit_fp8_sim.py --fit-cta-factor.
    fp8_head_dim_knee: a per-key cost of the fp8 kernel in head_dim columns, >= 0: the fp8
        stream share is fp8_stream_efficiency / (1 + knee / head_dim). Default 0.0 (one share
        for every head_dim). Why: each key costs the kernel some work whatever its width (its
        page id, its share of the softmax, the tile's dequantisation setup), so a narrow row
        streams fewer bytes per second. On the H200 in the thirty-first session, full plans read
        0.66 of copy at head_dim 64, 0.83-0.87 at 128 and 0.93 at 256 (docs/PERFORMANCE.md).
        Fitted with fp8_stream_efficiency by benchmarks/fit_fp8_sim.py --fit-knee.
    """

    hbm_efficiency: float = 0.87
    cta_rate_cap_bytes_per_s: float = 40e9
    cta_start_us: float = 1.5
    persistent_task_us: float = 0.5
    launch_us: float = 3.0
    merge_fixed_us: float = 2.0
    merge_launch_us: float = 3.0
    residency_exponent: float = 0.0
    inflight_exponent: float = 0.0
    empty_cta_us: float = 0.5
    kernel_ctas_per_sm: int = 0
    single_cta_variant: bool = False
    saturation_sharpness: float = math.inf
    merge_issue_us: float = 0.0
    merge_per_split_us: float = 0.0
    merge_row_us: float = 0.0
    block_tokens: int = 0
    single_cta_block_tokens: int = 0
    one_program_per_task: bool = False
    fp8_stream_efficiency: float = 1.0
    fp8_cta_rate_factor: float = 1.0
    config_residency: bool = False
    config_residency_law: bool = False
    fp8_head_dim_knee: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.hbm_efficiency, (int, float)) and 0 < self.hbm_efficiency <= 1.25):
            raise ValueError(
                f"hbm_efficiency: {self.hbm_efficiency!r} out of range; allowed: (0, 1.25]"
            )
        if not (
            isinstance(self.cta_rate_cap_bytes_per_s, (int, float))
            and self.cta_rate_cap_bytes_per_s > 0
        ):
            raise ValueError(
                f"cta_rate_cap_bytes_per_s: {self.cta_rate_cap_bytes_per_s!r} must be > 0"
            )
        if not (isinstance(self.fp8_stream_efficiency, (int, float))
                and not isinstance(self.fp8_stream_efficiency, bool)
                and 0 < self.fp8_stream_efficiency <= 1):
            raise ValueError(f"fp8_stream_efficiency: {self.fp8_stream_efficiency!r} out of "
                             "range; allowed: (0, 1]")
        if not (isinstance(self.fp8_cta_rate_factor, (int, float))
                and not isinstance(self.fp8_cta_rate_factor, bool)
                and 0 < self.fp8_cta_rate_factor <= 1):
            raise ValueError(f"fp8_cta_rate_factor: {self.fp8_cta_rate_factor!r} out of "
                             "range; allowed: (0, 1]")
        if not (isinstance(self.fp8_head_dim_knee, (int, float))
                and not isinstance(self.fp8_head_dim_knee, bool)
                and 0 <= self.fp8_head_dim_knee <= 1024):
            raise ValueError(f"fp8_head_dim_knee: {self.fp8_head_dim_knee!r} out of range; "
                             "allowed: 0..1024 (head_dim columns)")
        if not (isinstance(self.residency_exponent, (int, float)) and 0 <= self.residency_exponent <= 2):
            raise ValueError(
                f"residency_exponent: {self.residency_exponent!r} out of range; allowed: 0..2"
            )
        if not (isinstance(self.inflight_exponent, (int, float)) and -4 <= self.inflight_exponent <= 4):
            raise ValueError(
                f"inflight_exponent: {self.inflight_exponent!r} out of range; allowed: -4..4"
            )
        for name in ("cta_start_us", "persistent_task_us", "launch_us", "merge_fixed_us",
                     "merge_launch_us", "empty_cta_us", "merge_issue_us", "merge_per_split_us",
                     "merge_row_us"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: {value!r} out of range; allowed: a finite number >= 0")

        k = self.saturation_sharpness
        if not (isinstance(k, (int, float)) and 0.5 <= k):
            raise ValueError(
                f"saturation_sharpness: {k!r} out of range; allowed: >= 0.5 (inf: a hard roofline)"
            )
        for name in ("single_cta_variant", "one_program_per_task", "config_residency",
                     "config_residency_law"):
            if type(getattr(self, name)) is not bool:  # 1 or "yes" is not a flag
                raise ValueError(f"{name}: {getattr(self, name)!r} must be true or false")
        for name in ("block_tokens", "single_cta_block_tokens"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4096):
                raise ValueError(f"{name}: {value!r} out of range; allowed: an integer 0..4096")
        if not (isinstance(self.kernel_ctas_per_sm, int) and 0 <= self.kernel_ctas_per_sm <= 32):
            raise ValueError(
                f"kernel_ctas_per_sm: {self.kernel_ctas_per_sm!r} out of range; allowed: 0..32"
            )

    def to_dict(self) -> dict:
        """Plain JSON values (an infinite cap is written as None)."""
        return {k: (None if isinstance(v, float) and math.isinf(v) else v)
                for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict) -> SimConstants:
        """The inverse of to_dict; unknown keys raise ValueError naming them."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"constants: {unknown[0]!r} unknown; allowed: {', '.join(sorted(known))}")
        return cls(**{k: (math.inf if v is None else v) for k, v in values.items()})


# KV bytes per token and head of the shape the rate caps are quoted for (head_dim 128, 2 bytes).
REFERENCE_KV_BYTES_PER_TOKEN = 512

DEFAULT_CONSTANTS = SimConstants()

TIMELINE_COLUMNS = (
    "task",
    "request",
    "split",
    "kv_head",
    "cta",
    "sm",
    "slot",
    "start_us",
    "stream_start_us",
    "end_us",
    "bytes",
)


@dataclass(frozen=True, eq=False)
class SimResult:
    """Predicted time of one plan and its timeline. Times in microseconds from the launch call.

    time_us = stage1_us + merge_us. stage1_us: launch_us plus the first kernel's makespan.
    merge_us: the merge launch, 0 when no request is split. num_slots: CTA slots modelled.
    hbm_bytes: bytes the model moves in both launches.
    Timeline, one row per task (work item x KV head), [num_tasks] numpy arrays in task order:
    task (dispatch index), request, split, kv_head, cta (the CTA that ran it), sm, slot (slot
    within the SM), start_us (slot taken), stream_start_us (start cost paid), end_us, bytes.
    launch_order: the order the tasks were handed out in (kernels.plan.LAUNCH_ORDERS).
    """

    time_us: float
    stage1_us: float
    merge_us: float
    num_slots: int
    hbm_bytes: int
    task: np.ndarray
    request: np.ndarray
    split: np.ndarray
    kv_head: np.ndarray
    cta: np.ndarray
    sm: np.ndarray
    slot: np.ndarray
    start_us: np.ndarray
    stream_start_us: np.ndarray
    end_us: np.ndarray
    bytes: np.ndarray
    launch_order: str = "plan"

    def to_frame(self):
        """The timeline as a pandas DataFrame (columns TIMELINE_COLUMNS), e.g. for a Gantt chart."""
        import pandas as pd

        return pd.DataFrame({name: getattr(self, name) for name in TIMELINE_COLUMNS})


def element_bytes(shape: AttentionShape) -> int:
    """Bytes of one query/output element of `shape` (the one place the model reads the dtype)."""
    return DTYPE_BYTES[shape.dtype]


def merged_requests(plan: Plan) -> np.ndarray:
    """bool [B]: requests whose output goes through partials and the merge kernel. Split
    requests, or every request when the plan's notes say split-KV is on (FlashInfer writes
    partials for all requests then, CUDA-graph mode included)."""
    if plan.notes.get("split_kv") is True:
        return np.ones(plan.batch_size, dtype=bool)
    return plan.splits > 1


def programs_per_task(plan: Plan, constants: SimConstants = DEFAULT_CONSTANTS) -> int:
    """Programs the kernel runs per planned task, each re-reading the task's KV (SGLang's grouped
    kernel launches ceil(G / 16) per KV head when G > 16); 1 for every other kernel, and for a
    kernel that runs one program per task (constants.one_program_per_task)."""
    if constants.one_program_per_task:
        return 1
    return max(1, int(plan.notes.get("kv_reads_per_task", 1) or 1))


def empty_programs(plan: Plan, constants: SimConstants = DEFAULT_CONSTANTS) -> int:
    """Programs launched with no work: the launched grid (plan.notes `launched_ctas`, e.g.
    trtllm's uniform split count, SGLang's max_kv_splits grid, vLLM's q-block grid, FlashInfer's
    CUDA-graph padding) minus the programs that have a task; 0 for a kernel that runs one
    program per task (constants.one_program_per_task)."""
    if constants.one_program_per_task:
        return 0
    working = plan.num_tasks * programs_per_task(plan)
    launched = int(plan.notes.get("launched_ctas", working) or working)
    return max(0, launched - working)


def cta_rate_cap_bytes_per_s(plan: Plan, shape: AttentionShape, device: DeviceSpec,
                             constants: SimConstants, resident: int | None = None) -> float:
    """The per-CTA streaming cap for this plan: the reference cap scaled by the shape's bytes in
    flight and by the CTAs per SM the launch is built for. resident: the launch's CTAs per SM
    when the caller has it (resident_ctas_per_sm with the shape), else computed here."""
    c = constants
    scale = (shape.kv_bytes_per_token_per_head / REFERENCE_KV_BYTES_PER_TOKEN) ** c.inflight_exponent
    # The occupancy the launch runs at (the kernel's variant), not how many CTAs happen to share
    # an SM at one instant.
    counted = resident_ctas_per_sm(plan, device, c)
    if resident is None:  # simulate passes the one it computed for the slots
        resident = resident_ctas_per_sm(plan, device, c, shape)
    at = resident if c.config_residency_law else min(counted, resident)
    cap = c.cta_rate_cap_bytes_per_s * scale * at ** -c.residency_exponent
    if shape.kv_is_fp8:
        cap *= c.fp8_cta_rate_factor  # 1.0 unless fitted: 16-bit and old files bit for bit
    if c.config_residency_law:
        return cap
    # More CTAs per SM than the constants count (a twin's): the SM's rate shared by more.
    return cap * counted / resident if resident > counted else cap


def stream_bandwidth_bytes_per_us(shape: AttentionShape, bw_bytes_per_us: float,
                                  constants: SimConstants = DEFAULT_CONSTANTS) -> float:
    """The bandwidth the first launch's streaming tasks share, bytes/us: `bw_bytes_per_us`
    (the device's at hbm_efficiency), times fp8_stream_efficiency / (1 + fp8_head_dim_knee /
    head_dim) for an fp8 KV cache."""
    if shape.kv_is_fp8:
        knee = 1.0 + constants.fp8_head_dim_knee / shape.head_dim
        return bw_bytes_per_us * constants.fp8_stream_efficiency / knee
    return bw_bytes_per_us  # 16-bit KV: untouched, so its predictions stay bit for bit


def task_bytes(plan: Plan, shape: AttentionShape, launch_order: str = "plan") -> np.ndarray:
    """HBM bytes of each task, float64 [num_tasks] in dispatch order (kernels.plan.launch_tasks:
    the plan's, or "longest-first").

    A task reads its KV range of one head (tokens x kv_bytes_per_token_per_head) and the G query
    rows of that head, and writes either the final output (dtype, request not split) or a float32
    partial output plus one float32 LSE per query head (request split).
    """
    dtype_bytes = element_bytes(shape)
    G, D = shape.group_size, shape.head_dim
    kv = plan.item_tokens().astype(np.float64) * shape.kv_bytes_per_token_per_head
    split = merged_requests(plan)[plan.work_request]
    out = np.where(split, G * (D * FLOAT32_BYTES + FLOAT32_BYTES), G * D * dtype_bytes)
    per_item = kv + G * D * dtype_bytes + out
    return per_item[launch_tasks(plan, launch_order)[0]]


def kernel_block_tokens(plan: Plan, constants: SimConstants = DEFAULT_CONSTANTS) -> int:
    """KV tokens per inner-loop step of the kernel variant that runs `plan` (0: not modelled)."""
    c = constants
    if c.single_cta_variant and plan.ctas_per_sm == 1 and c.single_cta_block_tokens:
        return c.single_cta_block_tokens
    return c.block_tokens


def partial_block_us(plan: Plan, shape: AttentionShape, cap_bytes_per_us: float,
                     constants: SimConstants = DEFAULT_CONSTANTS,
                     launch_order: str = "plan") -> np.ndarray | None:
    """Per task (dispatch order as task_bytes, float64 [num_tasks]): the time the masked tokens
    of the task's partial last block take at the per-CTA cap (cap in bytes/us); None when the
    constants give no block size (see block_tokens)."""
    block = kernel_block_tokens(plan, constants)
    if not block:
        return None
    tokens = plan.item_tokens().astype(np.int64)
    masked = (-tokens) % block
    per_item = masked * shape.kv_bytes_per_token_per_head / cap_bytes_per_us
    return per_item.astype(np.float64)[launch_tasks(plan, launch_order)[0]]


def merge_bytes(plan: Plan, shape: AttentionShape) -> int:
    """HBM bytes of the merge launch: read every partial output and LSE of the split requests,
    write their final output. 0 when nothing is split."""
    split = merged_requests(plan)
    if not split.any():
        return 0
    H, D = shape.num_qo_heads, shape.head_dim
    partials = int(plan.splits[split].sum()) * H * (D * FLOAT32_BYTES + FLOAT32_BYTES)
    final = int(split.sum()) * H * D * element_bytes(shape)
    return partials + final


def resident_ctas_per_sm(plan: Plan, device: DeviceSpec,
                         constants: SimConstants = DEFAULT_CONSTANTS,
                         shape: AttentionShape | None = None,
                         launch_order: str | None = None) -> int:
    """CTAs one SM runs at once for this launch: the kernel's own occupancy when the constants
    fix one (kernel_ctas_per_sm > 0: FlashInfer sizes registers and shared memory itself, whatever
    the plan counted), else the plan's ctas_per_sm; with constants.config_residency and a
    shape, the launch's stage-1 configuration's where known (configured_ctas_per_sm); capped by
    the device's occupancy. launch_order: the order the configuration is chosen for (None:
    kernels.plan.product_launch_order)."""
    c = constants
    wanted = c.kernel_ctas_per_sm or plan.ctas_per_sm
    if c.single_cta_variant and plan.ctas_per_sm == 1:
        wanted = 1  # the variant built for one CTA per SM fills the SM
    elif c.config_residency and shape is not None:
        # Plans built for one CTA per SM keep the calibrated single-CTA variant: what the
        # kernel runs them with today (a twin) was never measured on the rows that fixed it.
        wanted = configured_ctas_per_sm(plan, shape, device, launch_order) or wanted
    return max(1, min(wanted, device.max_ctas_per_sm))


def configured_ctas_per_sm(plan: Plan, shape: AttentionShape, device: DeviceSpec,
                           launch_order: str | None = None) -> int | None:
    """Programs per SM of the stage-1 configuration kvtune's Triton kernel runs `plan` with on
    `device` (kernels.decode.launch_config with its SM count; decode_config.RESIDENT_PER_SM) where
    that configuration is a register-capped twin (the entry's own pipeline under a register cap,
    so "more programs sharing the SM's rate" describes it) or runs one program per SM (the
    one-KV-head deep entry); None otherwise: for the shallow twins, whose one stage less also
    changes each program's rate, which this model does not describe; for configurations or KV
    types the table does not know; and for persistent grids (plan.grid_size programs)."""
    from kvtune.kernels.decode import launch_config
    from kvtune.kernels.decode_config import RESIDENT_PER_SM
    from kvtune.kernels.paged import KV_TORCH_DTYPES

    kv = KV_TORCH_DTYPES.get(shape.kv_dtype)
    if kv is None or plan.is_persistent:
        return None
    config = launch_config(plan, shape, kv, device.sm_count, launch_order)
    count = RESIDENT_PER_SM.get((shape.head_dim, KV_DTYPE_BYTES[shape.kv_dtype], config))
    return count if count == 1 or config.max_registers is not None else None


def num_slots(plan: Plan, device: DeviceSpec, constants: SimConstants = DEFAULT_CONSTANTS,
              shape: AttentionShape | None = None) -> int:
    """CTA slots: SMs times the CTAs per SM the launch runs at (resident_ctas_per_sm)."""
    return device.sm_count * resident_ctas_per_sm(plan, device, constants, shape)


def simulate(
    plan: Plan,
    shape: AttentionShape,
    device: DeviceSpec,
    constants: SimConstants = DEFAULT_CONSTANTS,
    launch_order: str | None = None,
) -> SimResult:
    """Predict the time of `plan` on `device` (see the module docstring for the model), its
    tasks handed out in `launch_order` (kernels.plan.LAUNCH_ORDERS). None: the modelled kernel's
    own, kernels.plan.product_launch_order for kvtune's Triton kernel (constants
    one_program_per_task), "plan" for the kernels whose planners the plan imitates."""
    if plan.num_kv_heads != shape.num_kv_heads:
        raise ValueError(
            f"num_kv_heads: plan has {plan.num_kv_heads}, shape has {shape.num_kv_heads}; they must match"
        )
    if plan.page_size != shape.page_size:
        raise ValueError(
            f"page_size: plan has {plan.page_size}, shape has {shape.page_size}; they must match"
        )
    c = constants
    bw_bytes_per_us = device.hbm_bytes_per_s * c.hbm_efficiency * 1e-6
    stream_bw_bytes_per_us = stream_bandwidth_bytes_per_us(shape, bw_bytes_per_us, c)
    if launch_order is None:
        launch_order = product_launch_order(plan) if c.one_program_per_task else "plan"
    check_launch_order(launch_order)
    # One launch_config per plan, for the tasks in this order.
    resident = resident_ctas_per_sm(plan, device, c, shape, launch_order)
    cap_bytes_per_us = cta_rate_cap_bytes_per_s(plan, shape, device, c, resident) * 1e-6
    reads = programs_per_task(plan, c)
    item_of, head_of = launch_tasks(plan, launch_order)
    nbytes = task_bytes(plan, shape, launch_order)
    if reads > 1:  # each task's programs run one after the other in grid order
        nbytes = np.repeat(nbytes, reads)
    slots = device.sm_count * resident  # num_slots
    grid = plan.grid_size * reads
    extra_us = partial_block_us(plan, shape, cap_bytes_per_us, c, launch_order)
    if extra_us is not None and reads > 1:
        extra_us = np.repeat(extra_us, reads)
    start, stream, end, cta, slot_of = _run_events(
        nbytes.tolist(),
        slots,
        grid,
        heavy_first_counter=plan.schedule == "persistent-heavy-first",
        cta_start_us=c.cta_start_us,
        next_task_us=c.persistent_task_us,
        rates=stream_rates(slots, stream_bw_bytes_per_us, cap_bytes_per_us,
                           c.saturation_sharpness),
        extra_start_us=None if extra_us is None else extra_us.tolist(),
    )
    start += c.launch_us
    stream += c.launch_us
    end += c.launch_us
    # Programs with no work hold a slot for empty_cta_us each; spread over the slots.
    empty_us = c.empty_cta_us * empty_programs(plan, c) / slots
    stage1_us = float(end.max()) + empty_us

    mbytes = merge_bytes(plan, shape)
    merge_us = 0.0
    if mbytes:
        # The merge kernel starts when the first one ends, but not before the host has issued it.
        stage1_us = max(stage1_us, c.merge_issue_us)
        merged = merged_requests(plan)
        max_splits = int(plan.splits[merged].max())
        rows_per_sm = int(merged.sum()) * shape.num_qo_heads / device.sm_count
        merge_us = (c.merge_launch_us + c.merge_fixed_us + c.merge_per_split_us * max_splits
                    + c.merge_row_us * rows_per_sm + mbytes / bw_bytes_per_us)

    n_tasks = plan.num_tasks * reads
    task = np.arange(n_tasks, dtype=np.int64)
    item = item_of[task // reads]
    return SimResult(
        time_us=stage1_us + merge_us,
        stage1_us=stage1_us,
        merge_us=merge_us,
        num_slots=slots,
        hbm_bytes=int(nbytes.sum()) + mbytes,
        task=task,
        request=plan.work_request[item],
        split=plan.work_split[item],
        kv_head=head_of[task // reads],
        cta=cta,
        sm=slot_of % device.sm_count,
        slot=slot_of // device.sm_count,
        start_us=start,
        stream_start_us=stream,
        end_us=end,
        bytes=nbytes,
        launch_order=launch_order,
    )


def stream_rates(max_streaming: int, bw_bytes_per_us: float, cap_bytes_per_us: float,
                 sharpness: float) -> list:
    """Bytes/us each of n streaming tasks gets, for n = 0 .. max_streaming (a list).

    n tasks ask for n x cap; HBM gives at most bw. In between, the achieved total is the smooth
    roofline bw / (1 + (bw / (n cap)) ** k) ** (1 / k) (k = sharpness): near saturation the
    loaded memory latency grows, so n CTAs with a fixed number of bytes in flight each get less
    than n x cap before the total reaches bw. k = inf is the hard min(n cap, bw).
    """
    n = np.arange(max_streaming + 1, dtype=np.float64)
    n[0] = 1.0
    asked = n * cap_bytes_per_us
    if math.isinf(sharpness):
        total = np.minimum(asked, bw_bytes_per_us)
    else:
        ratio = bw_bytes_per_us / asked
        total = bw_bytes_per_us * np.exp(-np.log1p(ratio ** sharpness) / sharpness)
    per_task = total / n
    per_task[0] = 0.0
    return per_task.tolist()


def _run_events(
    nbytes: list,
    slots: int,
    grid: int,
    *,
    heavy_first_counter: bool,
    cta_start_us: float,
    next_task_us: float,
    rates: list,
    extra_start_us: list | None = None,
):
    """The event loop of one launch. Returns start, stream start and end times (us from the first
    CTA's start) and the CTA and slot of every task, as numpy arrays in task order.

    A static grid is the round-robin walk with grid == tasks: CTA i runs only task i.
    extra_start_us: per task, time added to its start cost (a partial last block), or None.
    """
    n_tasks = len(nbytes)
    start = [0.0] * n_tasks
    stream = [0.0] * n_tasks
    end = [0.0] * n_tasks
    slot_of = [0] * n_tasks
    extra = extra_start_us if extra_start_us is not None else [0.0] * n_tasks
    # rates[n]: what each of n streaming tasks gets (stream_rates).

    # Tasks paying their start cost: a heap of (time_us it is paid, kind, sequence, slot, task).
    # At equal times a new CTA (kind 0) goes before a persistent CTA's next task (kind 1), and
    # within a kind the earlier push goes first.
    pending: list = []
    seq = 0
    finish: list = []  # heap of (S at which the task's bytes are served, slot, task)
    heappush, heappop = heapq.heappush, heapq.heappop
    first_wave = min(slots, grid)
    for s in range(first_wave):
        # CTA s starts on slot s and takes task s (the counter hands out 0, 1, ... too).
        slot_of[s] = s
        heappush(pending, (cta_start_us + extra[s], 0, seq, s, s))
        seq += 1
    next_cta = first_wave
    counter = first_wave  # next task of the heavy-first atomic counter

    now = 0.0
    served = 0.0  # S(t): bytes served so far to every task that has streamed since t = 0
    n_stream = 0
    rate = 0.0
    inf = math.inf
    while pending or finish:
        t_finish = now + (finish[0][0] - served) / rate if finish else inf
        if pending and pending[0][0] < t_finish:
            t, _, _, s, task = heappop(pending)
            served += (t - now) * rate
            now = t
            stream[task] = t
            heappush(finish, (served + nbytes[task], s, task))
            n_stream += 1
        else:
            served, s, task = heappop(finish)
            now = t_finish
            end[task] = now
            n_stream -= 1
            # What this slot runs next: the same CTA's next task, a new CTA, or nothing. Late
            # heavy-first CTAs (grid > slots) start only once the counter is empty: no work.
            if heavy_first_counter:
                if counter < n_tasks:
                    start[counter] = now
                    slot_of[counter] = s
                    heappush(pending, (now + next_task_us + extra[counter], 1, seq, s, counter))
                    seq += 1
                    counter += 1
            elif task + grid < n_tasks:
                nxt = task + grid
                start[nxt] = now
                slot_of[nxt] = s
                heappush(pending, (now + next_task_us + extra[nxt], 1, seq, s, nxt))
                seq += 1
            elif next_cta < grid:
                start[next_cta] = now
                slot_of[next_cta] = s
                heappush(pending, (now + cta_start_us + extra[next_cta], 0, seq, s, next_cta))
                seq += 1
                next_cta += 1
        rate = rates[n_stream]
    slot = np.asarray(slot_of, dtype=np.int64)
    task_ids = np.arange(n_tasks, dtype=np.int64)
    # With the counter every CTA stays on its first slot (late CTAs get nothing), so CTA = slot.
    cta = slot if heavy_first_counter else task_ids % grid
    return np.asarray(start), np.asarray(stream), np.asarray(end), cta, slot


__all__ = [
    "DEFAULT_CONSTANTS",
    "REFERENCE_KV_BYTES_PER_TOKEN",
    "TIMELINE_COLUMNS",
    "SimConstants",
    "SimResult",
    "configured_ctas_per_sm",
    "cta_rate_cap_bytes_per_s",
    "element_bytes",
    "empty_programs",
    "kernel_block_tokens",
    "merge_bytes",
    "merged_requests",
    "num_slots",
    "partial_block_us",
    "programs_per_task",
    "resident_ctas_per_sm",
    "simulate",
    "stream_bandwidth_bytes_per_us",
    "stream_rates",
    "task_bytes",
]

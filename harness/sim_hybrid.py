"""A model of one hybrid launch (HybridPlan) on a DeviceSpec: prefill tiles compute-bound, decode
items bandwidth-bound, co-located CTAs sharing an SM. A MODEL, never a measurement.

- Tasks: a prefill task (tile x KV head x kv split) does 4 x block_m x keys x head_dim FLOPs (the
  padded tile, as the tensor cores see it) and reads its keys' K/V once per request (the other
  tiles of the request hit L2: bytes / tiles of that request); a decode task reads its keys' K/V
  and does 4 x rows x keys x head_dim FLOPs with rows padded to 16.
- Slots: sm_count x ctas_per_sm (capped by the device); slot s is on SM s % sm_count.
- Rates, recomputed at every event: the SM's tensor-core rate (tensor_flops_per_s / sm_count x
  `prefill_efficiency`) is split among the tasks on that SM in proportion to their tile rows (a
  lone CTA reaches at most `single_cta_compute_fraction` of it); the achievable HBM bandwidth
  (hbm_efficiency x datasheet) is split equally among all tasks still streaming, each capped
  (a capped task's unused share goes to the others: stream_rates): a decode item that runs the
  hybrid kernel's `_attend_task` loop (attend_task_decodes: all but the page-ahead ones of
  partitioned beside prefill tiles and of plan.decode_ahead, and the decodes that run
  kernels/decode.py itself, hybrid_plan.decodes_through_decode_kernel) at
  `decode_cta_rate_cap_bytes_per_s`; the decodes that run kernels/decode.py at the cap
  sim_model gives that launch (`cta_rate_cap_bytes_per_s` scaled by shape and residency, as in
  a decode-only step); any other task at `cta_rate_cap_bytes_per_s` (decode.py's reference cap,
  whose page-ahead configurations the page-ahead loop copies). On an fp8 cache, decodes through
  decode.py stream at sim_model's `fp8_stream_efficiency`, the hybrid items at
  `fp8_decode_efficiency`. A task progresses at 1 / max(FLOPs /
  compute, bytes / bandwidth); a decode task in a one-launch kernel (fused, sm-aware) that also
  holds prefill tiles gets `one_launch_decode_efficiency` x its share of the bandwidth, its cap
  kept (decode_scaled_rates).
- Decodes through kernels/decode.py start in that launch's order (decode_launch_order: the
  product's, longest item first for a static plan, unless the plan's is asked for); the hybrid
  kernel's own decode items head-major.
- Dispatch: serial runs the prefill launch to its end, then the decode launch (each adds
  launch_us); streams queues the prefill CTAs then the decode CTAs of a second kernel (the block
  scheduler serves the first kernel first); fused queues the plan's one work list; sm-aware gives
  each CTA the kind its SM's ticket picks (plan.sm_ratio()), the other when its kind is used up;
  colocated gives each SM's first slot to the prefill tasks (the persistent prefill program) and
  COLOCATED_DECODE_SLOTS (2 beside a 64-row tile, 0 beside a 128-row one) more to the decode
  tasks, the SM's further slots opening to decodes once no prefill tile is left to start; each
  kind's slots take the other kind once their own is used up (the decode grid filling a
  finished prefill program's place, the prefill tail joining after the decodes).
  Every CTA spends cta_start_us before it works. A split adds the merge launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvtune.harness.sim_model import DEFAULT_CONSTANTS, FLOAT32_BYTES, SimConstants
from kvtune.harness.sim_model import cta_rate_cap_bytes_per_s as decode_launch_cap
from kvtune.kernels.hybrid_plan import (HybridPlan, decodes_through_decode_kernel,
                                        gluon_prefill_chosen, widened_prefill_pages)
from kvtune.kernels.hybrid_policies import preset_key, tensor_flops_per_s
from kvtune.kernels.plan import (DTYPE_BYTES, AttentionShape, DeviceSpec, check_launch_order,
                                 launch_tasks, product_launch_order)


# Decode programs that fit an SM beside the colocated schedule's prefill program, by prefill tile
# rows: a 64-row tile at 4 warps holds 28-32 K registers and 112 KB of shared memory, a decode
# item 14 K and 38 KB, so two fit; a 128-row tile at 8 warps holds 59-64 K registers, the whole
# register file, so none does (local sm_90 compile, docs/KERNEL_NOTES.md "Co-location by launch
# footprint").
COLOCATED_DECODE_SLOTS = {64: 2, 128: 0}
# Schedules that run both kinds in one launch (kernels/hybrid.py runs every other as a prefill
# launch and a decode launch).
ONE_LAUNCH = ("fused", "sm-aware")


@dataclass(frozen=True)
class HybridSimConstants:
    """prefill_efficiency: fraction of the tensor-core peak a Triton prefill tile reaches (0..1];
    0.42, fitted by benchmarks/fit_hybrid_sim.py on the 8 prefill-alone rows of the H200 run of
    benchmarks/bench_hybrid.py of the eighth session (2026-11-26 21:32 UTC, call 4 in
    docs/PERFORMANCE.md; the pipelined prefill tile). The value before, 0.26, was fitted at
    07:16 UTC on the tile before pipelining and was 59% too slow on these rows; held out, the
    serial rows went from +25.7% to -0.2% median error (worst -24.7%), streams from +13.7% to
    -5.7%.
    gluon_over_triton_prefill: how much faster the Gluon prefill tile runs than the Triton tile
    where the kernel runs it (gluon_prefill_tile), >= 1; its tiles get prefill_efficiency x this
    (wgmma_prefill_efficiency, capped at 1), so a fit of prefill_efficiency on either kernel's
    rows moves both. 1.116: the median of the Gluon tile's speed over the Triton tile's in one
    process on the four prefill-only batches of call 2 of the nineteenth session (H100,
    1.041-1.134x; docs/PERFORMANCE.md). Held out, call 4's rows of the Gluon tile (same batches,
    another call; 2048 after 8K / 512 after 4K / 2048 after 16K / 1536 after 12K): +0.7 / -21.5 /
    +5.0 / +22.7% against +12.6 / -13.7 / +17.5 / +37.2% without it (median |error| 15.6% ->
    13.3%, worst 37.2% -> 22.7%); the 512-token chunk, where the Gluon tile gains least, reads
    further off, and the 1536-token chunk was 22% too slow already for the Triton tile. On call
    8's `kvtune bench` rows (hybrid-serial, hybrid-streams and pod beside a 2048-token chunk,
    held out): median |error| 7.9% -> 1.8% (`kvtune fidelity`). Rows
    measured before the nineteenth session ran the Triton tile everywhere: fitting
    prefill_efficiency on such H100/H200 rows at head_dim 128 reads it 11.6% low.
    single_cta_compute_fraction: most of an SM's math one CTA uses (0..1], 0.6.
    one_launch_decode_efficiency: fraction of its two-launch share of the bandwidth a decode task
    gets in a one-launch hybrid kernel (schedule fused or sm-aware) that also holds prefill tiles
    (0..1]; its per-program cap (decode_cta_rate_cap_bytes_per_s) is kept; 1 is the model without
    it. Why: the one kernel carries both code paths, so its CTAs are sized (registers, shared
    memory) for the prefill tile and fewer decode items stream at once than in the dedicated decode
    launch; a lone one runs the same loop at the same rate (the fused launch of the B256 continuous
    mix ended its 16.9 MB decode task, started first, within 1,258 us in call 4: at least 13.4 GB/s,
    where 0.46 x the cap would say 9.2). The prefill tiles are compute-bound and keep their rate.
    Two-launch schedules (serial, streams, partitioned and colocated as modelled) and a launch of
    one kind only are untouched. 0.46, fitted by the same tool on the 9 `fused` rows of the same run
    after the other two (median error +0.7%, worst +31.9%; held out there: pod -15.5% (worst
    -30.5%)); refitted when it became a share of the bandwidth rather than of the rate (it stayed
    0.46). History: 0.53 on the 07:16 run's fused rows (median -28.4% -> -0.1%); tried and not kept
    then: slowing only the tasks that share an SM with the other kind at that moment, and one factor
    on every task of the launch.
    decode_cta_rate_cap_bytes_per_s: most bytes/s one decode program of the hybrid kernel streams
    (`_attend_task`: one K/V tile in flight, as the gathered page id in the same step defeats
    Triton's pipeliner), 1e9 .. 4e12. Used for the decode items of every schedule (serial's and
    streams' decode launch, colocated's decode grid, fused and sm-aware, a decode-only launch)
    except those that run the page-ahead loop (partitioned's decode grid beside prefill tiles, a
    two-launch plan with decode_ahead), which keep decode.py's cap
    (SimConstants.cta_rate_cap_bytes_per_s, not fitted on this kernel: attend_task_decodes). 20 GB/s
    (decode.py's: 40), fitted by the same tool, after prefill_efficiency, on the 2 two-launch rows
    of that run's continuous-batching mix (B256, source=continuous: serial -24.7% -> +1.6%, streams
    -28.9% -> -2.0%): only where one long unsplit decode (33 K tokens, 16.9 MB per KV head) outlasts
    the rest of the step does one program's rate set the time. Held out (calls 5 and 7 of the same
    session, 2026-11-26; never fitted): the continuous mixes' (B256, B64 speculative) decode-alone
    -37.3% -> -3.0% median (worst -44.6% -> -6.7%), serial -33.2% -> -3.7% (-40.7% -> -7.5%),
    streams -35.9% -> -6.1%, colocated -41.6% -> -13.0%; no row of the sweep (many equal decodes,
    whose share of the bandwidth is below any cap from 18 GB/s up: 264 slots x 20 GB/s > 4.2 TB/s)
    more than 0.7 points further off than before, in any variant of calls 4, 5 and 7. Not the 14-17
    GB/s of bytes / step of the longest task: its request's 8 KV-head tasks do not all start at 0
    (head-major order, more tasks than slots), so the last of them streams for less than the step. A
    cap below ~16 GB/s would also slow the sweep's B128 rows (+9% at 15 GB/s), because the model
    gives the decode launch the plan's 2 slots per SM where the GPU holds about 4 of these programs
    (14 K registers, 38 KB each).
    Known limit: the colocated schedule is predicted 6.3% too fast at the median (worst -16%,
    8 rows of that run; -10.4% and -25% before its decode slots beside a prefill program were
    capped at COLOCATED_DECODE_SLOTS, a footprint fact, not a fit), and the partitioned one 57%
    too fast: co-located CTAs of two launches slow each other more than the model's sharing of
    an SM, so rank those on the GPU. On the continuous-batching mixes (held out, call 5) the
    two-launch schedules are within 10% and colocated 11-15% too fast, but fused is 23-32% too
    slow and pod (sm-aware) 15-30% too fast (medians before the decode cap: fused +31.7%, pod
    -19.5%; pod is 3 points further off with it): rank one-launch schedules on those mixes on
    the GPU."""

    prefill_efficiency: float = 0.42
    # The Gluon prefill tile (kernels/prefill_wgmma.py, hybrid_config's choice on sm_90 at
    # head_dim 128 with 128-row tiles, for a prefill launch of one program per task): its speed
    # over the Triton tile's; see gluon_prefill_tile and the class docstring.
    gluon_over_triton_prefill: float = 1.116
    single_cta_compute_fraction: float = 0.6
    one_launch_decode_efficiency: float = 0.46
    decode_cta_rate_cap_bytes_per_s: float = 20e9
    # fp8 caches (e4m3 pages; 16-bit shapes never read these two):
    # fp8_decode_efficiency: the share of a 16-bit decode item's byte rate (bandwidth share and
    # per-program cap alike) an fp8 decode item of the hybrid kernel reaches (0..1]. Its items
    # widen every tile to fp16 where they load it and read V element by element (no -vp loop),
    # so an fp8 item takes about as long per token as a 16-bit one although it reads half the
    # bytes. 1 is the bytes-only model.
    # fp8_tile_prefill_efficiency: the share of its 16-bit math rate a prefill tile keeps when
    # it widens e4m3 where it loads it (0..1]: only above hybrid_plan.PREFILL_WIDEN_MAX_BYTES,
    # where the step makes no 16-bit copy of the prefill pages.
    # Both fitted by `benchmarks/fit_hybrid_sim.py --fp8` on the H200 rows of
    # benchmarks/bench_hybrid_fp8.py in the twelfth session's call 3 (docs/PERFORMANCE.md): 0.50
    # on the 6 `serial fp8` rows (median error -20.4% -> -0.1%), then 0.73 on the 6 `serial
    # fp8-tile` rows (-34.9% -> -0.1%). Held out, the colocated rows: fp8 -29.2% -> -15.8%
    # (worst -53.8% -> -23.7%), fp8-tile -48.1% -> -21.1%; colocated bf16 reads -6.9% on the
    # same batches (the co-location limit of the docstring above).
    fp8_decode_efficiency: float = 0.5
    fp8_tile_prefill_efficiency: float = 0.73

    def __post_init__(self) -> None:
        for name in ("prefill_efficiency", "single_cta_compute_fraction",
                     "one_launch_decode_efficiency", "fp8_decode_efficiency",
                     "fp8_tile_prefill_efficiency"):
            v = getattr(self, name)
            # NaN fails both comparisons, so it is refused too.
            if not (isinstance(v, (int, float)) and 0 < v <= 1):
                raise ValueError(f"{name}: {v!r} out of range; allowed: (0, 1]")
        v = self.decode_cta_rate_cap_bytes_per_s
        if not (isinstance(v, (int, float)) and 1e9 <= v <= 4e12):
            raise ValueError(f"decode_cta_rate_cap_bytes_per_s: {v!r} out of range; "
                             "allowed: 1e9 .. 4e12 bytes/s")

    @property
    def wgmma_prefill_efficiency(self) -> float:
        """The Gluon prefill tile's fraction of the tensor-core peak (0..1]."""
        return min(1.0, self.prefill_efficiency * self.gluon_over_triton_prefill)


@dataclass(frozen=True)
class HybridSimResult:
    time_us: float
    prefill_us: float  # end of the last prefill task
    decode_us: float  # end of the last decode task
    merge_us: float
    start_us: np.ndarray  # per task, dispatch order of `kind`
    end_us: np.ndarray
    sm: np.ndarray
    kind: np.ndarray  # 1 prefill, 0 decode
    slot: np.ndarray  # per task, its slot within its SM (0 .. CTAs per SM - 1)


def hybrid_task_ids(plan: HybridPlan, shape: AttentionShape) -> dict:
    """{request, split, kv_head, keys}: [tasks] int64 arrays in hybrid_tasks' order (prefill tasks
    tile-major, a tile's KV heads together; then decode tasks head-major). request: batch index;
    keys: the task's key tokens. What the SM timeline labels each simulated task with."""
    H = shape.num_kv_heads
    request = [np.repeat(plan.tile_request, H)]
    split = [np.repeat(plan.tile_split, H)]
    head = [np.tile(np.arange(H), plan.num_prefill_tiles)]
    keys = [np.repeat(plan.tile_kv_end - plan.tile_kv_start, H)]
    dp = plan.decode_plan
    if dp is not None:
        items = dp.work_request.shape[0]
        request.append(np.tile(plan.decode_requests[dp.work_request], H))
        split.append(np.tile(dp.work_split, H))
        head.append(np.repeat(np.arange(H), items))
        keys.append(np.tile(dp.item_tokens(), H))
    return {name: np.concatenate(parts).astype(np.int64)
            for name, parts in (("request", request), ("split", split), ("kv_head", head),
                                ("keys", keys))}


def hybrid_tasks(plan: HybridPlan, shape: AttentionShape, widen_pages: int):
    """(kind, flops, bytes, rows) float64 arrays: prefill tasks (tile-major), then decode tasks.
    widen_pages: the pages of the step's 16-bit copy of an fp8 cache's prefill pages (0: none);
    with a copy, tiles read 16-bit bytes."""
    H, D = shape.num_kv_heads, shape.head_dim
    per_tok = shape.kv_bytes_per_token_per_head
    keys = (plan.tile_kv_end - plan.tile_kv_start).astype(np.float64)
    tiles_of = np.bincount(plan.tile_request, weights=(plan.tile_split == 0).astype(float),
                           minlength=plan.batch_size)
    p_flops = 4.0 * plan.prefill_block_m * keys * D
    # fp8 caches: prefill tiles read the 16-bit copy of their pages (kernels/hybrid.py).
    p_per_tok = 2 * D * DTYPE_BYTES[shape.dtype] if widen_pages else per_tok
    p_bytes = keys * p_per_tok / np.maximum(tiles_of[plan.tile_request], 1)
    kinds = [np.ones(plan.num_prefill_tasks)]
    flops = [np.repeat(p_flops, H)]
    nbytes = [np.repeat(p_bytes, H)]
    rows = [np.full(plan.num_prefill_tasks, float(plan.prefill_block_m))]
    dp = plan.decode_plan
    if dp is not None:
        q = plan.q_lens[plan.decode_requests][dp.work_request]
        r = np.maximum(16, q * shape.group_size).astype(np.float64)
        k = dp.item_tokens().astype(np.float64)
        kinds.append(np.zeros(dp.num_tasks))
        flops.append(np.tile(4.0 * r * k * D, H))
        nbytes.append(np.tile(k * per_tok, H))
        rows.append(np.tile(r, H))
    return (np.concatenate(kinds), np.concatenate(flops), np.concatenate(nbytes),
            np.concatenate(rows))


# Device presets with sm_90 (Hopper) SMs (hybrid_policies.preset_key).
HOPPER_PRESETS = ("h100", "h200", "h20")


def gluon_prefill_tile(plan: HybridPlan, shape: AttentionShape, device: DeviceSpec,
                       sixteen_bit_pages: bool) -> bool:
    """Whether kernels/hybrid.py runs this plan's prefill tiles through the Gluon tile
    (HybridConfig.prefill_wgmma, hybrid_config): a Hopper device, 16-bit pages (a 16-bit cache
    or an fp8 cache's 16-bit prefill copy), and the kernel's own choice of plan and shape
    (kernels/hybrid_plan.py gluon_prefill_chosen)."""
    return (preset_key(device) in HOPPER_PRESETS and sixteen_bit_pages
            and gluon_prefill_chosen(plan, shape.head_dim))


def simulate_hybrid(plan: HybridPlan, shape: AttentionShape, device: DeviceSpec,
                    constants: SimConstants = DEFAULT_CONSTANTS,
                    hybrid: HybridSimConstants = HybridSimConstants(),
                    widen_prefill: bool | None = None,
                    decode_kernel: bool | None = None,
                    decode_launch_order: str | None = None) -> HybridSimResult:
    """Predict the time of `plan` on `device` (module docstring). widen_prefill: whether an fp8
    step copies its prefill pages to 16 bits first (None: as the kernel decides,
    kernels/hybrid_plan.py `widened_prefill_pages`; False: the tiles widen where they load).
    decode_kernel: whether single-token decodes run kernels/decode.py (None: as the kernel
    decides, hybrid_plan.decodes_through_decode_kernel; False: the hybrid kernel's items, as
    every step ran before commit 73208f6 of the thirteenth session; True: decode.py wherever
    hybrid_plan.decode_kernel_allowed, as prepare_hybrid(decode_kernel=True) runs it).
    decode_launch_order: the order the decodes through kernels/decode.py start in
    (kernels.plan.LAUNCH_ORDERS; None: the product's, product_launch_order, as prepare_hybrid
    launches them; "plan" for rows timed before the thirtieth session). The hybrid kernel's own
    decode items always start head-major."""
    via_decode_kernel = decodes_through_decode_kernel(plan, decode_kernel)
    if decode_launch_order is not None:
        check_launch_order(decode_launch_order)
    widen_pages = widened_prefill_pages(plan, shape) if widen_prefill is not False else 0
    kind, flops, nbytes, rows = hybrid_tasks(plan, shape, widen_pages)
    if shape.kv_is_fp8:  # the fp8 terms: slower per byte, so priced as more bytes / more math
        # Decodes through kernels/decode.py stream e4m3 as its model says (fp8_stream_efficiency
        # of SimConstants); the hybrid kernel's items at fp8_decode_efficiency.
        dec_eff = (constants.fp8_stream_efficiency if via_decode_kernel
                   else hybrid.fp8_decode_efficiency)
        nbytes = np.where(kind == 0, nbytes / dec_eff, nbytes)
        if not widen_pages:
            flops = np.where(kind == 1, flops / hybrid.fp8_tile_prefill_efficiency, flops)
    n = kind.shape[0]
    ctas = min(plan.ctas_per_sm, device.max_ctas_per_sm)
    sms = device.sm_count
    efficiency = (hybrid.wgmma_prefill_efficiency
                  if gluon_prefill_tile(plan, shape, device, widen_pages > 0 or not shape.kv_is_fp8)
                  else hybrid.prefill_efficiency)
    sm_flops = tensor_flops_per_s(device) / sms * efficiency
    bw = device.hbm_bytes_per_s * constants.hbm_efficiency
    start = np.zeros(n)
    end = np.zeros(n)
    where = np.zeros(n, dtype=np.int64)
    slot_of = np.zeros(n, dtype=np.int64)
    P = int((kind == 1).sum())
    # Per-task streaming cap: the decode items that run `_attend_task` stream at the hybrid
    # kernel's own per-program rate; prefill tiles and page-ahead decode items at decode.py's.
    cap = np.full(n, float(constants.cta_rate_cap_bytes_per_s))
    if attend_task_decodes(plan, decode_kernel=via_decode_kernel):
        cap[P:] = hybrid.decode_cta_rate_cap_bytes_per_s
    elif via_decode_kernel and plan.decode_plan is not None:
        # Decodes through kernels/decode.py stream at the cap sim_model gives that launch (the
        # reference cap scaled by the shape and by the CTAs per SM it runs at), as a
        # decode-only step does; the raw reference cap made a long unsplit decode of a
        # continuous-batching step 15-29% faster than the GPU (twenty-first session).
        cap[P:] = decode_launch_cap(plan.decode_plan, shape, device, constants)

    def run(queue_fn, t0: float, decode_rate: float = 1.0) -> float:
        """Event loop from time t0 until queue_fn(sm, slot of that SM) has nothing left and every
        slot is idle; decode tasks get decode_rate x their share of the bandwidth, their cap kept
        (one_launch_decode_efficiency: decode_scaled_rates)."""
        slot_task = np.full(sms * ctas, -1)
        left = np.zeros(n)  # remaining fraction of each task
        ready_at = np.zeros(n)
        t = t0
        while True:
            for s in np.flatnonzero(slot_task < 0):
                task = queue_fn(s % sms, s // sms)
                if task is None:
                    break
                slot_task[s] = task
                start[task], where[task], left[task] = t, s % sms, 1.0
                slot_of[task] = s // sms
                ready_at[task] = t + constants.cta_start_us * 1e-6
            running = slot_task[slot_task >= 0]
            if running.size == 0:
                return t
            active = running[ready_at[running] <= t + 1e-15]
            if active.size == 0:
                t = float(ready_at[running].min())
                continue
            sm_of = where[active]
            rows_on_sm = np.bincount(sm_of, weights=rows[active], minlength=sms)
            count_on_sm = np.bincount(sm_of, minlength=sms)
            usable = np.minimum(1.0, count_on_sm * hybrid.single_cta_compute_fraction)
            compute = sm_flops * usable[sm_of] * rows[active] / rows_on_sm[sm_of]
            per_task_bw = np.full(active.size, np.inf)  # a task with no bytes needs no rate
            streams = nbytes[active] > 0
            if streams.any():
                per_task_bw[streams] = decode_scaled_rates(bw, cap[active[streams]],
                                                           kind[active[streams]] == 0,
                                                           decode_rate)
            dur = np.maximum(flops[active] / compute, nbytes[active] / per_task_bw)
            finish = t + left[active] * dur
            waiting = running[ready_at[running] > t + 1e-15]
            t_next = float(finish.min())
            if waiting.size:
                t_next = min(t_next, float(ready_at[waiting].min()))
            left[active] -= (t_next - t) / dur
            t = t_next
            done = active[left[active] <= 1e-9]
            for task in done:
                end[task] = t
                slot_task[slot_task == task] = -1

    def from_list(order):
        it = iter(order)
        return lambda sm, slot: next(it, None)

    launch = constants.launch_us * 1e-6
    # One launch holding both kinds: its decode tasks run in CTAs sized for the prefill tile.
    one_launch_rate = hybrid.one_launch_decode_efficiency if 0 < P < n else 1.0
    pre_ids = np.arange(P)
    dec_ids = P + decode_start_order(plan, via_decode_kernel, decode_launch_order)
    if plan.schedule == "serial":
        t = run(from_list(pre_ids), 0.0) + (launch if P else 0.0)
        t = run(from_list(dec_ids), t) + (launch if n > P else 0.0)
    elif plan.schedule in ("streams", "fused", "partitioned"):  # partitioned: as streams
        if plan.schedule == "fused":
            keys = (plan.tile_kv_end - plan.tile_kv_start).astype(np.float64)
            length = np.concatenate([np.repeat(keys, shape.num_kv_heads),
                                     nbytes[P:] / shape.kv_bytes_per_token_per_head])
            order = np.argsort(-length, kind="stable")
        else:
            order = np.concatenate([pre_ids, dec_ids])
        launches = 1 if plan.schedule == "fused" else (P > 0) + (n > P)
        rate = one_launch_rate if plan.schedule == "fused" else 1.0
        t = run(from_list(order), 0.0, rate) + launches * launch
    elif plan.schedule == "colocated":
        queue = {"p": pre_ids, "d": dec_ids}  # each kind's tasks in the order they start
        nxt = {"p": 0, "d": 0}

        def take(kind_first: str):
            for k in (kind_first, "d" if kind_first == "p" else "p"):
                if nxt[k] < queue[k].size:
                    nxt[k] += 1
                    return int(queue[k][nxt[k] - 1])
            return None

        beside = COLOCATED_DECODE_SLOTS[plan.prefill_block_m]

        def pick_colocated(sm, slot):
            # Beside a prefill program only `beside` decode programs fit (registers and shared
            # memory of the two footprints); the SM's further slots open to the decodes once no
            # prefill tile is left to start.
            if slot > beside and nxt["p"] < P:
                return None
            return take("p" if slot == 0 else "d")

        t = run(pick_colocated, 0.0) + ((P > 0) + (n > P)) * launch
    else:
        rp, rd = plan.sm_ratio()
        tickets = np.zeros(sms, dtype=np.int64)
        nxt = {"p": 0, "d": P}
        issued = [0]

        def pick(sm, slot):
            if issued[0] >= n:
                return None
            issued[0] += 1
            want_p = tickets[sm] % (rp + rd) < rp
            tickets[sm] += 1
            if (want_p and nxt["p"] < P) or nxt["d"] >= n:
                nxt["p"] += 1
                return nxt["p"] - 1
            nxt["d"] += 1
            return nxt["d"] - 1

        t = run(pick, 0.0, one_launch_rate) + launch
    merge_us = 0.0
    split_rows = _merged_rows(plan)
    if split_rows:
        H, D = shape.num_qo_heads, shape.head_dim
        mb = split_rows[1] * H * (D * FLOAT32_BYTES + FLOAT32_BYTES) \
            + split_rows[0] * H * D * DTYPE_BYTES[shape.dtype]
        merge_us = constants.launch_us + constants.merge_fixed_us + mb / bw * 1e6
    # fp8 caches: one launch widens the prefill requests' pages first (1 byte read, 2 written
    # per element), before either kind starts.
    widen_us = 0.0
    if widen_pages:
        elems = 2 * widen_pages * shape.page_size * shape.num_kv_heads * shape.head_dim
        widen_us = constants.launch_us + elems * (1 + DTYPE_BYTES[shape.dtype]) / bw * 1e6
    total_us = t * 1e6 + merge_us + widen_us
    return HybridSimResult(
        time_us=total_us,
        prefill_us=float(end[:P].max() * 1e6) if P else 0.0,
        decode_us=float(end[P:].max() * 1e6) if n > P else 0.0,
        merge_us=merge_us, start_us=start * 1e6, end_us=end * 1e6, sm=where, kind=kind,
        slot=slot_of)


def decode_start_order(plan: HybridPlan, via_decode_kernel: bool,
                       launch_order: str | None = None) -> np.ndarray:
    """Positions (0 .. decode tasks - 1, int64) of hybrid_tasks' head-major decode tasks in the
    order they start: kernels/decode.py's launch order for decodes through it (launch_order;
    None: product_launch_order of the decode plan), head-major for the hybrid kernel's items."""
    dp = plan.decode_plan
    if dp is None:
        return np.zeros(0, dtype=np.int64)
    if not via_decode_kernel:
        return np.arange(dp.num_tasks, dtype=np.int64)
    order = product_launch_order(dp) if launch_order is None else launch_order
    item, head = launch_tasks(dp, order)
    return head * dp.num_items + item


def attend_task_decodes(plan: HybridPlan, decode_kernel: bool | None = None) -> bool:
    """Whether the plan's decode items run kernels/hybrid.py's `_attend_task` loop (one K/V tile
    in flight) rather than its page-ahead loop (run_hybrid): a one-launch kernel (fused,
    sm-aware) with prefill tiles always does; decodes through kernels/decode.py
    (decode_kernel; None: hybrid_plan.decodes_through_decode_kernel) never; `partitioned`
    beside prefill tiles never (its persistent decode grid
    is page-ahead); any other decode launch unless the plan asks for page-ahead
    (HybridPlan.decode_ahead)."""
    if decodes_through_decode_kernel(plan, decode_kernel):
        return False  # kernels/decode.py's own launch
    if plan.schedule in ONE_LAUNCH:
        return True
    if plan.schedule == "partitioned" and plan.num_prefill_tasks and plan.num_decode_tasks:
        return False
    return not plan.decode_ahead


def stream_rates(bw_bytes_per_s: float, caps_bytes_per_s: np.ndarray) -> np.ndarray:
    """Bytes/s of each of the tasks streaming together: equal shares of bw_bytes_per_s, each at
    most its cap, the share a capped task leaves going to the others (water-filling). With one
    cap for all this is min(bw / n, cap), bit for bit. caps: [n >= 1] bytes/s, > 0."""
    n = caps_bytes_per_s.size
    fair = bw_bytes_per_s / n
    if caps_bytes_per_s.min() >= fair:  # nobody capped: the common, saturated case
        return np.full(n, fair)
    c = np.sort(caps_bytes_per_s)
    # Level if the k smallest caps bind: what they leave, shared by the other n - k tasks.
    spent = np.concatenate(([0.0], np.cumsum(c)[:-1]))
    level = (bw_bytes_per_s - spent) / (n - np.arange(n))
    unbound = np.flatnonzero(c >= level)
    if unbound.size == 0:  # every task at its cap, bandwidth to spare
        return caps_bytes_per_s.astype(np.float64)
    return np.minimum(caps_bytes_per_s, level[unbound[0]])


def decode_scaled_rates(bw_bytes_per_s: float, caps_bytes_per_s: np.ndarray,
                        is_decode: np.ndarray, decode_rate: float) -> np.ndarray:
    """stream_rates with the decode tasks' bandwidth share scaled by decode_rate (0..1], their
    cap kept: min(cap, decode_rate x share). Why the share and not the cap: in a one-launch
    kernel a decode item runs the same `_attend_task` loop, but in CTAs sized for the prefill
    tile, so fewer decode programs stream at once (less of the bandwidth) while a lone one keeps
    its per-program rate (HybridSimConstants.one_launch_decode_efficiency gives the evidence).
    decode_rate 1: stream_rates, bit for bit."""
    if decode_rate == 1.0:
        return stream_rates(bw_bytes_per_s, caps_bytes_per_s)
    f = np.where(is_decode, decode_rate, 1.0)
    return stream_rates(bw_bytes_per_s, caps_bytes_per_s / f) * f


def _merged_rows(plan: HybridPlan) -> tuple[int, int] | None:
    """(output rows merged, partial rows read) or None when nothing is split."""
    out_rows = partial = 0
    dp = plan.decode_plan
    if dp is not None and (dp.splits > 1).any():
        q = plan.q_lens[plan.decode_requests]
        s = dp.splits > 1
        out_rows += int(q[s].sum())
        partial += int((q[s] * dp.splits[s]).sum())
    first = (plan.tile_split == 0) & (plan.tile_splits > 1)
    if first.any():
        tok = (plan.tile_q_end - plan.tile_q_start)[first]
        out_rows += int(tok.sum())
        partial += int((tok * plan.tile_splits[first]).sum())
    return (out_rows, partial) if out_rows else None


__all__ = ["HybridSimConstants", "HybridSimResult", "attend_task_decodes",
           "decode_scaled_rates", "hybrid_tasks", "simulate_hybrid", "stream_rates"]

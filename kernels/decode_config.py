"""Compile-time configurations of the stage-1 decode kernel (kernels/decode.py), per shape.

A configuration is chosen from the shape (head_dim, the KV element size, the KV head count, the
query heads per KV head) and
the occupancy the plan assumes (plan.ctas_per_sm), never from kv_lens or the batch size: kv_lens
change every decode step, and a configuration that followed them would recompile and would change
a request's arithmetic with what else is in the batch. How the table was chosen:
docs/KERNEL_NOTES.md; `benchmarks/bench_kernels.py --sections shape-configs` times every
candidate of `CANDIDATES` per shape and prints the table it would pick.

The choice, explicitly (`config_key` then `CONFIG_TABLE`):

  regime "one-per-sm"  when the plan assumes one program per SM (plan.ctas_per_sm == 1) or the
                       shape has a single KV head (num_kv_heads == 1, e.g. llama3-70b-tp8): a work
                       item is then one program, and the plans of such shapes (fixed 2048-token
                       chunks: 128 programs at 262,144 tokens for B = 8..64) leave about one
                       program per SM, where the per-program rate is everything. These get the
                       page-ahead variants (head_dim 128, 16-bit: 8 warps, 128 tokens, one
                       tile in flight while one is computed; measured).
  regime "many-large-group"  otherwise, when G = num_qo_heads / num_kv_heads > 4 (qwen2.5-7b,
                       yi-6b, 64 q / 4 KV): a step carries 2-4x the arithmetic of G <= 4, so a
                       page-ahead variant keeps the next tiles in flight during it (measured on
                       G = 16 at head_dim 128).
  regime "many"        otherwise: several programs per SM hide each other's latency; for 16-bit
                       caches the measured variants with about 64 KB of K+V per step.

  key = (head_dim, KV element bytes, regime); element bytes 4 are the float32 test inputs.

Then, on a GPU and for one program per task, an entry with a SHALLOW_TWIN (one pipeline stage
fewer, so more programs per SM and the same output bits) gives way to it unless the plan's
tasks are of one length and fill the entry's waves better, or one program per SM would finish
them in about one long task's time (`occupancy_twin`, `fits_one_task`; docs/KERNEL_NOTES.md
"Stages by wave fill: shallow twins" and "The twin rule on skew80 fixed-2048"). The entry then
in use may give way to its register-capped twin (CAPPED_TWIN: the same kernel under a ptxas
register cap, one program more per SM, same bits; head_dim 256, fp8 head_dim 128 and the
one-KV-head 16-bit twin): a costly twin where it holds the whole launch in one wave and the
entry would finish its late tasks more than CAPPED_TWIN_SLACK longest tasks after the start
(`in_order_finish`); a twin whose programs run about as fast as the entry's (CAPPED_TWIN_COST
at most CAPPED_TWIN_MAX_COST) wherever the entry's slots are all taken, except, beyond its
first wave, equal tasks that fill the entry's waves better and tasks of many lengths holding
more than CAPPED_BACKFILL_MAX_ROUNDS rounds of work (`capped_twin`; docs/KERNEL_NOTES.md "A
register-capped twin for head_dim 256" and "Register-capped twins for fp8 and one KV head").
Those rules were set on launches in the plan's order. The product launches static plans longest
first (kernels.plan.product_launch_order); there tasks of many lengths, and equal tasks on an
entry of one program per SM, take `longest_first_config`: the first of entry -> shallow twin ->
capped twin whose slots finish the tasks, handed out longest first, in about one long task's
time, else the entry (docs/KERNEL_NOTES.md "Longest first in the product"). Where the entry runs
one program per SM and would leave its short tasks queued on the SMs its long ones leave,
`side_launch_split` runs the long tasks under the entry and the short ones as a second launch
of its shallow twin beside it (kernels/decode.py DecodeLaunch.side; docs/KERNEL_NOTES.md "The
side split").
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass, replace

import numpy as np
import torch

from kvtune.kernels.plan import check_launch_order

REGIMES = ("many", "many-large-group", "one-per-sm")
LARGE_GROUP = 4  # G above this: "many-large-group"
HEAD_DIMS = (64, 128, 256)


@dataclass(frozen=True)
class KernelConfig:
    """Compile-time choices of the stage-1 kernel.

    block_n: tokens per inner step (a power of two, 16..256). num_warps: warps per program.
    num_stages: software-pipelining depth of the K/V loads (1..5).
    prefetch: software-pipeline the K/V loads by hand through registers (block i+1 loaded
        while block i is computed) instead of Triton's shared-memory pipeliner.
    page_ahead: load the page ids one block ahead so that Triton's pipeliner can keep
        num_stages - 1 K/V tiles in flight (needs num_stages >= 3 to double-buffer); ignored
        with prefetch, which already does it.
    v_widen: fp8 caches only (ignored for 16-bit ones): load V as int32 words (4 e4m3 each,
        16-byte vector loads) and widen it to fp16 in the load's layout, so the P.V product
        reads an fp16 tile through ldmatrix instead of one byte per element from shared memory
        (docs/KERNEL_NOTES.md "FP8 V widened before the product").
    warp_split: 1, or 2/4/8: each step's block_n tokens are cut into this many contiguous
        slices with one online softmax each (batched products, the warps on the slice axis),
        merged once per task, so no warp waits on another's row max inside the loop
        (block_n / warp_split >= 16; page ids one block ahead; not with prefetch or v_widen).
    v_pairs: fp8 caches only (ignored for 16-bit ones; needs page_ahead, not with prefetch,
        v_widen or warp_split): read V as int16 pairs of e4m3 elements, so the P.V product's
        operand reaches registers through the 16-bit transposing load instead of one byte-wide
        shared-memory load per element, and split each pair in registers (one byte permute and
        two packed conversions per four elements) into an even-column and an odd-column product
        (label -vp; docs/KERNEL_NOTES.md "FP8 V as element pairs").
    max_registers: None, or a per-thread register cap 64..255 passed to the compiler (Triton's
        maxnreg): fewer registers per thread can fit one more program per SM, at the price of
        spills (label -rN).
    flat_per_sm: 0, or 1..8: run stage 1 as flat_per_sm x SM-count persistent programs, each a
        fixed list of whole tasks walked as one loop over their tiles, so the next task's first
        tile is loaded while the current one ends (kernels/decode_flat.py; label -flN; needs
        page_ahead, not with prefetch, v_widen or warp_split). 16-bit: the bits of the same
        configuration without it (H100-checked); fp8 -vp: other bits on the GPU.
    page_ids_l2: at the start of each task, prefetch the task's page ids into L2 (one
        `prefetch.global.L2` per 128-byte line), so the loop's one-block-ahead id load hits L2
        instead of waiting on DRAM behind the program's own K/V tiles (label -l2; GPU only, the
        interpreter runs without it; not with flat_per_sm, whose loop crosses tasks).
    """

    block_n: int
    num_warps: int
    num_stages: int
    prefetch: bool = False
    page_ahead: bool = False
    v_widen: bool = False
    warp_split: int = 1
    max_registers: int | None = None
    v_pairs: bool = False
    flat_per_sm: int = 0
    page_ids_l2: bool = False

    def __post_init__(self) -> None:
        if self.block_n not in (16, 32, 64, 128, 256):
            raise ValueError(f"block_n: {self.block_n} not allowed; allowed: 16, 32, 64, 128, 256")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps: {self.num_warps} not allowed; allowed: 1, 2, 4, 8, 16")
        if not 1 <= self.num_stages <= 5:
            raise ValueError(f"num_stages: {self.num_stages} out of range; allowed: 1..5")
        if self.warp_split not in (1, 2, 4, 8):
            raise ValueError(f"warp_split: {self.warp_split} not allowed; allowed: 1, 2, 4, 8")
        if self.warp_split > 1 and self.block_n // self.warp_split < 16:
            raise ValueError(f"warp_split: {self.warp_split} leaves {self.block_n // self.warp_split}"
                             " tokens per slice; allowed: block_n / warp_split >= 16")
        if self.max_registers is not None and not 64 <= self.max_registers <= 255:
            raise ValueError(f"max_registers: {self.max_registers} out of range; allowed: "
                             "64..255 or None")
        if self.warp_split > 1 and (self.prefetch or self.v_widen):
            raise ValueError("warp_split: allowed only without prefetch and v_widen")
        if self.v_pairs and (not self.page_ahead or self.prefetch or self.v_widen
                             or self.warp_split > 1):
            raise ValueError("v_pairs: allowed only with page_ahead, and without prefetch, "
                             "v_widen and warp_split")
        if not 0 <= self.flat_per_sm <= 8:
            raise ValueError(f"flat_per_sm: {self.flat_per_sm} out of range; allowed: 0..8")
        if self.flat_per_sm and (not self.page_ahead or self.prefetch or self.v_widen
                                 or self.warp_split > 1):
            raise ValueError("flat_per_sm: allowed only with page_ahead, and without prefetch, "
                             "v_widen and warp_split")

        if self.page_ids_l2 and self.flat_per_sm:
            raise ValueError("page_ids_l2: allowed only without flat_per_sm")

    @classmethod
    def from_label(cls, label: str) -> "KernelConfig":
        """The configuration a `label()` names: bn128-w4-s3-pa -> KernelConfig(128, 4, 3,
        page_ahead=True); ValueError (naming the form) for anything else."""
        m = re.fullmatch(r"bn(\d+)-w(\d+)-s(\d+)((?:-pf|-pa|-vw|-vp|-l2)*)(?:-ws(\d))?(?:-r(\d+))?"
                         r"(?:-fl(\d))?", label)
        if not m:
            raise ValueError(f"config: {label!r} not a label like bn128-w4-s3-pa "
                             "(suffixes -pf, -pa, -vw, -vp, -l2, -ws4, -r168, -fl2)")
        return cls(int(m[1]), int(m[2]), int(m[3]), prefetch="-pf" in m[4],
                   page_ahead="-pa" in m[4], v_widen="-vw" in m[4],
                   warp_split=int(m[5] or 1), max_registers=int(m[6]) if m[6] else None,
                   v_pairs="-vp" in m[4], flat_per_sm=int(m[7] or 0),
                   page_ids_l2="-l2" in m[4])

    def label(self) -> str:
        """Short text for tables: bn128-w4-s2 (+ -pf for the register prefetch, -pa for the page
        ids one block ahead, -vw for fp8 V widened before the product, -vp for fp8 V read as
        element pairs, -l2 for the page ids prefetched into L2, -ws4 for 4 token
        slices per step, -r168 for a register cap, -fl2 for the flattened persistent loop at two
        programs per SM)."""
        return (f"bn{self.block_n}-w{self.num_warps}-s{self.num_stages}"
                + ("-pf" if self.prefetch else "") + ("-pa" if self.page_ahead else "")
                + ("-vw" if self.v_widen else "") + ("-vp" if self.v_pairs else "")
                + ("-l2" if self.page_ids_l2 else "")
                + (f"-ws{self.warp_split}" if self.warp_split > 1 else "")
                + (f"-r{self.max_registers}" if self.max_registers else "")
                + (f"-fl{self.flat_per_sm}" if self.flat_per_sm else ""))


def _c(block_n, warps, stages, prefetch=False, page_ahead=False) -> KernelConfig:
    return KernelConfig(block_n, warps, stages, prefetch, page_ahead)


def _pa(block_n, warps, stages) -> KernelConfig:
    return KernelConfig(block_n, warps, stages, page_ahead=True)


def _vp(block_n, warps, stages) -> KernelConfig:
    return KernelConfig(block_n, warps, stages, page_ahead=True, v_pairs=True)


def _vp_l2(block_n, warps, stages) -> KernelConfig:
    """_vp with the task's page ids prefetched into L2 (label -l2)."""
    return KernelConfig(block_n, warps, stages, page_ahead=True, v_pairs=True, page_ids_l2=True)


def _cap(config: KernelConfig, max_registers: int) -> KernelConfig:
    return replace(config, max_registers=max_registers)


def _ws(block_n, warps, stages, split) -> KernelConfig:
    """Page-ahead with `split` token slices per step, one online softmax each (label -wsN)."""
    return KernelConfig(block_n, warps, stages, page_ahead=True, warp_split=split)


# (head_dim, KV element bytes, regime) -> configuration. Shared memory, registers and K/V tiles
# in flight below are from local sm_90 compiles (triton 3.9 TTGIR, ptxas -v; docs/KERNEL_NOTES.md
# "Config table"; benchmarks/compile_survey.py). "measured" = chosen by a GPU sweep
# (benchmarks/bench_kernels.py --sections shape-configs); "predicted" = not timed yet.
# 16-bit "many" (G <= 4): measured (H200 sweep of 2026-11-26, runs 1-3, and again in the
#   H200 run of 07:07 UTC: llama3-8b uniform B=64 fixed-2048 bn128-w4-s2 275.2 us vs
#   bn64-w4-s4-pa 278.9), about 64 KB of K+V per step, one tile at a time.
# 16-bit "many-large-group" (G > 4, several KV heads): head_dim 128 measured (H200, 2026-11-26
#   07:07 UTC, 4.288 TB/s copy): g16 uniform B=64 fixed-2048 (3.88 programs/SM) bn64-w4-s4-pa
#   159.1 us vs bn128-w4-s2 180.6 (FlashInfer 148.4), skew80 B=256 balanced-2x 177.0 vs 171.8:
#   summed 336 vs 352 us. With G = 7..16 rows per program a step does 2-4x the arithmetic of a
#   G = 4 step, so the tile in flight during it (page-ahead) pays. qwen2.5-7b (G = 7) and yi-6b
#   (G = 8) ran 0.83-0.86x of FlashInfer with bn128-w4-s2 at 3.88 programs/SM: predicted to gain
#   alike. head_dim 64 / 256: predicted, the "many" entries until a sweep says otherwise.
# 16-bit "one-per-sm": head_dim 128 measured (same run): bn128-w8-s3-pa, summed 379.6 us vs
#   543.9 for bn64-w4-s4-pa; llama3-70b-tp8 uniform B=64 fixed-2048 45.7 us (0.686 of copy,
#   FlashInfer 49.3) vs 119.5, FA3's plan on llama3-8b 275.1 us vs 371.0. 8 warps issue the
#   gathers of a 128-token step twice as fast, and 112 registers leave room for 2 programs by
#   registers (136 KB of shared memory: 1). head_dim 64 / 256: predicted (page-ahead, 2 tiles in
#   flight; docs/KERNEL_NOTES.md).
# fp8 (1 byte): head_dim 128 "many" measured (same run, before the fp16 products of
#   kernels/decode.py): bn128-w4-s2 summed 698.6 us vs 706.2 for bn128-w4-s3-pa, within 1%;
#   "one-per-sm" measured: bn128-w4-s4-pa. The fp16 products changed the register count
#   (bn128-w4-s2: 255, bn128-w4-s3/s4-pa: 204, no spills), so the next sweep re-decides these.
#   head_dim 64 / 256: predicted page-ahead (the plain variants need 254-255 registers).
# H200 run of 07:31 UTC (4.27 TB/s copy, after the fp16 products; docs/PERFORMANCE.md):
#   16-bit "many" head_dim 128 -> bn64-w4-s4-pa: llama3-8b uniform B=64 balanced-2x (3.9
#     programs/SM) 254.9 us vs 300.9 for bn128-w4-s2 (FlashInfer 254.2), fixed-2048 276.4 vs
#     274.4 (within 1%): summed 531 vs 575 us.
#   fp8 "many" and "one-per-sm" head_dim 128 -> bn128-w4-s3-pa: llama3-8b uniform B=64
#     fixed-2048 220.3 us vs 267.0 (bn128-w4-s2), skew80 B=256 balanced-2x 324.6 vs 353.8;
#     llama3-70b-tp8 48.5-50.8 us vs 51.3-52.4 (bn128-w4-s4-pa).
# H200 run of 10:27 UTC (4.288 TB/s copy; docs/PERFORMANCE.md): with page size 1 (SGLang's
#   token-granular pages) the 16-bit "many" head_dim-128 entry bn64-w4-s4-pa runs at
#   0.86-0.89x FlashInfer with fixed-2048 (0.77-0.90 balanced), where bn128-w4-s2 ran at
#   1.02-1.05x (0.89-1.24) in the 07:31 call: with one token per page the page-ahead gather of
#   64-token tiles does not pay. Pages smaller than SMALL_PAGE keep bn128-w4-s2.
# H100, eighteenth session (docs/PERFORMANCE.md, call 3; FlashInfer on the same plan): page 1,
#   llama3-8b, bn128-w4-s3 (205 registers in the local compile: two programs per SM) computes
#   bn128-w4-s2's bits (168: three per SM) and ran uniform B=64 balanced-2x (512 programs: 1.94
#   waves of two per SM, 1.29 of three) in 364.0 us against 389.4 (FlashInfer 367.7), uniform B=64
#   fixed-2048 in 370.7 against 370.6; s2 was faster on uniform B=8 balanced-2x (320 programs:
#   378.2 against 382.7) and on skew80 B=8 / B=64 balanced-2x (388.0 / 394.2 against 439.6 /
#   399.1). So the page-1 "many" entry is bn128-w4-s3 with bn128-w4-s2 as its SHALLOW_TWIN:
#   occupancy_twin's wave-fill rule picks each case's faster one.
# float32 (4 bytes): the precise tests only, not tuned.
# H100 sweep of the sixteenth session (2026-11-27 14:53 UTC, 3.035 TB/s copy, chunked merge as a
#   programmatic dependent; docs/PERFORMANCE.md "Sixteenth session"), 16 q / 8 KV heads:
#   head_dim 64 "many" -> bn128-w4-s3-pa: skew80 B=8 balanced-2x (2.06 programs/SM) 196.6 us vs
#   253.1 for bn256-w8-s2 (FlashInfer 231-232 on that plan), uniform B=64 fixed-2048 201.8 vs
#   205.9, skew80 B=256 balanced-2x 220.4 vs 240.8; head_dim 256 "many" -> bn32-w4-s3-pa:
#   794.2 vs 863.9 (FlashInfer 784), 725.9 vs 718.7, 785.4 vs 786.7 (summed 2305.5 vs 2369.3;
#   bn32-w4-s2 761.2 on the first but 882.8 on the third). At about two programs per SM the
#   old entries left one tile in flight per program; the new ones keep two (page ahead, three
#   stages). The shape matrix of the same session (call 6) kept the head_dim-64 entry
#   (skew80 B=8 balanced-2x 1.16x FlashInfer, was 0.91x; every other case >= 0.959x) but ran
#   bn32-w4-s3-pa at 760-778 us on uniform batches where bn64-w4-s2 runs 714-719 (0.92-0.96x
#   FlashInfer, was 1.00x): head_dim 256 keeps bn64-w4-s2 and its one miss (skew80 B=8
#   balanced-2x, 0.91x). The "many-large-group" entries at head_dim 64 / 256 were not swept.
# H200, twenty-fifth session (docs/PERFORMANCE.md, calls 2-3): head_dim 64's bn128-w4-s3-pa (three
#   programs per SM: 151 registers, 70 KB in the local compile) ran uniform B=64 balanced-2x (512
#   equal tasks: 1.29 waves of three per SM) at 0.876x FlashInfer, its deeper twin
#   bn128-w4-s4-pa (102 KB: two per SM, 1.94 waves) at 0.995x; every other matrix case was
#   1.04-1.26x with s3. The same pair as at head_dim 128: the deeper one is the entry and
#   s3-pa its SHALLOW_TWIN, so the wave-fill rule keeps s3 for tasks of many lengths (H100,
#   sixteenth session: skew80 B=8 / B=256 balanced-2x 196.6 / 220.4 us against s4's 222.4 /
#   234.7) and, with a wider margin (WAVE_FILL_MARGIN_BY_TWIN), for equal tasks that fill the
#   twin's waves well enough (1,024 and 2,048 programs: s3 6-10% faster on the H200).
_MANY_16 = {64: _pa(128, 4, 4), 128: _pa(64, 4, 4), 256: _c(64, 4, 2)}
_LARGE_GROUP_16 = {64: _c(256, 8, 2), 128: _pa(64, 4, 4), 256: _c(64, 4, 2)}
# H200, thirty-fourth session (docs/PERFORMANCE.md, calls 3-4): the head_dim-256 "one-per-sm"
#   entry bn32-w4-s4-pa had been predicted and never timed. On a shape no rule was set on (8 q /
#   1 KV head at head_dim 256, gemma-2b's) it ran 0.77-0.94x FlashInfer on 6 of 12 matrix cases.
#   bn64-w8-s3-pa, the head_dim-128 entry's shape of step (8 warps, 32 KB of K+V per stage, page
#   ahead; 141 KB of shared memory: one program per SM), ran the one-program-per-SM plans in
#   76.3 / 94.0 / 86.8 us (uniform B=8, skew80 B=64 and B=256 fixed-2048) against 97.5 / 105.8 /
#   120.3 (FlashInfer 79.8 / 85.4 / 93.6); on plans of 272-464 shorter tasks bn32-w4-s3-pa (other
#   bits) was fastest, 76.0-85.7, and bn64-w8-s3-pa 83.6-102.8, so its shallow twin s2-pa (two
#   per SM, same bits) is the second choice there.
_ONE_16 = {64: _pa(128, 4, 4), 128: _pa(128, 8, 3), 256: _pa(64, 8, 3)}
# H200 sweep of 12:19 UTC (docs/PERFORMANCE.md, `--config-kv fp8`, 4.262 TB/s copy): fp8 head_dim 64
#   "many" -> bn128-w4-s3-pa (hd64 uniform B=64 fixed-2048 136.5 us vs 151.2 for bn128-w4-s4-pa;
#   -vw 136.2, within noise, so the plain one), head_dim 256 "many" -> bn64-w4-s3-pa (420.0 vs
#   483.6 for bn32-w4-s4-pa); head_dim 128 keeps bn128-w4-s3-pa in both regimes ("many" 548.0 us
#   summed, -vw 566.0). Widening V before the product (-vw) removes the byte-wise shared loads but
#   not the fp8 gap: every variant stays at 0.29-0.63 of copy on llama3-8b. For "one-per-sm" the
#   sweep preferred bn128-w4-s3-pa-vw (llama3-70b-tp8 48.1 + 47.5 us vs 50.3 + 50.0), but the
#   shape matrix of 12:22 UTC ran it at 89.8-103.2 us on uniform llama3-70b-tp8 batches (where
#   bn128-w4-s3-pa ran 48.3-50.4 in the 12:19 call), so it is not in the table until that is
#   understood.
# Tenth session: V read as element pairs (-vp; docs/KERNEL_NOTES.md "FP8 V as element pairs").
#   Local sm_90 compiles (triton 3.6), head_dim 128 G = 4: bn128-w4-s3-pa 234 registers and 2,944
#   SASS instructions (128 LDS.U8) -> -vp 200 and 1,936 (no byte loads); bn64-w4-s4-pa-vp 128
#   registers and 54 KB of shared memory (4 programs of 4 warps per SM, where the plain entry fits
#   2); bn128-w8-s3-pa-vp 128 registers x 256 threads. head_dim 64 / 256: the entries' -vp twins
#   need 148 / 168 registers (was 168 / 207).
# H200 sweep of 01:05 UTC, 2026-11-27 (docs/PERFORMANCE.md "Tenth session", copy 4.305 TB/s; the
#   plain entries in the same call): head_dim 128 "many" -> bn128-w4-s3-pa-vp (llama3-8b uniform
#   B=64 fixed-2048 172.2 us, skew80 B=256 balanced-2x 232.1; plain 221.1 / 326.5; bn64-w4-s4-pa-vp
#   165.9 / 284.0, bn64-w4-s3-pa-vp 160.5 / 281.8: better on the first, much worse on the
#   second); "one-per-sm" -> bn128-w4-s3-pa-vp (llama3-70b-tp8 37.4 + 36.9 us; plain 50.1 + 49.4;
#   bn128-w8-s3-pa-vp 44.2 + 42.4; bn256-w8-s3-pa-vp 33.8 + 49.6); head_dim 64 "many"
#   bn128-w4-s3-pa-vp 122.0 (plain 139.7), head_dim 256 "many" bn64-w4-s3-pa-vp 293.1 (plain
#   423.5, 0.85 of copy). The head_dim 64 / 256 "one-per-sm" entries are the -vp twins of the
#   previous ones, not timed.
# H200, thirty-first session (docs/PERFORMANCE.md, calls 2-4; FlashInfer 0.5.3's fp8 decode on
#   the same plans, us): head_dim 256 "many" -> bn64-w4-s4-pa-vp (106 KB of shared memory: 2
#   programs per SM) with bn64-w4-s3-pa-vp (3 per SM) as its shallow twin: at page 1 on 512 equal
#   tasks s4 263.5 against s3 338.3 (1.94 waves of two per SM against 1.29 of three), at page 16
#   290-291 both; on 1,024 s3 270.2 against s4 303.1 at page 16 (275.3 / 278.2 at page 1); on
#   skew80 B=64 balanced-2x (720 tasks) s4 299.3 against 355.8, on skew80 B=8 balanced-2x (272,
#   eight more than two per SM) s3 303.0 against 353.0. head_dim 64 keeps bn128-w4-s3-pa-vp: it
#   was faster than bn64-w4-s4-pa-vp on 7 of 8 plans (skew80 balanced-2x B = 8 / 64 / 256 115.2 /
#   130.5 / 130.5 against 131.0 / 155.9 / 158.0), slower only on uniform B=64 balanced-2x (512
#   tasks of 4,096 keys: 117.4 against 93.6, FlashInfer 148.3). There the entry's 148 registers
#   from Triton 3.6 (tenth session) fit three programs per SM, 1.29 waves; under a 120-register
#   cap, the same bits, four (call 5): 94.7 us, and 100.9 against 107.4 on 1,024 tasks, 111.1
#   against 115.8 on skew80 B=8 balanced-2x, 131.3 against 130.8 on skew80 B=64 balanced-2x
#   (-r96, five per SM: 90.5 / 104.4 / 106.9 / 133.2). So the head_dim 64 entry is the capped
#   kernel.
# H200, thirty-third session (docs/PERFORMANCE.md, calls 1-3): fp8 head_dim 256 ran 10-12%
#   slower at pages 2-16 than at 1 and 64; Nsight Compute put it on the loop's wait for the
#   one-block-ahead page-id load (long scoreboard, 5,650 samples of 33,836 at page 4, 1,024 at
#   64), which misses L2 and queues behind the program's own K/V tiles. With the task's page ids
#   prefetched into L2 at its start (-l2) bn64-w4-s4-pa-vp ran uniform B=64 balanced-2x in
#   272.0 / 267.7 / 262.9 / 262.8 us at pages 4 / 16 / 64 / 1 (301.2 / 291.4 / 270.0 / 263.3
#   without), and 5 of 5 other page-16 plans 4-8% faster; its shallow twin 4 of 5 (uniform B=8
#   fixed-2048 268.5 -> 277.4; call 9, three rounds on 1,024 equal tasks of 2,048 keys at B=8
#   and B=64: 271.9-272.9 -> 281.3-283.0, a steady 3.5% loss there, against 2-7% gains on the
#   other four). At head_dim 64 and 128 (fp8) and for 16-bit pages -l2 ran within -1.3..+1.5%
#   (smaller tiles per page id), so only head_dim 256's fp8 entries take it. Thirty-fourth
#   session (calls 1-2): the twin's loss holds with the order reversed at a steady 1,980 MHz
#   (273.4-273.7 against 282.9-283.4 us); Nsight Compute shows the page-id wait halved and the
#   loop waiting on the next tile's shared-memory store and barrier instead. Cause unknown.
_MANY_8 = {64: _cap(_vp(128, 4, 3), 120), 128: _vp(128, 4, 3), 256: _vp_l2(64, 4, 4)}
# H200, thirty-fourth session (docs/PERFORMANCE.md, calls 4, 7, 8): fp8 head_dim 256 with one KV
#   head had run the "many" kernel bn64-w4-s4-pa-vp-l2 (two per SM; never timed there): 3 of 12
#   matrix cases at 1.4x FlashInfer on 2/1/256 (gemma-2-9b at tensor parallelism 8). On that
#   shape (page 16, us) bn128-w8-s3-pa-vp (one per SM: 158 registers x 256 threads, 143 KB)
#   ran uniform B=8 and skew80 B=256 fixed-2048 in 48.4 / 59.3 against 62.8 / 80.7 (FlashInfer
#   86.9 / 108.1), and its two-stage twin under a 128-register cap (two per SM, same bits)
#   ran 264-265 tasks of up to 1,008 keys in 49.6 / 50.2 against 51.2 / 51.9 (FlashInfer 66.8
#   / 72.6), where the entry took 56.2 / 56.9.
_ONE_8 = {64: _vp(128, 4, 4), 128: _vp(128, 4, 3), 256: _vp(128, 8, 3)}
_F32 = {64: _c(64, 4, 2), 128: _c(32, 4, 2), 256: _c(16, 4, 2)}
# Pages of fewer tokens than this use SMALL_PAGE_TABLE where it has an entry.
SMALL_PAGE = 16
# H200, thirtieth session (docs/PERFORMANCE.md, call 5; FlashInfer 0.5.3 on the same plans,
#   us): head_dim 256 at page 1, bn64-w4-s3 493.2 / 494.0 / 494.1 on uniform B = 8 / 64 / 256
#   fixed-2048 (FlashInfer 500.6 / 501.0 / 507.3), 487.7 on uniform B=64 balanced-2x (494.3),
#   506.4 on skew80 B=64 balanced-2x (553.1), where the page-16 entry bn64-w4-s2 ran 526-531
#   on all five (0.94-0.95x FlashInfer on the uniform ones), bn64-w8-s2 502-529, bn32-w4-s2
#   535-657, bn128-w4-s2 663-692, bn128-w8-s2 600-613.
SMALL_PAGE_TABLE: dict[tuple[int, int, str], KernelConfig] = {
    (128, 2, "many"): _c(128, 4, 3),
    (256, 2, "many"): _c(64, 4, 3),
    # H200, thirtieth session (call 8, FlashInfer 0.5.3 on the same plans, us): g16 (G = 16)
    #   at page 1, bn128-w4-s3 137.9 / 140.7 on uniform / skew80 B=8 fixed-2048 (FlashInfer
    #   140.4 / 141.8) and 138.6 on uniform B=64 balanced-2x (162.3), where bn128-w4-s2, the
    #   entry before, ran 153.8 / 156.0 / 144.8 (call 7: 0.91x FlashInfer on the first two);
    #   the same pair as the G = 4 entry, so the same wave-fill twin rule.
    (128, 2, "many-large-group"): _c(128, 4, 3),
}
# Pages of at least LARGE_PAGE tokens use LARGE_PAGE_TABLE where it has an entry: at page 64 a
# 128-token tile is two contiguous runs of 16 KB per KV head, so the page-ahead gathers that
# favour 64-token tiles at page 16 buy nothing. H100 sweep (seventeenth session, llama3-8b page
# 64; docs/PERFORMANCE.md), us, bn128-w8-s3-pa / the page-16 entry bn64-w4-s4-pa / its twin
# bn64-w4-s3-pa / FlashInfer: skew80 B=8 balanced-2x 383.2 / 384.3 / 404.3 / 374.7; skew80 B=64
# balanced-2x 392.3 / 406.1 / 406.5 / 382.9; uniform B=64 balanced-2x 362.2 / 365.5 / 396.7 /
# 362.5. That entry (one program per SM: 136 KB) then ran the H200's page-64 matrix at
# 0.87-0.97x FlashInfer (twenty-fifth session, call 2: 3 of 12 cases >= 0.95), where the
# page-1 pair bn128-w4-s3 (two per SM: 212 registers at page 64) / bn128-w4-s2 (three: 168)
# ran each case at 0.91-1.01x (call 3): the same pair, with the same wave-fill rule, as pages
# below SMALL_PAGE. Not timed on an H100 at page 64 yet (benchmarks/gpu_calls/
# large_page_h100_check.sh). Decode launches only (default_config(decode_launch=True)); the
# hybrid kernels size their decode tiles from the page-16 entry.
LARGE_PAGE = 64
LARGE_PAGE_TABLE: dict[tuple[int, int, str], KernelConfig] = {
    (128, 2, "many"): _c(128, 4, 3),
}
# The hybrid kernels' decode tiles (default_config(decode_launch=False)) where they differ from
# the decode launch's entry: they keep the tile they were checked and timed with when the entry
# moved (head_dim 64, twenty-fifth session; fp8 head_dim 256, thirty-first session: the hybrid
# kernel takes the entry's block, warps and stages, and its decode items were checked with three).
HYBRID_DECODE_TABLE: dict[tuple[int, int, str], KernelConfig] = {
    (64, 2, "many"): _pa(128, 4, 3),
    (256, 2, "one-per-sm"): _pa(32, 4, 4),  # the decode launch's entry until the 34th session
    (256, 1, "one-per-sm"): _vp_l2(64, 4, 4),  # likewise
    (256, 1, "many"): _vp(64, 4, 3),
    (256, 1, "many-large-group"): _vp(64, 4, 3),
}
CONFIG_TABLE: dict[tuple[int, int, str], KernelConfig] = {
    **{(d, 2, "many"): c for d, c in _MANY_16.items()},
    **{(d, 2, "many-large-group"): c for d, c in _LARGE_GROUP_16.items()},
    **{(d, 2, "one-per-sm"): c for d, c in _ONE_16.items()},
    **{(d, 1, "many"): c for d, c in _MANY_8.items()},
    **{(d, 1, "many-large-group"): c for d, c in _MANY_8.items()},
    **{(d, 1, "one-per-sm"): c for d, c in _ONE_8.items()},
    **{(d, 4, r): c for d, c in _F32.items() for r in REGIMES},
}

# What the next sweep times per (head_dim, KV element bytes): the table's entries and the
# alternatives still in question. Dropped after the H200 run of 07:07 UTC, 2026-11-26: the
# register prefetch (bn128-w8-s1-pf: 1.3-1.7x the best at head_dim 128 in every case) and
# bn64-w4-s3-pa (never best by more than 4%, 2.4x worse on llama3-70b-tp8). Added: bn128-w8-s4-pa
# (the one-per-sm winner with a third tile in flight, about 200 KB of shared memory) and, for
# fp8, bn128-w8-s3-pa (the 16-bit one-per-sm winner). fp8 keeps bn64-w4-s4-pa: with the fp16
# products it is the one head_dim-128 fp8 variant under 168 registers (164: 3 programs per SM).
# fp8 -vw (V widened to fp16 before the P.V product; docs/KERNEL_NOTES.md "FP8 V widened"):
#   local sm_90 compiles: no ld.shared.b8 left (was 64-128 per thread per step), registers
#   204 -> 168 (bn128-w4-s3-pa), 164 -> 104 (bn64-w4-s4-pa), 218 -> 128 (bn128-w8-s3-pa), no
#   spills; the fp16 V tile costs block_n x head_dim x 2 bytes of shared memory more. Not timed
#   yet; bn64-w8-s3-pa-vw at head_dim 256 spills 4 bytes and is left out.
# Warp-split variants (-wsN; sixth session): the profile of the H200 call of 17:40 UTC
#   (benchmarks/profile_gpu.sh, ncu --set full) showed 8 warps per SM for every table entry
#   (2 programs of 4 warps: registers or shared memory), an issue slot busy 30-48% of cycles, and
#   stalls on barriers and the cross-warp row max of each step (the 2-D product spreads a step's
#   tokens over the warps). With the tokens of a step cut into one slice per warp, each warp
#   keeps its own softmax and the step has no cross-warp reduction (local sm_90 compile, triton
#   3.9: mma warpsPerCTA [W, 1, 1], the P operand converted in registers, 185-255 registers, no
#   spills at head_dim 64/128; head_dim 256 spills 76-972 bytes and has none). Timed on the H200
#   (18:00-18:40 UTC; docs/PERFORMANCE.md "Sixth session"): slower than the table on every large
#   case but one (fp8 uniform B=64 fixed-2048: bn64-w2-s4-pa-ws2 211.7 vs 221.7 us, yet 421.8 vs
#   326.0 on skew80 B=256 balanced-2x); the one-program-per-SM cases were undecided because of
#   slow windows on fresh machines. The register caps (-rN) were slower too. Neither is in the
#   table; both stay here for a sweep on a quiet machine.
# The fp8 -vw variants are dropped from the sweep: in the H200 sweeps of the third session and
#   again in the 17:40 call (bn128-w4-s3-pa-vw 239.2 us vs 224.7 for bn128-w4-s3-pa, llama3-8b
#   uniform B=64 fixed-2048) they never beat the plain ones.
# fp8 (tenth session): the -vp variants, the previous entries' plain loops as the baseline, and
#   the one warp-split variant that won a case (bn64-w2-s4-pa-ws2); the other plain fp8 variants
#   lost to these in every earlier sweep and are dropped.
# bn64-w4-s3-pa and bn128-w8-s2-pa are back (seventh session) as the SHALLOW_TWIN of the 16-bit
#   head_dim-128 entries, which prepare_decode takes by wave fill.
CANDIDATES: dict[tuple[int, int], tuple[KernelConfig, ...]] = {
    (64, 2): (_c(256, 8, 2), _pa(128, 4, 4), _pa(128, 4, 3), _c(128, 4, 2), _pa(256, 8, 3),
              _ws(128, 4, 3, 4), _ws(128, 4, 4, 4), _ws(256, 8, 2, 8), _ws(128, 2, 4, 2)),
    (128, 2): (_c(128, 4, 2), _c(128, 4, 3), _pa(64, 4, 4), _pa(128, 8, 3), _pa(64, 8, 4),
               _pa(128, 8, 4), _pa(64, 4, 3), _pa(128, 8, 2), _cap(_pa(128, 8, 2), 80),
               _ws(128, 4, 2, 4), _ws(64, 4, 4, 4), _ws(64, 4, 3, 4), _ws(128, 8, 3, 8),
               _ws(256, 8, 2, 8), _ws(64, 2, 4, 2)),
    (256, 2): (_c(64, 4, 2), _pa(32, 4, 4), _pa(32, 4, 3), _c(32, 4, 2), _pa(64, 8, 3),
               _cap(_c(64, 4, 2), 168), _c(64, 4, 3), _c(64, 8, 2),  # these two: page 1
               _pa(64, 8, 2)),
    (64, 1): (_pa(128, 4, 3), _vp(128, 4, 3), _vp(128, 4, 4), _vp(128, 8, 3), _vp(64, 4, 4),
              _vp(256, 8, 3), _ws(128, 4, 3, 4), _cap(_vp(128, 4, 3), 120)),
    (128, 1): (_pa(128, 4, 3), _vp(128, 4, 3), _vp(128, 4, 4), _vp(64, 4, 4), _vp(64, 4, 3),
               _vp(128, 8, 3), _vp(128, 8, 4), _vp(256, 8, 3), _vp(64, 2, 4), _vp(64, 8, 4),
               _ws(64, 2, 4, 2), _cap(_vp(128, 4, 3), 168), _cap(_vp(128, 4, 2), 128)),
    (256, 1): (_pa(64, 4, 3), _vp(64, 4, 3), _vp(64, 4, 4), _vp(32, 4, 4), _vp(64, 8, 3),
               _vp(128, 8, 3), _vp_l2(64, 4, 4), _vp_l2(64, 4, 3), _cap(_vp(128, 8, 2), 128)),
}


def element_bytes(dtype: torch.dtype) -> int:
    """Bytes per element of a torch dtype (1 for float8_e4m3fn)."""
    return torch.empty((), dtype=dtype).element_size()


def regime(num_kv_heads: int, ctas_per_sm: int | None, group_size: int = 1) -> str:
    """"one-per-sm" when the plan assumes one program per SM or the shape has one KV head;
    otherwise "many-large-group" when G = num_qo_heads / num_kv_heads > 4, else "many" (see the
    module docstring). Depends on the shape and the policy only."""
    if ctas_per_sm == 1 or num_kv_heads == 1:
        return "one-per-sm"
    return "many-large-group" if group_size > LARGE_GROUP else "many"


def config_key(head_dim: int, kv_element_bytes: int, num_kv_heads: int,
               ctas_per_sm: int | None, group_size: int = 1) -> tuple[int, int, str]:
    """The CONFIG_TABLE key of a shape and a plan's occupancy; ValueError for an unknown size."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim: {head_dim} not allowed; allowed: 64, 128, 256")
    if kv_element_bytes not in (1, 2, 4):
        raise ValueError(f"kv element size: {kv_element_bytes} bytes not allowed; allowed: 1, 2, 4")
    if group_size < 1:
        raise ValueError(f"group_size: {group_size} not allowed; allowed: >= 1")
    return head_dim, kv_element_bytes, regime(num_kv_heads, ctas_per_sm, group_size)


# Programs of a configuration that fit one SM at once on sm_90 (H100/H200: 64 K registers and
# 228 KB of shared memory per SM, 1 KB of it reserved per program), from a local sm_90 compile
# (benchmarks/compile_survey.py, triton 3.9, G = 4, 8 and 16 alike), 16-bit KV at head_dim 128:
#   bn64-w4-s4-pa  128-144 registers x 128 threads, 102 KB shared -> 2 (shared memory)
#   bn64-w4-s3-pa  128-144 registers x 128 threads,  70 KB shared -> 3 (shared memory)
#   bn128-w8-s3-pa 112-114 registers x 256 threads, 136 KB shared -> 1 (shared memory)
#   bn128-w8-s2-pa 112 registers x 256 threads,      72 KB shared -> 2 (registers)
# head_dim 256 (16-bit KV):
#   bn64-w4-s2       196 registers x 128 threads (213 from Triton 3.6 on the H100), 76 KB
#                    shared -> 2 (registers)
#   bn64-w4-s2-r168  the same kernel with ptxas capped at 168 registers -> 3 (Nsight Compute on
#                    the H100, seventeenth session: block limit 3 by registers and by shared
#                    memory)
# Twenty-fourth session, local sm_90 compile with Triton 3.6 (the device's compiler):
#   bn128-w8-s2-pa-r80     80 registers x 256 threads (126 uncapped), 20 bytes of spill, 73.7 KB
#                          -> 3 (shared memory)
#   bn128-w4-s3-pa-vp      fp8: 200 registers x 128 threads, 73.7 KB -> 2 (registers)
#   bn128-w4-s3-pa-vp-r168 168 registers, no spill (G = 4, 7, 8, 16) -> 3 (registers and shared)
RESIDENT_PER_SM: dict[tuple[int, int, KernelConfig], int] = {
    (128, 2, _pa(64, 4, 4)): 2, (128, 2, _pa(64, 4, 3)): 3,
    (128, 2, _pa(128, 8, 3)): 1, (128, 2, _pa(128, 8, 2)): 2,
    (256, 2, _c(64, 4, 2)): 2, (256, 2, _cap(_c(64, 4, 2), 168)): 3,
    (128, 2, _cap(_pa(128, 8, 2), 80)): 3,
    # head_dim 256's "one-per-sm" pair (thirty-fourth session, local compile, Triton 3.9):
    # bn64-w8-s3-pa 128 registers x 256 threads, 141 KB -> 1 (shared memory); bn64-w8-s2-pa
    # 128 x 256, 76 KB -> 2 (registers and shared memory).
    (256, 2, _pa(64, 8, 3)): 1, (256, 2, _pa(64, 8, 2)): 2,
    # fp8 head_dim 256's "one-per-sm" pair (same session, local compile, G = 2): bn128-w8-s3-pa-vp
    # 158 registers x 256 threads, 143 KB -> 1; bn128-w8-s2-pa-vp-r128 128 x 256, 78 KB -> 2.
    (256, 1, _vp(128, 8, 3)): 1, (256, 1, _cap(_vp(128, 8, 2), 128)): 2,
    (128, 1, _vp(128, 4, 3)): 2, (128, 1, _cap(_vp(128, 4, 3), 168)): 3,
    # Thirty-first session: bn128-w4-s2-pa-vp-r128, 128 registers (no spill in a local compile),
    # 40 KB -> 4 (registers).
    (128, 1, _cap(_vp(128, 4, 2), 128)): 4,
    # SMALL_PAGE_TABLE's (pages below SMALL_PAGE; the local compile at page size 1).
    (128, 2, _c(128, 4, 3)): 2, (128, 2, _c(128, 4, 2)): 3,
    # Thirtieth session, local sm_90 compile at page size 1 (benchmarks/compile_survey.py
    # --page 1): head_dim 256 bn64-w4-s3 204 registers, 74 KB -> 2 (registers); G = 8 / 16
    # bn128-w4-s3 206 / 208 -> 2 and bn128-w4-s2 166 -> 3, as at G = 4.
    (256, 2, _c(64, 4, 3)): 2,
    # head_dim 64 (G = 2): bn128-w4-s4-pa 151 registers, 102 KB -> 2 (shared memory);
    # bn128-w4-s3-pa 151, 70 KB -> 3 (registers and shared memory).
    (64, 2, _pa(128, 4, 4)): 2, (64, 2, _pa(128, 4, 3)): 3,
    # fp8 head_dim 256 (local sm_90 compile, G = 2): bn64-w4-s4-pa-vp 184 registers, 106 KB -> 2
    # (shared memory); bn64-w4-s3-pa-vp 168 (page 1; 179 at page 16 from Triton 3.9, 168 from
    # 3.6 in the tenth session), 74 KB -> 3 (the H200's skew80 B=8 balanced-2x: 272 tasks took
    # 303.0 us with it, 353.0 with s4, as three per SM against two predicts).
    (256, 1, _vp(64, 4, 4)): 2, (256, 1, _vp(64, 4, 3)): 3,
    # The same kernels with -l2 (thirty-third session): 181 / 182 registers at page 16, the same
    # shared memory (local compile).
    (256, 1, _vp_l2(64, 4, 4)): 2, (256, 1, _vp_l2(64, 4, 3)): 3,
    # fp8 head_dim 64 (G = 2): bn128-w4-s3-pa-vp 148 registers from Triton 3.6, 48 KB -> 3
    # (registers); its "many" entry under a 120-register cap -> 4 (thirty-first session,
    # docs/PERFORMANCE.md call 5).
    (64, 1, _vp(128, 4, 3)): 3, (64, 1, _cap(_vp(128, 4, 3), 120)): 4,
}
# A table entry -> its twin with one pipeline stage less: the same block, warps and loop, so the
# same arithmetic in the same order and the same output bits (checked on the GPU: docs/
# KERNEL_NOTES.md "Stages by wave fill: shallow twins"); only the tiles in flight and the programs
# per SM differ.
SHALLOW_TWIN: dict[tuple[int, int, KernelConfig], KernelConfig] = {
    (128, 2, _pa(64, 4, 4)): _pa(64, 4, 3),
    (128, 2, _pa(128, 8, 3)): _pa(128, 8, 2),
    (256, 2, _pa(64, 8, 3)): _pa(64, 8, 2),  # head_dim 256 "one-per-sm" (thirty-fourth session)
    # fp8 head_dim 256 "one-per-sm" (thirty-fourth session): one stage less and a register cap,
    # both leave the arithmetic alone (same bits), two programs per SM where the entry fits one.
    (256, 1, _vp(128, 8, 3)): _cap(_vp(128, 8, 2), 128),
    (128, 2, _c(128, 4, 3)): _c(128, 4, 2),  # pages below SMALL_PAGE and from LARGE_PAGE
    # head_dim 64's "many" entry; also its "one-per-sm" entry (the same kernel; unmeasured there).
    (64, 2, _pa(128, 4, 4)): _pa(128, 4, 3),
    # fp8 head_dim 256's "many" entry (and its "one-per-sm" one, the same kernel; unmeasured).
    # Set on the pair without -l2 (thirty-first session); with it (thirty-third, call 3) the
    # pick was the faster of the pair on 5 of 5 page-16 plans timed.
    (256, 1, _vp_l2(64, 4, 4)): _vp_l2(64, 4, 3),
}
# A table entry (or a shallow twin) -> the same kernel compiled under a register cap (-rN: same
# arithmetic, same bits; one program more per SM, each perhaps slower: spills, less overlap).
# A twin whose programs cost what the entry's do (CAPPED_TWIN_COST) runs wherever the entry's
# slots are all taken, but for equal tasks whose waves the entry fills better; a costlier one
# only where it holds a launch in one wave and the entry would finish its late tasks well after
# the others (`capped_twin`, CAPPED_TWIN_SLACK). head_dim 256, timed on an H100
# (seventeenth session, docs/PERFORMANCE.md) over the 24 matrix cases at 262,144 and 196,608
# tokens: the twin was 4.7% and 7.2% faster on the two launches it now runs (skew80 B=8
# balanced-2x, 272 programs: 801 against 859 us, 614 against 644) and 0.3-17% slower on all the
# 22 others, equal tasks that spill into a second wave included (uniform B=8 balanced-2x, 320
# programs: 771 against 760).
# fp8 head_dim 128 and the one-KV-head 16-bit twin: H100, twenty-fourth session (docs/
# PERFORMANCE.md, calls 1-2; local sm_90 compile, Triton 3.6: bn128-w4-s3-pa-vp 200 registers ->
# 168 under the cap, no spill, at G = 4, 7, 8 and 16; bn128-w8-s2-pa 126 -> 80, 20 bytes of
# spill; both 73.7 KB of shared memory, so three programs per SM where the entry fits two).
# Where the capped twin's program runs beside the entry's one-for-one (launches that both hold
# in one wave), it took 0.99-1.00x the fp8 entry's time and 1.00-1.03x the 16-bit twin's; where
# the entry left a late second wave, 4-22% less (fp8 llama3-8b skew80 B=8 balanced-2x 204.7
# against 250.3 us, llama3-70b-tp8 skew80 B=64 balanced-2x 38.1 against 46.2; 16-bit 64.1
# against 69.8); beyond its first wave on tasks of many lengths 1-14% less (fp8 llama3-70b-tp8
# uniform B=256 balanced-2x, 256 chunks of 1,008 tokens and 256 of 16: 40.3 against 47.0;
# llama3-8b skew80 B=256 balanced-2x 244.7 against 264.3), and on equal long tasks whose last
# wave it leaves part-empty 16% more (llama3-8b uniform B=64 balanced-2x, 512 tasks of 4,096
# tokens: 1.94 waves of two per SM, 1.29 of three: 231.1 against 199.5). Held out (call 6: g16
# and qwen2.5-7b with fp8 pages, G = 16 and 7, set on neither): the rule picked the faster of
# the two on 12 of 14 cases (4-19% on the twin's balanced-2x cases) and was 3.8-3.9% slower on
# skew80 B=256 fixed-2048 (tasks of many lengths beyond the twin's first wave).
# Where the entry's in-order finish exceeds this many longest tasks, the capped twin runs: the
# twin pays its slower programs over the whole launch (0.3-17%, mostly 5-6%, on the 22 cases
# above), the entry pays for a second wave only what its late tasks add (measured: finish 1.24
# tasks, uniform B=8 balanced-2x, entry 1.4% faster; finish 1.65-1.69, skew80 B=8 balanced-2x,
# twin 4.7-7.2% faster; both totals).
CAPPED_TWIN_SLACK = 1.5
CAPPED_TWIN: dict[tuple[int, int, KernelConfig], KernelConfig] = {
    (256, 2, _c(64, 4, 2)): _cap(_c(64, 4, 2), 168),
    (128, 1, _vp(128, 4, 3)): _cap(_vp(128, 4, 3), 168),
    (128, 2, _pa(128, 8, 2)): _cap(_pa(128, 8, 2), 80),
}
# Per CAPPED_TWIN key: the capped twin's time per program over the entry's where every program
# has a slot under both (medians of the measurements above): head_dim 256 5-6% more (up to 17%),
# fp8 0.99-1.00, the 16-bit one-KV-head twin 1.00-1.03 (median 1.01).
CAPPED_TWIN_COST: dict[tuple[int, int, KernelConfig], float] = {
    (256, 2, _c(64, 4, 2)): 1.05,
    (128, 1, _vp(128, 4, 3)): 1.00,
    (128, 2, _pa(128, 8, 2)): 1.01,
}
# Beyond its first wave a capped twin runs (by the shallow twins' rule) only where its programs
# cost at most this much more than the entry's: there its extra program per SM backfills the
# waves of tasks of many lengths and hides the starts of short ones (1-14% above), which a 5%
# slower program throughout would eat.
CAPPED_TWIN_MAX_COST = 1.03
# ... and, for tasks of many lengths, only while the plan's work is at most this many rounds of
# the entry's slots at the longest task (keys x KV heads / (entry slots x longest keys)): about
# one round is a launch that the third program fills where slots idle (balanced-2x plans and
# unsplit batches: 1.00-1.06 rounds, the twin 1.4-14% faster on 16 H100 cases); more rounds keep
# every SM streaming, and a third program only contends (1.44-1.94 rounds: fixed-2048 skews of
# g16 / qwen2.5-7b and the fp8 file's chunk-2048 splits of arxiv batches, 2.7-6.8% slower;
# 2.0-3.9 rounds: within 1.4%). Set on all of the twenty-fourth session's rows (calls 1, 2, 6,
# 8), the held-out ones included: not yet checked on new ones.
CAPPED_BACKFILL_MAX_ROUNDS = 1.1
# ... and only while the longest task holds at most this many keys. Three programs on an SM
# share its bandwidth for as long as their tasks last: where a plan alternates long and short
# pieces (a balanced chunk just under the requests' length), launch order puts three long ones
# on some SMs and none on others, and with long tasks that costs more than the third program's
# backfill gains. H200, twenty-sixth session (docs/PERFORMANCE.md, calls 4-5; fp8 entry against
# its capped twin, 512 pieces, long + short): 3,968-key pieces 93.7 against 94.8 us (twin
# faster), 7,936 within the noise (176-181 both), 15,872 344 against 309 (twin 11% slower),
# 31,744 671 against 588 (MHA) and 670 against 593 (llama3-8b, 8 KV heads); skew80 balanced
# plans: 7,944-key chunks (llama3-8b B=256) twin 3.6% faster, 31,775 (MHA B=8) 3% slower. The
# H100 cases the rule was set on have tasks of 16-7,944 keys. Between 7,936 and 15,872 nothing
# was measured; 12,288 is about their geometric middle.
CAPPED_BACKFILL_MAX_TASK_KEYS = 12288
# ... where more than one long task per SM (keys >= LONG_TASK_RATIO x the longest; counted over
# the KV heads) is what piles up. A few long tasks among many short ones (FlashInfer's unsplit
# plans of skewed trace batches: mooncake and azure-conv B=64-256, tasks of up to 100k+ keys)
# each keep an SM while the third program backfills the short ones around them: there the twin
# ran 3-11% faster (call 6, where a rule on length alone gave those plans to the entry).
LONG_TASK_RATIO = 0.5
# The deeper entry keeps its place only when its tasks are of one length, its own last wave is
# at least DEEP_FILL_MIN full and it fills it WAVE_FILL_MARGIN (fraction of a wave) better than
# the twin does.
WAVE_FILL_MARGIN = 0.1
# Per SHALLOW_TWIN key, a larger margin where the twin streams faster per SM than its deep entry
# when both fill their waves: head_dim 64 (H200, twenty-fifth session, call 4): on 1,024 and
# 2,048 equal tasks (deep fill 0.97, twin 0.86) bn128-w4-s3-pa ran 144.2-145.6 us and s4-pa
# 154.5-158.0 (0.81 of copy against 0.86); only on 512 (0.97 against 0.65) did s4-pa win, 144.4
# against 162.5 (H100, sixteenth session: 1,024 tasks 201.8 against 203.9, the twin again).
WAVE_FILL_MARGIN_BY_TWIN: dict[tuple[int, int, KernelConfig], float] = {
    (64, 2, _pa(128, 4, 4)): 0.2,
    # fp8 head_dim 256 (H200, thirty-first session, call 2): on 1,024 equal tasks (deep fill
    # 0.97, twin 0.86) s3 270.2 us against s4 303.1 at page 16; on 512 (0.97 against 0.65) s4
    # 263.5 against 338.3 at page 1 (both without -l2; thirty-third session, call 3, with it:
    # 1,024 equal tasks s3 277.4 against s4 281.6).
    (256, 1, _vp_l2(64, 4, 4)): 0.2,
}
# SHALLOW_TWIN keys whose twin also runs tasks of many lengths launched longest first where
# neither the entry nor the twin finishes them within ONE_TASK_SLACK x the longest task (several
# rounds of short tasks: longest_first_config keeps the entry there otherwise). fp8 head_dim 256
# (H200, thirty-first session, call 5): skew80 fixed-2048 plans of 2,048-key tasks, 4.0-4.2
# rounds of the entry's slots, 3.0 of the twin's: s3 274.3 / 283.9 us against s4 316.3 / 332.7
# at page 16 (B = 64 / 256), 278.0 against 314.5 at page 1 (B=256); where the entry finishes
# in one long task (skew80 balanced-2x, 7,952-key pieces: B=256 1.01, B=64 1.05) it stays, 319.2
# against 353.4 and 299.3 against 355.8. The 16-bit head_dim-128 pair measured within 1% there
# (twenty-ninth session), so it keeps the entry.
# 16-bit head_dim 256 "one-per-sm" (H200, thirty-fourth session, call 5; 8 q / 1 KV head, page
# 16): on skew80 B=64 balanced-2x (272 tasks of up to 1,008 keys: 2.1 rounds of the entry's one
# slot per SM, eight tasks past the twin's two) the twin ran 96.2 us against the entry's 102.7
# (FlashInfer 96.3); on the four other plans of 264-464 tasks, where the twin finishes in time
# and the rule gave it anyway, it was 4-8% faster than the entry.
SEVERAL_ROUNDS_TWIN: frozenset[tuple[int, int, KernelConfig]] = frozenset({
    (256, 1, _vp_l2(64, 4, 4)),
    (256, 2, _pa(64, 8, 3)),
    # fp8 (call 8, 2/1/256): skew80 B=8 balanced-2x, 265 tasks, one past the twin's slots: twin
    # 50.2 us against the entry's 56.9.
    (256, 1, _vp(128, 8, 3)),
})
# A table entry -> a same-bits twin of more programs per SM (one stage less and a register cap)
# for launches of short tasks only: more tasks than the entry's slots and none longer than
# SHORT_TASK_MAX_KEYS. fp8 head_dim 128 (H200, thirty-first session, call 7; llama3-8b page 16,
# us): bn128-w4-s2-pa-vp-r128 (four per SM) 145.2 against the entry's 156.9 (and its capped twin's
# 153.6) on 1,024 tasks of 2,048 keys, 136.1 against 143.6 on 512 of 4,096, 154.7 against 180.3
# (159.2) on skew80 B=256 fixed-2048 (2,864 tasks of up to 2,048 keys); slower where tasks are
# long: 181.9 against 144.5 (the capped twin) on 320 tasks of 6,553 keys, 204.1 against 155.1 on
# skew80 B=64 balanced-2x (720, up to 7,952 keys): four long programs on an SM share its
# bandwidth for as long as they last.
# Call 8, the rule as first set (tasks up to 4,096 keys, every shape) on the matrix: llama3-8b
# 12/12 at 1.4x FlashInfer and 6/12 at 0.85 of copy (the twenty-ninth session: 1/12); held out,
# faster on every fixed-2048 plan of G = 7, 8 and 16 (qwen2.5-7b page 1: 76.4-87.6 us against
# 84.9-97.2), slower on their balanced-2x plans, whose 3,984-key pieces alternate with short ones
# (96.6-108.5 against 82.4-99.6), and on llama3-70b-tp8's (one KV head: skew80 B=256 fixed-2048
# 51.8 us, 1.32x FlashInfer, where the entry reached 1.4x on every case). So it runs only for
# several KV heads, and for tasks of one length up to SHORT_TASK_MAX_KEYS or of any lengths up to
# SHORT_TASK_MIXED_MAX_KEYS.
SHORT_TASK_TWIN: dict[tuple[int, int, KernelConfig], KernelConfig] = {
    (128, 1, _vp(128, 4, 3)): _cap(_vp(128, 4, 2), 128),
}
SHORT_TASK_MAX_KEYS = 4096
SHORT_TASK_MIXED_MAX_KEYS = 2048
DEEP_FILL_MIN = 0.9
# "Tasks of one length": at least EQUAL_SHARE of the work items have at least EQUAL_RATIO of the
# longest item's keys (a fixed-split plan of long requests: every chunk but the ragged tails).
EQUAL_RATIO = 0.9
EQUAL_SHARE = 0.9
# Tasks of many lengths keep the deep entry where one program per SM, handed the tasks in launch
# order as SMs free up, would finish within ONE_TASK_SLACK x the longest task (`fits_one_task`):
# every long task then has an SM of its own, and the short ones cycle on the SMs left over. Set on
# two H100 batches of llama3-70b-tp8 (sixteenth session): skew80 fixed-2048 at B=256 (103 chunks
# of 2,048 tokens and 255 requests of 205: ratio 1.00, deep 62.2 us against the twin's 69.0) and
# at B=64 (the same chunks and 63 requests of 832: ratio 1.22, twin 64.1 against 68.9); also
# agrees with the H200's 140 programs on 132 SMs (ratio 1.00, deep 9% faster; eighth session).
ONE_TASK_SLACK = 1.1


def wave_fill(programs: int, sm_count: int, per_sm: int) -> float:
    """How full the last wave is, 0..1 (1.0 = whole waves): programs over sm_count x per_sm
    slots, divided by the waves rounded up. programs, sm_count, per_sm: >= 1."""
    for name, value in (("programs", programs), ("sm_count", sm_count), ("per_sm", per_sm)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name}: {value} not allowed; allowed: an integer >= 1")
    waves = programs / (sm_count * per_sm)
    return waves / math.ceil(waves)


def tasks_of_one_length(item_keys) -> bool:
    """Whether a plan's work items (keys per item, >= 0) are of about one length: at least
    EQUAL_SHARE of them hold at least EQUAL_RATIO of the longest item's keys. Empty: True."""
    keys = np.asarray(item_keys, dtype=np.float64).ravel()
    if keys.size and (not np.all(np.isfinite(keys)) or keys.min() < 0):
        raise ValueError("item_keys: allowed: finite values >= 0")
    if keys.size == 0:
        return True
    return float(np.mean(keys >= EQUAL_RATIO * keys.max())) >= EQUAL_SHARE


def _task_keys(item_keys, num_kv_heads: int, slots: int, slots_name: str) -> np.ndarray:
    """item_keys as a flat float64 array, after checking them (finite, >= 0), num_kv_heads and
    slots (integers >= 1; slots reported as `slots_name`)."""
    for name, value in (("num_kv_heads", num_kv_heads), (slots_name, slots)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name}: {value} not allowed; allowed: an integer >= 1")
    keys = np.asarray(item_keys, dtype=np.float64).ravel()
    if keys.size and (not np.all(np.isfinite(keys)) or keys.min() < 0):
        raise ValueError("item_keys: allowed: finite values >= 0")
    return keys


def in_order_finish(item_keys, num_kv_heads: int, slots: int,
                    stop_above: float = math.inf, launch_order: str = "plan") -> float:
    """When a static grid's tasks finish on `slots` program slots, in units of the longest task:
    the tasks (item_keys, keys per work item >= 0, repeated for each of num_kv_heads >= 1 KV
    heads) go in launch order to the slot that frees first, a task taking time in proportion to
    its keys. launch_order (kernels.plan.LAUNCH_ORDERS): "plan" the 2-D grid's, items fastest;
    "longest-first" the items by descending keys, each item's KV heads together. 1.0 for at most
    `slots` tasks and for an empty or all-zero plan. stop_above: return as soon as the finish
    exceeds it (a lower bound then). slots >= 1."""
    check_launch_order(launch_order)
    keys = _task_keys(item_keys, num_kv_heads, slots, "slots")
    if keys.size * num_kv_heads <= slots or keys.max() == 0:
        return 1.0
    if launch_order == "longest-first":
        tasks = np.repeat(-np.sort(-keys, kind="stable"), num_kv_heads)
    else:
        tasks = np.tile(keys, num_kv_heads)
    longest = keys.max()
    free = [0.0] * slots  # when each slot frees, a heap
    finish = 0.0
    for k in tasks.tolist():
        end = heapq.heappop(free) + k
        finish = max(finish, end)
        if finish > stop_above * longest:
            return finish / longest
        heapq.heappush(free, end)
    return finish / longest


def fits_one_task(item_keys, num_kv_heads: int, sm_count: int,
                  launch_order: str = "plan") -> bool:
    """Whether one program per SM would run a static grid's tasks within ONE_TASK_SLACK x the
    longest task's time (in_order_finish on sm_count >= 1 slots, in launch_order). True for at
    most sm_count tasks; for an empty plan too."""
    keys = _task_keys(item_keys, num_kv_heads, sm_count, "sm_count")
    tasks = keys.size * num_kv_heads
    if tasks > sm_count and keys.sum() * num_kv_heads > ONE_TASK_SLACK * keys.max() * sm_count:
        return False  # more work than sm_count SMs hold in that time, whatever the order
    return in_order_finish(keys, num_kv_heads, sm_count, ONE_TASK_SLACK,
                           launch_order) <= ONE_TASK_SLACK


def longest_first_config(config: KernelConfig, head_dim: int, kv_element_bytes: int,
                         sm_count: int, item_keys, num_kv_heads: int) -> KernelConfig:
    """For tasks launched longest first (of many lengths, or any on an entry of one program per
    SM: occupancy_twin): `config` (a table entry) or one of its same-bits twins, the chain
    entry -> SHALLOW_TWIN -> the CAPPED_TWIN of the last (each with more programs per SM). The
    first of the chain whose slots (its programs per SM x sm_count), handed the tasks longest
    first, finish them within ONE_TASK_SLACK x the longest task
    (in_order_finish, "longest-first"); a costly capped twin (CAPPED_TWIN_COST above
    CAPPED_TWIN_MAX_COST) only where the configuration before it would finish later than
    CAPPED_TWIN_SLACK. Where none does, the entry: then every SM streams for several rounds
    and the deeper pipeline's faster programs count most; for the entries of
    SEVERAL_ROUNDS_TWIN, whose twin streams faster over several rounds, the shallow twin.
    Why: longest first, the long tasks
    start at once and the short ones backfill the slots they leave, so the entry keeps its
    faster programs wherever its slots hold the long tasks; a twin's extra slots pay only where
    they save a late round. H200, twenty-ninth session, call 1 (docs/PERFORMANCE.md): the entry
    bn64-w4-s4-pa against its twin s3 on skew80 plans of 448-2,256 programs 6-8% faster (the
    entry finishes in about one long task), 664 programs within 1% (both late); the twin 12%
    faster on 272 programs of llama3-8b skew80 B=8 balanced-2x (264 entry slots: eight tasks
    late); the fp8 entry 6-19% faster than its capped twin on skew80 plans of 720 and 2,256
    programs (the entry on time); the one-KV-head twins 1-10% faster where the entry's one
    program per SM leaves long tasks a second round (llama3-70b-tp8 skew80 B=64 fixed-2048,
    uniform B=256 balanced-2x)."""
    chain = [config]
    twin = SHALLOW_TWIN.get((head_dim, kv_element_bytes, config))
    if twin is not None:
        chain.append(twin)
    capped = CAPPED_TWIN.get((head_dim, kv_element_bytes, chain[-1]))
    if capped is not None:
        chain.append(capped)
    if len(chain) == 1:
        return config
    late = []
    for i, candidate in enumerate(chain):
        slots = RESIDENT_PER_SM[(head_dim, kv_element_bytes, candidate)] * sm_count
        late.append(in_order_finish(item_keys, num_kv_heads, slots, CAPPED_TWIN_SLACK,
                                    "longest-first"))
        if late[-1] > ONE_TASK_SLACK:
            continue
        key = (head_dim, kv_element_bytes, chain[i - 1]) if i else None
        costly = (i > 0 and CAPPED_TWIN.get(key) == candidate
                  and CAPPED_TWIN_COST[key] > CAPPED_TWIN_MAX_COST)
        if costly and late[i - 1] <= CAPPED_TWIN_SLACK:
            return chain[i - 1]
        return candidate
    if (head_dim, kv_element_bytes, config) in SEVERAL_ROUNDS_TWIN and twin is not None:
        return twin
    return config


def capped_twin(config: KernelConfig, head_dim: int, kv_element_bytes: int, programs: int,
                sm_count: int, item_keys=None, num_kv_heads: int = 1,
                equal_tasks: bool = True) -> KernelConfig:
    """`config`, or its register-capped twin (CAPPED_TWIN; same bits, more programs per SM).

    programs: the launch's programs (one per task, >= 1) on sm_count SMs; item_keys: keys per work
    item, for each of num_kv_heads (launch order); equal_tasks: tasks_of_one_length. Never where the
    entry has slots to spare (programs below its slots). A cheap twin (CAPPED_TWIN_COST at most
    CAPPED_TWIN_MAX_COST: its programs run about as fast as the entry's) runs wherever the entry's
    slots are all taken, except equal tasks beyond its own first wave that fill the entry's waves
    better than its own (DEEP_FILL_MIN, WAVE_FILL_MARGIN: the shallow twins' rule) and tasks of many
    lengths beyond it unless the work is about one round of the entry's slots
    (CAPPED_BACKFILL_MAX_ROUNDS), and not where more long tasks than SMs are longer than
    CAPPED_BACKFILL_MAX_TASK_KEYS. A costlier twin runs only where it holds all `programs` in one
    wave while the entry, handed the tasks in launch order, would finish them later than
    CAPPED_TWIN_SLACK x the longest task (in_order_finish). Without item_keys, or for an entry
    with no capped twin: `config`. The rule for tasks launched in the plan's order; longest
    first, tasks of many lengths take longest_first_config instead (occupancy_twin)."""
    key = (head_dim, kv_element_bytes, config)
    capped = CAPPED_TWIN.get(key)
    if capped is None or item_keys is None:
        return config
    entry_per_sm = RESIDENT_PER_SM[key]
    capped_per_sm = RESIDENT_PER_SM[(head_dim, kv_element_bytes, capped)]
    if programs < entry_per_sm * sm_count:
        return config
    cheap = CAPPED_TWIN_COST[key] <= CAPPED_TWIN_MAX_COST
    if programs <= capped_per_sm * sm_count:
        if cheap:
            return capped
        late = in_order_finish(item_keys, num_kv_heads, entry_per_sm * sm_count,
                               CAPPED_TWIN_SLACK)
        return capped if late > CAPPED_TWIN_SLACK else config
    if not cheap:
        return config
    if not equal_tasks:
        keys = _task_keys(item_keys, num_kv_heads, sm_count, "sm_count")
        long_tasks = int((keys >= LONG_TASK_RATIO * keys.max()).sum()) * num_kv_heads
        if keys.max() > CAPPED_BACKFILL_MAX_TASK_KEYS and long_tasks > sm_count:
            return config
        rounds = keys.sum() * num_kv_heads / (entry_per_sm * sm_count * max(keys.max(), 1.0))
        return capped if rounds <= CAPPED_BACKFILL_MAX_ROUNDS else config
    entry_fill = wave_fill(programs, sm_count, entry_per_sm)
    capped_fill = wave_fill(programs, sm_count, capped_per_sm)
    keep = entry_fill >= DEEP_FILL_MIN and entry_fill > capped_fill + WAVE_FILL_MARGIN
    return config if keep else capped


def short_task_twin(config: KernelConfig, head_dim: int, kv_element_bytes: int, programs: int,
                    sm_count: int, item_keys=None, num_kv_heads: int = 1) -> KernelConfig | None:
    """The SHORT_TASK_TWIN of `config` where the shape has several KV heads (num_kv_heads >= 2),
    the launch's `programs` (one per task, >= 1) outnumber the entry's slots (RESIDENT_PER_SM x
    sm_count) and the work items (item_keys, keys per item, for each KV head) are short: of one
    length (tasks_of_one_length) and at most SHORT_TASK_MAX_KEYS, or of any lengths and at most
    SHORT_TASK_MIXED_MAX_KEYS; None otherwise (no such twin, no item_keys, an empty plan). Same
    bits as `config`."""
    key = (head_dim, kv_element_bytes, config)
    twin = SHORT_TASK_TWIN.get(key)
    if twin is None or item_keys is None:
        return None
    keys = _task_keys(item_keys, num_kv_heads, sm_count, "sm_count")
    if keys.size == 0 or num_kv_heads < 2 or programs <= RESIDENT_PER_SM[key] * sm_count:
        return None
    limit = SHORT_TASK_MAX_KEYS if tasks_of_one_length(keys) else SHORT_TASK_MIXED_MAX_KEYS
    return twin if keys.max() <= limit else None


# Tasks of at least this fraction of the longest run in the main launch of a side split.
SIDE_LONG_RATIO = 0.5


def side_launch_split(config: KernelConfig, head_dim: int, kv_element_bytes: int, sm_count: int,
                      item_keys, num_kv_heads: int) -> tuple[KernelConfig, int] | None:
    """For a launch handed out longest first whose table entry `config` runs one program per SM
    (RESIDENT_PER_SM 1) and has a SHALLOW_TWIN: (the twin, the number of long items) where the
    long tasks should run as one launch of the entry and the short ones as a second launch, of
    the twin, beside it on another stream; None otherwise. Same bits either way (the twin only
    has one stage less), so a request's result does not depend on which launch runs it.

    item_keys: keys per work item (>= 0), longest first; num_kv_heads >= 1; sm_count >= 1. The
    long items are those of at least SIDE_LONG_RATIO x the longest item's keys. The split is
    taken where (1) the long tasks (items x KV heads) leave at least one SM free, (2) one launch
    of the entry, longest first, would finish after ONE_TASK_SLACK x the longest task
    (in_order_finish): the short tasks queue on the SMs the long ones leave, and (3) those SMs
    hold the short tasks' keys within ONE_TASK_SLACK x the longest task.
    Why: one program per SM streams the long tasks fastest, but then the short ones run one per
    SM, a few rounds deep, on the SMs left over; the twin fits two per SM there. H200, thirty-
    third session (docs/PERFORMANCE.md), llama3-70b-tp8 bf16 page 16. Call 5: skew80 B=64
    fixed-2048 (102 tasks of 2,048 keys, 64 of about 830) in one launch 55.8 us (the twin, the
    rule before), FlashInfer 51.0; the long tasks alone under the entry 40.7, and with the short
    ones beside them under the twin 49.3. Held out (calls 7-8), where (2) holds: skew80 B=64
    fixed-4096 at 524,288 tokens 84.0 against 97.7 in one launch, fixed-1024 at 131,072 35.4
    against 35.3. Without (2) the split also ran on five batches where one launch of the entry
    finishes on time: 1-4% faster on two, 3-11% slower on three (skew80 B=192 fixed-2048,
    skew50 B=64, skew90 B=32), so (2) stays."""
    key = (head_dim, kv_element_bytes, config)
    twin = SHALLOW_TWIN.get(key)
    if twin is None or RESIDENT_PER_SM.get(key) != 1 or item_keys is None:
        return None
    keys = np.asarray(item_keys, dtype=np.int64)
    if keys.size == 0 or keys.max() <= 0:
        return None
    longest = int(keys.max())
    long_items = int(np.count_nonzero(keys >= SIDE_LONG_RATIO * longest))
    free_sms = sm_count - long_items * num_kv_heads
    if long_items == keys.size or free_sms < 1:
        return None
    if in_order_finish(keys, num_kv_heads, sm_count, ONE_TASK_SLACK,
                       "longest-first") <= ONE_TASK_SLACK:
        return None
    short_keys = np.sort(keys)[: keys.size - long_items]
    if short_keys.sum() * num_kv_heads > ONE_TASK_SLACK * longest * free_sms:
        return None
    return twin, long_items


def occupancy_twin(config: KernelConfig, head_dim: int, kv_element_bytes: int, programs: int,
                   sm_count: int, equal_tasks: bool, one_task: bool = False,
                   item_keys=None, num_kv_heads: int = 1,
                   launch_order: str = "plan") -> KernelConfig:
    """`config`, or its one-stage-shallower twin (SHALLOW_TWIN), which fits more programs per SM
    and computes the same bits; then, for the entry or twin so chosen, its register-capped twin
    where `capped_twin` says so (CAPPED_TWIN; same bits again). The deep entry stays where no SM
    gets a second program (programs <= sm_count), and for tasks of one length (equal_tasks:
    tasks_of_one_length of the plan's items) that fill its waves (last wave at least
    DEEP_FILL_MIN full) better than the twin's by more than WAVE_FILL_MARGIN (or the entry's
    WAVE_FILL_MARGIN_BY_TWIN) (`programs`
    programs, one per task, on `sm_count` SMs): equal tasks finish together, and where their
    waves are full the deeper pipeline streams faster per program; a part-empty last wave costs
    the deep entry a whole task's time more than the twin's. Tasks of many lengths backfill each
    other's waves, and the twin's extra program per SM hides the start of the short ones
    (measured on the H200, seventh and eighth sessions: docs/PERFORMANCE.md), except where one
    program per SM would still finish them in about one long task's time (one_task:
    fits_one_task of the plan): then each long task has an SM of its own under the deep entry,
    while the twin's second slot puts short tasks beside long ones (H100, sixteenth session).
    The choice never changes a request's arithmetic, so a result stays independent of the rest
    of the batch.
    An entry of one program per SM (RESIDENT_PER_SM 1: the one-KV-head 16-bit entry) takes
    longest_first_config for equal tasks too: its lone program leaves the SM's bandwidth unused
    (0.5-0.7 of copy), so wherever its one slot per SM leaves tasks a second round, a twin's
    second program adds bandwidth rather than contention (H200, twenty-ninth session, call 5:
    the rule picked the fastest of the three on all twelve page-16 cases of llama3-70b-tp8,
    where wave fill had given -r80 on 265 tasks, 7% slower than s2-pa).
    launch_order (kernels.plan.LAUNCH_ORDERS): with "longest-first", tasks of many lengths take
    longest_first_config instead (the entry where item_keys is None): the long tasks start
    first, so no short task waits behind a late long one for a twin's extra slot to hide.
    Before all of this, an entry with a SHORT_TASK_TWIN takes it for launches of short tasks
    (short_task_twin)."""
    check_launch_order(launch_order)
    key = (head_dim, kv_element_bytes, config)
    short = short_task_twin(config, head_dim, kv_element_bytes, programs, sm_count, item_keys,
                            num_kv_heads)
    if short is not None:
        return short
    lone = RESIDENT_PER_SM.get(key) == 1
    if launch_order == "longest-first" and (not equal_tasks or lone):
        if item_keys is None:
            return config
        return longest_first_config(config, head_dim, kv_element_bytes, sm_count, item_keys,
                                    num_kv_heads)
    twin = SHALLOW_TWIN.get(key)
    if twin is not None:
        if programs <= sm_count:
            # Every program has an SM of its own under either entry, so the twin's extra
            # resident program buys nothing and the deeper pipeline streams faster
            # (llama3-70b-tp8 at 96-128 programs, H200, eighth session: docs/PERFORMANCE.md).
            return config
        if not equal_tasks and one_task:
            return config
        if equal_tasks:
            deep = wave_fill(programs, sm_count, RESIDENT_PER_SM[key])
            shallow = wave_fill(programs, sm_count,
                                RESIDENT_PER_SM[(head_dim, kv_element_bytes, twin)])
            margin = WAVE_FILL_MARGIN_BY_TWIN.get(key, WAVE_FILL_MARGIN)
            if deep >= DEEP_FILL_MIN and deep > shallow + margin:
                return config
        config = twin
    return capped_twin(config, head_dim, kv_element_bytes, programs, sm_count, item_keys,
                       num_kv_heads, equal_tasks)


def default_config(head_dim: int, dtype: torch.dtype, page_size: int,
                   ctas_per_sm: int | None = None, *, num_kv_heads: int = 8,
                   group_size: int = 1, programs: int | None = None,
                   sm_count: int | None = None, equal_tasks: bool = True,
                   one_task: bool = False, item_keys=None,
                   decode_launch: bool = True, launch_order: str = "plan") -> KernelConfig:
    """The stage-1 configuration for a head_dim (64/128/256), KV page dtype and page size.

    dtype: the dtype of the K/V pages (torch.float8_e4m3fn for an fp8 cache). ctas_per_sm: the
    occupancy the plan assumes (plan.ctas_per_sm). num_kv_heads: the shape's KV heads (1 selects
    the one-program-per-SM regime). group_size: query heads per KV head (G > 4 selects
    "many-large-group" where several programs share an SM). Never depends on kv_lens or the batch, so the number of
    compiled variants stays bounded and a request's arithmetic under a given policy does not
    change with what else is in the batch. page_size: tokens per page; pages smaller than
    SMALL_PAGE take SMALL_PAGE_TABLE's entry where it has one (measured at page size 1); pages
    of LARGE_PAGE or more LARGE_PAGE_TABLE's (measured at page size 64).
    decode_launch False: the hybrid kernels' decode tiles, which keep what they were measured
    with: the page-16 entries (or HYBRID_DECODE_TABLE's) at large pages, the small-page entry's
    shallow twin at small ones; never a twin by occupancy.
    programs, sm_count, equal_tasks: the launch's programs (one per task), the device's SMs and
    whether the tasks are of one length (tasks_of_one_length), one_task (fits_one_task) and
    item_keys (keys per work item, for the register-capped twins of CAPPED_TWIN);
    with programs and sm_count, the entry may give way to its shallower twin (occupancy_twin),
    which computes the same bits. launch_order: the order stage 1 hands out its tasks
    (kernels.plan.LAUNCH_ORDERS), for the twins' rules.
    """
    key = config_key(head_dim, element_bytes(dtype), num_kv_heads, ctas_per_sm, group_size)
    if page_size < SMALL_PAGE and key in SMALL_PAGE_TABLE:
        config = SMALL_PAGE_TABLE[key]
        if not decode_launch:
            return SHALLOW_TWIN.get((head_dim, key[1], config), config)
    elif not decode_launch:
        return HYBRID_DECODE_TABLE.get(key, CONFIG_TABLE[key])
    elif page_size >= LARGE_PAGE and key in LARGE_PAGE_TABLE:
        config = LARGE_PAGE_TABLE[key]
    else:
        config = CONFIG_TABLE[key]
    if programs is not None and sm_count is not None:
        config = occupancy_twin(config, head_dim, key[1], programs, sm_count, equal_tasks,
                                one_task, item_keys, num_kv_heads, launch_order)
    return config


__all__ = ["CANDIDATES", "CAPPED_BACKFILL_MAX_ROUNDS", "CAPPED_BACKFILL_MAX_TASK_KEYS",
           "LONG_TASK_RATIO",
           "CAPPED_TWIN_MAX_COST", "CAPPED_TWIN",
           "CAPPED_TWIN_COST", "CAPPED_TWIN_SLACK", "CONFIG_TABLE", "DEEP_FILL_MIN", "EQUAL_RATIO",
           "EQUAL_SHARE", "HYBRID_DECODE_TABLE", "LARGE_GROUP", "ONE_TASK_SLACK", "REGIMES",
           "RESIDENT_PER_SM", "SEVERAL_ROUNDS_TWIN", "SHALLOW_TWIN", "SMALL_PAGE",
           "SMALL_PAGE_TABLE", "SHORT_TASK_MAX_KEYS", "SHORT_TASK_MIXED_MAX_KEYS",
           "SHORT_TASK_TWIN", "short_task_twin",
           "LARGE_PAGE", "LARGE_PAGE_TABLE", "WAVE_FILL_MARGIN", "WAVE_FILL_MARGIN_BY_TWIN",
           "KernelConfig", "config_key", "default_config", "element_bytes", "fits_one_task",
           "capped_twin", "in_order_finish", "occupancy_twin", "longest_first_config", "regime",
           "tasks_of_one_length", "wave_fill"]

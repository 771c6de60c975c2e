"""Compile-time configurations of the stage-1 decode kernel (kernels/decode.py), per shape.

A configuration is chosen from the shape (head_dim, the KV element size, the KV head count) and
the occupancy the plan assumes (plan.ctas_per_sm), never from kv_lens or the batch size: kv_lens
change every decode step, and a configuration that followed them would recompile and would change
a request's arithmetic with what else is in the batch. How the table was chosen:
docs/KERNEL_NOTES.md; `benchmarks/bench_kernels.py --sections shapes,configs` times every
candidate of `CANDIDATES` per shape and prints the table it would pick.

The choice, explicitly (`config_key` then `CONFIG_TABLE`):

  regime "one-per-sm"  when the plan assumes one program per SM (plan.ctas_per_sm == 1) or the
                       shape has a single KV head (num_kv_heads == 1, e.g. llama3-70b-tp8): a work
                       item is then one program, and the plans of such shapes (fixed 2048-token
                       chunks: 128 programs at 262,144 tokens for B = 8..64) leave about one
                       program per SM, where the per-program rate is everything. These get the
                       page-ahead variants: 2 K/V tiles in flight while a third is computed.
  regime "many"        otherwise: several programs per SM hide each other's latency; for 16-bit
                       caches the measured variants with about 64 KB of K+V per step.

  key = (head_dim, KV element bytes, regime); element bytes 4 are the float32 test inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

REGIMES = ("many", "one-per-sm")
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
    """

    block_n: int
    num_warps: int
    num_stages: int
    prefetch: bool = False
    page_ahead: bool = False

    def __post_init__(self) -> None:
        if self.block_n not in (16, 32, 64, 128, 256):
            raise ValueError(f"block_n: {self.block_n} not allowed; allowed: 16, 32, 64, 128, 256")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps: {self.num_warps} not allowed; allowed: 1, 2, 4, 8, 16")
        if not 1 <= self.num_stages <= 5:
            raise ValueError(f"num_stages: {self.num_stages} out of range; allowed: 1..5")

    def label(self) -> str:
        """Short text for tables: bn128-w4-s2 (+ -pf for the register prefetch)."""
        return (f"bn{self.block_n}-w{self.num_warps}-s{self.num_stages}"
                + ("-pf" if self.prefetch else "") + ("-pa" if self.page_ahead else ""))


def _c(block_n, warps, stages, prefetch=False, page_ahead=False) -> KernelConfig:
    return KernelConfig(block_n, warps, stages, prefetch, page_ahead)


def _pa(block_n, warps, stages) -> KernelConfig:
    return KernelConfig(block_n, warps, stages, page_ahead=True)


# (head_dim, KV element bytes, regime) -> configuration. Shared memory, registers and K/V tiles
# in flight below are from local sm_90 compiles (triton 3.9 TTGIR, ptxas -v; docs/KERNEL_NOTES.md
# "Config table"); none of the entries marked "predicted" has been timed on a GPU yet: the
# shape-configs section of benchmarks/bench_kernels.py times them against the alternatives.
# 16-bit "many": measured (H200 sweep of 2026-11-26, runs 1-3), about 64 KB of K+V per step,
#   one tile at a time (Triton keeps a single buffer when the page id is loaded in the same step).
# 16-bit "one-per-sm": predicted. The page-ahead variants keep 2 tiles (64 KB) in flight while a
#   third is computed, and leave room for 2 programs per SM (about 105 KB of shared memory, 128-144
#   registers); they replace the register-prefetch variants (one tile ahead, 202 registers, one
#   program per SM; measured +6..16% over the "many" entry with one program per SM).
# fp8 (1 byte): predicted. Page-ahead everywhere: the plain variants need 254-255 registers once
#   the e4m3 tiles are widened (2 programs per SM at head_dim 128, spills at 256).
# float32 (4 bytes): the precise tests only, not tuned.
CONFIG_TABLE: dict[tuple[int, int, str], KernelConfig] = {
    (64, 2, "many"): _c(256, 8, 2),
    (128, 2, "many"): _c(128, 4, 2),
    (256, 2, "many"): _c(64, 4, 2),
    (64, 2, "one-per-sm"): _pa(128, 4, 4),
    (128, 2, "one-per-sm"): _pa(64, 4, 4),
    (256, 2, "one-per-sm"): _pa(32, 4, 4),
    (64, 1, "many"): _pa(128, 4, 4),
    (128, 1, "many"): _pa(128, 4, 3),
    (256, 1, "many"): _pa(32, 4, 4),
    (64, 1, "one-per-sm"): _pa(128, 4, 4),
    (128, 1, "one-per-sm"): _pa(128, 4, 4),
    (256, 1, "one-per-sm"): _pa(64, 4, 4),
    (64, 4, "many"): _c(64, 4, 2),
    (128, 4, "many"): _c(32, 4, 2),
    (256, 4, "many"): _c(16, 4, 2),
    (64, 4, "one-per-sm"): _c(64, 4, 2),
    (128, 4, "one-per-sm"): _c(32, 4, 2),
    (256, 4, "one-per-sm"): _c(16, 4, 2),
}

# What the benchmark sweeps per (head_dim, KV element bytes): the table's entries, the measured
# earlier entries (plain and register-prefetch) and other depths of the page-ahead pipeline.
CANDIDATES: dict[tuple[int, int], tuple[KernelConfig, ...]] = {
    (64, 2): (_c(256, 8, 2), _pa(128, 4, 4), _pa(128, 4, 3), _c(128, 4, 2), _c(128, 8, 1, True)),
    (128, 2): (_c(128, 4, 2), _pa(64, 4, 4), _pa(64, 4, 3), _c(128, 8, 1, True), _pa(128, 8, 3),
               _pa(64, 8, 4)),
    (256, 2): (_c(64, 4, 2), _pa(32, 4, 4), _pa(32, 4, 3), _c(64, 8, 1, True), _c(32, 4, 2)),
    (64, 1): (_pa(128, 4, 4), _pa(128, 4, 3), _c(256, 8, 2), _pa(256, 8, 3)),
    (128, 1): (_pa(128, 4, 3), _pa(128, 4, 4), _c(128, 4, 2), _c(128, 8, 1, True), _pa(64, 4, 4),
               _pa(256, 8, 3)),
    (256, 1): (_pa(32, 4, 4), _pa(64, 4, 4), _pa(64, 4, 3), _c(64, 4, 2), _c(64, 8, 1, True)),
}


def element_bytes(dtype: torch.dtype) -> int:
    """Bytes per element of a torch dtype (1 for float8_e4m3fn)."""
    return torch.empty((), dtype=dtype).element_size()


def regime(num_kv_heads: int, ctas_per_sm: int | None) -> str:
    """"one-per-sm" when the plan assumes one program per SM or the shape has one KV head, else
    "many" (see the module docstring). Depends on the shape and the policy only."""
    return "one-per-sm" if ctas_per_sm == 1 or num_kv_heads == 1 else "many"


def config_key(head_dim: int, kv_element_bytes: int, num_kv_heads: int,
               ctas_per_sm: int | None) -> tuple[int, int, str]:
    """The CONFIG_TABLE key of a shape and a plan's occupancy; ValueError for an unknown size."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim: {head_dim} not allowed; allowed: 64, 128, 256")
    if kv_element_bytes not in (1, 2, 4):
        raise ValueError(f"kv element size: {kv_element_bytes} bytes not allowed; allowed: 1, 2, 4")
    return head_dim, kv_element_bytes, regime(num_kv_heads, ctas_per_sm)


def default_config(head_dim: int, dtype: torch.dtype, page_size: int,
                   ctas_per_sm: int | None = None, *, num_kv_heads: int = 8) -> KernelConfig:
    """The stage-1 configuration for a head_dim (64/128/256), KV page dtype and page size.

    dtype: the dtype of the K/V pages (torch.float8_e4m3fn for an fp8 cache). ctas_per_sm: the
    occupancy the plan assumes (plan.ctas_per_sm). num_kv_heads: the shape's KV heads (1 selects
    the one-program-per-SM regime). Never depends on kv_lens or the batch, so the number of
    compiled variants stays bounded and a request's arithmetic under a given policy does not
    change with what else is in the batch. page_size is part of the signature for future
    tuning; the current table does not distinguish page sizes.
    """
    return CONFIG_TABLE[config_key(head_dim, element_bytes(dtype), num_kv_heads, ctas_per_sm)]


__all__ = ["CANDIDATES", "CONFIG_TABLE", "REGIMES", "KernelConfig", "config_key",
           "default_config", "element_bytes", "regime"]

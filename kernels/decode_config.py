"""Compile-time configurations of the stage-1 decode kernel (kernels/decode.py), per shape.

A configuration is chosen from the head_dim, the element size and the occupancy the plan
assumes (plan.ctas_per_sm), never from kv_lens or the batch size: kv_lens change every decode
step, and a configuration that followed them would recompile and would change a request's
arithmetic with what else is in the batch. How the table was chosen: docs/KERNEL_NOTES.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KernelConfig:
    """Compile-time choices of the stage-1 kernel.

    block_n: tokens per inner step (a power of two, 16..256). num_warps: warps per program.
    num_stages: software-pipelining depth of the K/V loads (1..5).
    prefetch: software-pipeline the K/V loads by hand through registers (block i+1 loaded
        while block i is computed) instead of Triton's shared-memory pipeliner.
    """

    block_n: int
    num_warps: int
    num_stages: int
    prefetch: bool = False

    def __post_init__(self) -> None:
        if self.block_n not in (16, 32, 64, 128, 256):
            raise ValueError(f"block_n: {self.block_n} not allowed; allowed: 16, 32, 64, 128, 256")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps: {self.num_warps} not allowed; allowed: 1, 2, 4, 8, 16")
        if not 1 <= self.num_stages <= 5:
            raise ValueError(f"num_stages: {self.num_stages} out of range; allowed: 1..5")


# Per (head_dim, element bytes), chosen by the sweep of benchmarks/bench_kernels.py on an H200
# (2026-11-26, docs/KERNEL_NOTES.md): 64 KB of K+V per step for 16-bit inputs, two stages.
# The float32 entries serve the precise tests only and are not tuned.
_DEFAULT_CONFIGS = {
    (64, 2): KernelConfig(block_n=256, num_warps=8, num_stages=2),
    (128, 2): KernelConfig(block_n=128, num_warps=4, num_stages=2),
    (256, 2): KernelConfig(block_n=64, num_warps=4, num_stages=2),
    (64, 4): KernelConfig(block_n=64, num_warps=4, num_stages=2),
    (128, 4): KernelConfig(block_n=32, num_warps=4, num_stages=2),
    (256, 4): KernelConfig(block_n=16, num_warps=4, num_stages=2),
}


# Plans that hold one program per SM (plan.ctas_per_sm == 1, e.g. FA3's persistent grid) leave
# one program's loads in flight per SM; there the register-prefetch variant keeps more bytes
# moving (H200, 2026-11-26: FA3's uniform batch-64 plan 410 -> 346 us at head_dim 128). At
# head_dim 64 it was slower, so that size keeps its default.
_ONE_PROGRAM_PER_SM_CONFIGS = {
    (128, 2): KernelConfig(block_n=128, num_warps=8, num_stages=1, prefetch=True),
    (256, 2): KernelConfig(block_n=64, num_warps=8, num_stages=1, prefetch=True),
}


def default_config(head_dim: int, dtype: torch.dtype, page_size: int,
                   ctas_per_sm: int | None = None) -> KernelConfig:
    """The tuned stage-1 configuration for a head_dim (64/128/256), dtype and page size.

    ctas_per_sm: the occupancy the plan assumes (plan.ctas_per_sm); 1 selects the variant for
    one program per SM where one is tuned. Never depends on kv_lens or the batch, so the number
    of compiled variants stays bounded and a request's arithmetic under a given policy does not
    change with what else is in the batch. page_size is part of the key for future tuning; the
    current table does not distinguish page sizes.
    """
    elem = torch.empty((), dtype=dtype).element_size()
    key = (head_dim, elem)
    if key not in _DEFAULT_CONFIGS:
        raise ValueError(f"head_dim: {head_dim} not allowed; allowed: 64, 128, 256")
    if ctas_per_sm == 1 and key in _ONE_PROGRAM_PER_SM_CONFIGS:
        return _ONE_PROGRAM_PER_SM_CONFIGS[key]
    return _DEFAULT_CONFIGS[key]


__all__ = ["KernelConfig", "default_config"]

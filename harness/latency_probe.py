"""A memory-latency probe: one dependent-load chain per SM through a buffer much larger than L2.

Why (harness/interference.py): on a fresh H200 the llama3-70b-tp8 decode (one program per SM,
latency-bound) read 2x slow in windows of seconds while the SM and memory clocks stayed at
1980 / 3201 MHz with no clock-event reason and a large copy lost only 5-10% of its bandwidth
(benchmarks/interference_probe.py, 18:34 UTC). What slows such a kernel is the latency of a
load that misses L2, so that is what this probe times: each program follows a random cyclic
permutation of int64 slots (every hop a dependent load to a random place in a buffer of 8 x L2,
at least 256 MiB), `steps` hops, one program per SM. Its time is steps x the loaded latency; the
guard compares it with its quiet value.

`chase_permutation` builds the cycle; `follow_chain` is the Triton kernel (it runs under the
interpreter on CPU for the tests); `LatencyProbe.hops_per_s()` is the probe the guard calls.
Units: hops per second (higher is quieter), bytes.
"""

from __future__ import annotations

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kvtune.harness.timers_cuda import HostPace  # noqa: E402

__all__ = ["LatencyProbe", "chase_permutation", "follow_chain"]

# The host time one probe launch is allowed (us): HostPace sleeps 1.5x that on the GPU first.
PROBE_HOST_US = 1000.0


@triton.jit
def _follow_chain_kernel(next_ptr, start_ptr, out_ptr, steps):
    """Program p follows next[] from start[p] for `steps` hops and stores where it ended (the
    store keeps the loads from being dropped)."""
    p = tl.program_id(0)
    idx = tl.load(start_ptr + p)
    for _ in range(steps):
        idx = tl.load(next_ptr + idx)
    tl.store(out_ptr + p, idx)


def chase_permutation(num_slots: int, generator=None, device="cpu"):
    """next[] of one random cycle through all `num_slots` slots (int64), and the cycle order."""
    import torch

    if num_slots < 2:
        raise ValueError(f"num_slots: {num_slots} too small; allowed: >= 2")
    order = torch.randperm(num_slots, generator=generator, device="cpu").to(device)
    nxt = torch.empty(num_slots, dtype=torch.int64, device=device)
    nxt[order] = torch.roll(order, -1)
    return nxt, order


def follow_chain(nxt, starts, steps: int):
    """Launch one program per start; returns the slot each chain ends on after `steps` hops."""
    import torch

    if steps < 1:
        raise ValueError(f"steps: {steps} too small; allowed: >= 1")
    out = torch.empty_like(starts)
    _follow_chain_kernel[(starts.shape[0],)](nxt, starts, out, steps)
    return out


class LatencyProbe:
    """Times `steps` dependent loads per SM (one program each) through a random cycle over
    8 x L2 bytes (at least 256 MiB); `hops_per_s()` is steps over the median of `runs` timings."""

    def __init__(self, device=None, nbytes: int | None = None, steps: int = 256,
                 runs: int = 3) -> None:
        import torch

        self.device = torch.device("cuda") if device is None else torch.device(device)
        props = torch.cuda.get_device_properties(self.device)
        l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
        slots = int(nbytes or max(8 * l2, 256 << 20)) // 8
        gen = torch.Generator().manual_seed(0)
        self.next, order = chase_permutation(slots, gen, self.device)
        sms = int(props.multi_processor_count)
        # chains start evenly spaced along the one cycle, so they never share a hop
        self.starts = order[torch.arange(sms, device=self.device) * (slots // sms)].contiguous()
        self.steps, self.runs = int(steps), int(runs)

    def hops_per_s(self) -> float:
        import torch

        times_ms = []
        with torch.cuda.device(self.device):
            follow_chain(self.next, self.starts, self.steps)  # compiled and resident
            for _ in range(self.runs):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                # The chain's launch must be queued before the GPU reaches the start event, or
                # the pair times the host's launch (20-200 us of Python and Triton, against
                # a chain of 150-250 us): a slow host would read as a disturbed GPU.
                HostPace(PROBE_HOST_US).lead_in(1)
                start.record()
                follow_chain(self.next, self.starts, self.steps)
                end.record()
                end.synchronize()
                times_ms.append(start.elapsed_time(end))
        times_ms.sort()
        return self.steps / (times_ms[len(times_ms) // 2] * 1e-3)

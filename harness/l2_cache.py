"""Keeping the L2 cache cold between timed iterations: the flush buffer and input rotation.

Eager timers (events, cupti) flush L2 before every timed iteration by writing a buffer of at
least twice the L2 size (and reading it back, see READ_BACK), outside the timed span. A CUDA graph replays many launches back to back
with nothing in between, so under `graph` the inputs are rotated instead: the graph launches the
work once per input copy, and the copies together exceed three times L2, so by the time a copy
comes round again everything it left in L2 has been evicted. A known bug elsewhere is rotation
that silently touches only the first copies; `rotation_schedule` is the one place the order is
decided and it visits every copy, which the tests check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

FLUSH_FACTOR = 2  # the flush buffer is this many times the L2 size
ROTATION_FACTOR = 3  # rotated copies together exceed this many times the L2 size
MIN_COPIES_COLD = 2  # with one copy, its own tail would still be in L2 at the next launch
MAX_COPIES = 4096


def flush_bytes(l2_bytes: int) -> int:
    """Size of the L2 flush buffer: FLUSH_FACTOR x L2, rounded up to 4 KiB (at least 4 KiB)."""
    if l2_bytes < 0:
        raise ValueError(f"l2_bytes: {l2_bytes} must be >= 0")
    return max(4096, -(-FLUSH_FACTOR * int(l2_bytes) // 4096) * 4096)


def copies_needed(l2_bytes: int, bytes_per_copy: int, cold_l2: bool = True) -> int:
    """Input copies a graph must rotate through so each launch starts with a cold L2.

    l2_bytes: the device's L2 size (> 0). bytes_per_copy: bytes one input set occupies (what one
    launch reads and writes), > 0. Hot runs need 1 copy. Cold runs need enough copies that together
    they exceed ROTATION_FACTOR x L2, and at least MIN_COPIES_COLD. ValueError past MAX_COPIES.
    """
    if not cold_l2:
        return 1
    if l2_bytes <= 0:
        raise ValueError(f"l2_bytes: {l2_bytes} must be > 0 for cold-L2 rotation")
    if bytes_per_copy <= 0:
        raise ValueError(f"bytes_per_copy: {bytes_per_copy} must be > 0")
    # "exceed": strictly more than ROTATION_FACTOR x L2 in total
    n = ROTATION_FACTOR * int(l2_bytes) // int(bytes_per_copy) + 1
    n = max(MIN_COPIES_COLD, n)
    if n > MAX_COPIES:
        raise ValueError(
            f"bytes_per_copy: {bytes_per_copy} bytes would need {n} copies to exceed "
            f"{ROTATION_FACTOR} x L2 ({l2_bytes} bytes); allowed: at most {MAX_COPIES} copies"
        )
    return n


def rotation_schedule(num_copies: int, launches: int) -> list[int]:
    """Copy index of each launch in a graph: 0, 1, ..., num_copies-1, 0, 1, ...

    launches must be a positive multiple of num_copies, so every copy is used equally often and
    every copy is used at least once.
    """
    if num_copies < 1:
        raise ValueError(f"num_copies: {num_copies} must be >= 1")
    if launches < num_copies or launches % num_copies:
        raise ValueError(
            f"launches: {launches} must be a positive multiple of num_copies ({num_copies})"
        )
    return [i % num_copies for i in range(launches)]


def launches_per_replay(num_copies: int, estimate_us: float, min_replay_us: float = 200.0,
                        max_launches: int = 10_000) -> int:
    """Launches captured in one graph: a multiple of num_copies long enough that one replay lasts
    at least `min_replay_us` (so the graph launch and the event pair around it are amortised)."""
    if num_copies < 1:
        raise ValueError(f"num_copies: {num_copies} must be >= 1")
    est = estimate_us if (math.isfinite(estimate_us) and estimate_us > 0) else min_replay_us
    rounds = max(1, math.ceil(min_replay_us / (est * num_copies)))
    rounds = min(rounds, max(1, max_launches // num_copies))
    return num_copies * rounds


def launch_rotation(fn: Callable[[object], object], inputs: Sequence[object],
                    schedule: Sequence[int]) -> None:
    """Call fn(inputs[i]) for each i of `schedule`: what a graph capture records."""
    for index in schedule:
        fn(inputs[index])


def tensor_bytes(obj) -> int:
    """Bytes of the distinct torch tensors inside obj (nested tuples, lists, dicts, dataclasses).

    The same tensor reached twice is counted once, so inputs shared by every copy (for example
    plan index tensors) do not inflate the rotation's footprint.
    """
    seen: dict[tuple, int] = {}
    _collect_tensors(obj, seen, depth=0)
    return int(sum(seen.values()))


def distinct_bytes(inputs: Sequence[object]) -> int:
    """Bytes of the distinct tensors across all input copies (shared tensors counted once)."""
    seen: dict[tuple, int] = {}
    for item in inputs:
        _collect_tensors(item, seen, depth=0)
    return int(sum(seen.values()))


def _collect_tensors(obj, seen: dict[tuple, int], depth: int) -> None:
    if depth > 8 or obj is None:
        return
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return
    if isinstance(obj, torch.Tensor):
        # keyed by where the tensor starts and how long it is: the same tensor passed in every
        # copy counts once, distinct views count for the bytes they span
        nbytes = obj.numel() * obj.element_size()
        seen[(obj.device.type, obj.device.index, obj.data_ptr(), nbytes)] = nbytes
        return
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif hasattr(obj, "__dataclass_fields__"):
        items = [getattr(obj, name) for name in obj.__dataclass_fields__]
    else:
        return
    for item in items:
        _collect_tensors(item, seen, depth + 1)


# Read the flush buffer back after writing it. A write-only flush leaves L2 full of dirty lines,
# and the timed kernel then pays for writing them back to memory as it evicts them: on an H200
# (2026-11-26) that made a cold 280 us decode read about 3% slower than the same decode under
# graph rotation, which leaves only clean input lines behind. Reading the buffer back writes the
# dirty lines out during the flush, outside the timed span, and leaves clean lines.
READ_BACK = True


class L2Flusher:
    """Evicts L2 by writing a buffer of FLUSH_FACTOR x L2 bytes on the current stream, then (with
    read_back, default READ_BACK) reading it back so the lines left in L2 are clean.

    The value written changes every flush, so no write can be skipped as a no-op.
    """

    def __init__(self, l2_bytes: int, device, read_back: bool | None = None) -> None:
        import torch

        self.nbytes = flush_bytes(l2_bytes)
        self.read_back = READ_BACK if read_back is None else bool(read_back)
        self._buffer = torch.empty(self.nbytes // 4, dtype=torch.int32, device=device)
        self._sink = torch.empty((), dtype=torch.int32, device=device)
        self._value = 0

    def flush(self) -> None:
        import torch

        self._value = (self._value + 1) & 0x3FFFFFFF
        self._buffer.fill_(self._value)
        if self.read_back:
            torch.amax(self._buffer, dim=0, out=self._sink)

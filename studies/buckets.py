"""Batch-size buckets: a tuned heuristic holds one SplitParams per range of batch sizes.

Default buckets are 1-8, 9-32, 33-128 and 129-512; a suite with larger batches adds ranges that
each grow fourfold (513-2048, 2049-8192, ...) until its largest batch is covered. `--buckets`
replaces them ("1-8,9-32,33-128"). Buckets that hold no case of the suite are dropped; a case
outside every given bucket is a ValueError (it would be measured by nothing).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from kvtune.kernels.plan import MAX_BATCH

DEFAULT_BUCKETS = ((1, 8), (9, 32), (33, 128), (129, 512))


@dataclass(frozen=True)
class BatchBucket:
    """Batch sizes min_batch..max_batch (inclusive), 1..MAX_BATCH."""

    min_batch: int
    max_batch: int

    @property
    def name(self) -> str:
        return f"{self.min_batch}-{self.max_batch}"

    def holds(self, batch_size: int) -> bool:
        return self.min_batch <= batch_size <= self.max_batch


def parse_buckets(text: str) -> tuple[BatchBucket, ...]:
    """'1-8,9-32' -> buckets in increasing order; ValueError names `buckets` and the format."""
    out = []
    for item in str(text).split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
            raise ValueError(f"buckets: {item!r} in {text!r} is not LO-HI; allowed: comma-separated "
                             "ranges like 1-8,9-32,33-128")
        lo_i, hi_i = int(lo), int(hi)
        if not 1 <= lo_i <= hi_i <= MAX_BATCH:
            raise ValueError(f"buckets: {item!r} not allowed; allowed: 1 <= LO <= HI <= {MAX_BATCH}")
        out.append(BatchBucket(lo_i, hi_i))
    out.sort(key=lambda b: b.min_batch)
    for prev, cur in itertools.pairwise(out):
        if cur.min_batch <= prev.max_batch:
            raise ValueError(f"buckets: {prev.name} and {cur.name} overlap; allowed: disjoint ranges")
    return tuple(out)


def default_buckets(max_batch_size: int) -> tuple[BatchBucket, ...]:
    """The default ranges, extended fourfold past 512 until `max_batch_size` is covered."""
    ranges = list(DEFAULT_BUCKETS)
    while ranges[-1][1] < max_batch_size:
        lo = ranges[-1][1] + 1
        ranges.append((lo, min(ranges[-1][1] * 4, MAX_BATCH)))
    return tuple(BatchBucket(lo, hi) for lo, hi in ranges)


def assign_cases(cases, buckets: tuple[BatchBucket, ...] | None = None, size=None):
    """[(bucket, [case, ...]), ...] in bucket order, cases in suite order, empty buckets dropped.

    cases: objects with `case_id`; size(case) gives its batch size (default `case.batch_size`;
    the study passes the drawn batch's size, which a `continuous` case may make smaller than its
    nominal one). buckets: None for the defaults. ValueError when a case is outside every bucket.
    """
    cases = list(cases)
    size = size or (lambda c: c.batch_size)
    if not cases:
        raise ValueError("cases: none; allowed: a suite with at least one case")
    if buckets is None:
        buckets = default_buckets(max(size(c) for c in cases))
    out = []
    for bucket in buckets:
        held = [c for c in cases if bucket.holds(size(c))]
        if held:
            out.append((bucket, held))
    covered = {c.case_id for _, held in out for c in held}
    missing = [c for c in cases if c.case_id not in covered]
    if missing:
        raise ValueError(f"buckets: case {missing[0].case_id} (batch {size(missing[0])}) is in "
                         f"no bucket of {','.join(b.name for b in buckets)}; allowed: buckets that "
                         "cover every batch size of the suite")
    return out


__all__ = ["DEFAULT_BUCKETS", "BatchBucket", "assign_cases", "default_buckets", "parse_buckets"]

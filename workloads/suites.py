"""Workload cases and named suites of them: what a tuning study or a benchmark run measures.

A `Case` is one decode batch described by its recipe (distribution, params, batch size, attention
shape, seed); `case.batch()` makes the DecodeBatch. A `Suite` is a named tuple of cases.
`get_suite(name)` builds a named suite, `make_suite(distribution, batch_sizes, ...)` an ad-hoc one
(the CLI's `--distribution skew80 --batch-sizes 1,8,64`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

import numpy as np

from kvtune.kernels.plan import AttentionShape
from kvtune.workloads import distributions as dists
from kvtune.workloads.batch import DecodeBatch
from kvtune.workloads.hybrid import holdout_hybrid_cases, hybrid_cases, quick_hybrid_cases
from kvtune.workloads.shapes import DEFAULT_SHAPE_NAME, get_shape
from kvtune.workloads.traces import builtin_trace_names

THRESHOLD_TOTAL_TOKENS = 262_144
THRESHOLD_DISTRIBUTIONS = ("uniform", "skew40", "skew60", "skew80", "2x40")
# H100 / H200, the GPUs of BACKGROUND.md's measurements, both have 132 SMs.
THRESHOLD_SM_COUNT = 132
REALISTIC_BATCH_SIZES = (8, 16, 32, 48, 64, 96, 128, 192, 256)
PROD_MIX_SEEDS = (0, 1, 2)
TRACE_SEEDS = (0, 1)

_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9._+-]+$")


@dataclass(frozen=True, eq=False)
class Case:
    """One workload: `batch_size` requests from distribution `distribution` with `params`, on
    attention shape `shape`, drawn with `seed` (0..2**63-1).

    params are stored resolved (every parameter of the distribution, defaults filled in).
    For `continuous` batch_size is the simulator's max batch; the batch may be smaller.
    """

    distribution: str
    params: dict = field(default_factory=dict)
    batch_size: int = 1
    shape: AttentionShape = field(default_factory=AttentionShape)
    seed: int = 0

    def __post_init__(self) -> None:
        dists.check_batch_size(self.batch_size)
        dists.check_seed(self.seed)
        if not isinstance(self.shape, AttentionShape):
            raise ValueError(f"shape: {self.shape!r} is not an AttentionShape")
        object.__setattr__(self, "params", dists.resolve_params(self.distribution, self.params))
        object.__setattr__(self, "batch_size", int(self.batch_size))
        object.__setattr__(self, "seed", int(self.seed))

    @property
    def case_id(self) -> str:
        """Stable id of the kv_lens recipe: "<distribution>:B<batch>:seed<seed>" plus
        ":<param>=<value>,..." for the params that differ from the defaults (sorted by name;
        values that are not plain numbers or words appear as an 8-hex-digit hash). The shape is
        not part of it: it is recorded next to the id."""
        parts = [f"{self.distribution}:B{self.batch_size}:seed{self.seed}"]
        defaults = _resolved_defaults(self.distribution)
        changed = [(k, v) for k, v in sorted(self.params.items()) if v != defaults.get(k)]
        if changed:
            parts.append(",".join(f"{k}={_id_value(v)}" for k, v in changed))
        return ":".join(parts)

    def kv_lens(self) -> np.ndarray:
        """int64 [batch_size] (for `continuous`, 1..batch_size entries) tokens."""
        return dists.sample_kv_lens(self.distribution, self.batch_size, self.params, self.seed)

    def batch(self) -> DecodeBatch:
        return DecodeBatch(self.kv_lens(), shape=self.shape, seed=self.seed,
                           distribution=self.distribution, params=dict(self.params),
                           label=self.case_id)

    def to_dict(self) -> dict:
        return {"case_id": self.case_id, "distribution": self.distribution,
                "params": dict(self.params), "batch_size": self.batch_size,
                "seed": self.seed, "shape": self.shape.to_dict()}


def _resolved_defaults(name: str) -> dict:
    try:
        return dists.resolve_params(name, {})
    except ValueError:  # a required parameter (trace's path) has no default to resolve
        return dists.get_distribution(name).defaults()


def _id_value(value) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value)
    if isinstance(value, (int, float, str)) and _PLAIN_VALUE.match(text):
        return text
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Suite:
    """A named, ordered set of cases."""

    name: str
    cases: tuple[Case, ...]
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cases", tuple(self.cases))
        if not self.cases:
            raise ValueError(f"cases: suite {self.name!r} has none; allowed: at least one case")
        ids = [c.case_id for c in self.cases]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"cases: case {dup!r} appears twice in suite {self.name!r}")

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self):
        return iter(self.cases)


def threshold_batch_sizes(num_kv_heads: int, sm_count: int = THRESHOLD_SM_COUNT) -> tuple[int, ...]:
    """1, 2, 4, ..., 512, the neighbours of FlashInfer's tensor-core split-KV threshold, and 48.

    The tensor-core planner turns split-KV off once B > floor(2 * sm_count / num_kv_heads)
    (BACKGROUND.md section 3): 33 for 132 SMs and 8 KV heads, so 32, 33, 34, 35 are added
    (for another shape the same neighbours of its own threshold). 48 is measured in BACKGROUND.
    """
    t = 2 * sm_count // num_kv_heads
    sizes = {2**i for i in range(10)} | {t - 1, t, t + 1, t + 2, 48}
    return tuple(sorted(s for s in sizes if s >= 1))


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """"1,8,64" -> (1, 8, 64). ValueError names batch_sizes for an empty list or a bad entry."""
    out = []
    for item in str(text).split(","):
        item = item.strip()
        if not item.isdigit():
            raise ValueError(f"batch_sizes: {item!r} in {text!r} is not a positive integer; "
                             "allowed: comma-separated integers >= 1")
        out.append(int(item))
    for b in out:
        dists.check_batch_size(b)
    return tuple(out)


def make_suite(distribution: str, batch_sizes, params: dict | None = None, seeds=(0,),
               shape: AttentionShape | str | None = None, name: str | None = None,
               description: str = "") -> Suite:
    """An ad-hoc suite: every batch size times every seed of one distribution.

    batch_sizes: iterable of ints or a string "1,8,64". seeds: ints 0..2**63-1.
    """
    if isinstance(batch_sizes, str):
        batch_sizes = parse_batch_sizes(batch_sizes)
    batch_sizes = tuple(batch_sizes)
    if not batch_sizes:
        raise ValueError("batch_sizes: empty; allowed: one or more integers >= 1")
    dists.get_distribution(distribution)
    resolved_shape = _shape(shape)
    cases = [Case(distribution, dict(params or {}), b, resolved_shape, s)
             for b in batch_sizes for s in seeds]
    return Suite(name or distribution, tuple(cases),
                 description or f"{distribution} at batch sizes {', '.join(map(str, batch_sizes))}")


def _threshold(shape: AttentionShape) -> Suite:
    sizes = threshold_batch_sizes(shape.num_kv_heads)
    cases = [Case(d, {"total_tokens": THRESHOLD_TOTAL_TOKENS}, b, shape, 0)
             for d in THRESHOLD_DISTRIBUTIONS for b in sizes]
    return Suite("threshold", tuple(cases),
                 "the seed article's experiment: 262,144 tokens in total split as uniform, skew40, "
                 "skew60, skew80 and 2x40, at batch sizes " + ", ".join(map(str, sizes)))


def _prod_mix(shape: AttentionShape) -> Suite:
    cases = [Case("prod-mix", {}, b, shape, s) for b in REALISTIC_BATCH_SIZES for s in PROD_MIX_SEEDS]
    return Suite("prod-mix", tuple(cases),
                 "the synthetic production-like mix (4K..128K, weights 35/20/15/12/10/8) at batch "
                 f"sizes 8..256, seeds {', '.join(map(str, PROD_MIX_SEEDS))}")


def _traces(shape: AttentionShape) -> Suite:
    cases = [Case(t, {}, b, shape, s) for t in builtin_trace_names()
             for b in REALISTIC_BATCH_SIZES for s in TRACE_SEEDS]
    return Suite("traces", tuple(cases),
                 "decode-weighted kv_lens of public serving traces (" + ", ".join(builtin_trace_names())
                 + f") at batch sizes 8..256, seeds {', '.join(map(str, TRACE_SEEDS))}")


def _smoke(shape: AttentionShape) -> Suite:
    cases = [
        Case("uniform", {"total_tokens": 4096}, 4, shape),
        Case("skew80", {"total_tokens": 4096}, 4, shape),
        Case("2x40", {"total_tokens": 8192}, 8, shape),
        Case("uniform-range", {"lo": 16, "hi": 1024}, 6, shape, seed=1),
        Case("lognormal", {"median_tokens": 512, "sigma": 0.5, "max_kv_len": 2048}, 5, shape, seed=2),
    ]
    return Suite("smoke", tuple(cases), "a handful of small batches (at most 8,192 tokens) for tests")


def _hybrid(shape: AttentionShape) -> Suite:
    return Suite("hybrid", hybrid_cases(shape),
                 "hybrid batches (workloads/hybrid.py): POD-Attention's sweep (one prefill chunk of "
                 "512..2048 tokens after a 4K..20K prefix beside 8..256 decodes of that context) "
                 "and steps of the chunked-prefill simulator with speculative decoding")


def _hybrid_quick(shape: AttentionShape) -> Suite:
    return Suite("hybrid-quick", quick_hybrid_cases(shape),
                 "20 cases of the hybrid suite for a short tuning run: the sweep at 4K and 16K "
                 "context, chunks 512 and 2048, 16/64/256 decodes, and one seed of every mix")


def _hybrid_holdout(shape: AttentionShape) -> Suite:
    return Suite("hybrid-holdout", holdout_hybrid_cases(shape),
                 "30 hybrid batches no other suite holds (the default validation of a hybrid "
                 "tune): contexts 6K/12K, chunks 768/1536, 12..192 decodes, their halves, and "
                 "mixes of other budgets, drafts and prompts at seeds 100/101")


def _calibrate(shape: AttentionShape) -> Suite:
    """Batches chosen to tell the simulator's constants apart (harness/calibration.py): the
    streaming rate (uniform, 262,144 tokens, 1..256 requests), the per-CTA cap (one long request:
    skew80), fixed and launch costs (small totals), wave tails (2x40, 96/192 requests), and
    production-like mixes. With the calibrate policy set (benchmarks/calibrate_gpu.sh) it also
    varies splits, CTAs per SM and schedules."""
    t = THRESHOLD_TOTAL_TOKENS
    cases = [Case("uniform", {"total_tokens": t}, b, shape) for b in (1, 4, 16, 64, 256)]
    cases += [Case("skew80", {"total_tokens": t}, b, shape) for b in (8, 32, 48, 128)]
    cases += [Case("uniform", {"total_tokens": 16_384}, b, shape) for b in (1, 8, 64)]
    cases += [Case("2x40", {"total_tokens": t}, b, shape) for b in (16, 96)]
    cases += [Case("uniform", {"total_tokens": 65_536}, b, shape) for b in (32, 192)]
    cases += [Case("prod-mix", {}, b, shape, 0) for b in (16, 64, 256)]
    return Suite("calibrate", tuple(cases),
                 "batches that identify the simulator's constants: uniform 1..256 requests, "
                 "skew80, small totals, 2x40 and prod-mix (kvtune calibrate)")


_SUITES = {"threshold": _threshold, "prod-mix": _prod_mix, "traces": _traces, "smoke": _smoke,
           "hybrid": _hybrid, "hybrid-quick": _hybrid_quick, "hybrid-holdout": _hybrid_holdout,
           "calibrate": _calibrate}


def suite_names() -> list[str]:
    return list(_SUITES)


def get_suite(name: str, shape: AttentionShape | str | None = None) -> Suite:
    """The named suite on `shape` (an AttentionShape, a shape name, or None for llama3-8b)."""
    if name not in _SUITES:
        raise ValueError(f"suite: {name!r} unknown; allowed: {', '.join(_SUITES)}")
    return _SUITES[name](_shape(shape))


def _shape(shape: AttentionShape | str | None) -> AttentionShape:
    if shape is None:
        return get_shape(DEFAULT_SHAPE_NAME)
    if isinstance(shape, str):
        return get_shape(shape)
    if not isinstance(shape, AttentionShape):
        raise ValueError(f"shape: {shape!r} is not an AttentionShape or a shape name")
    return shape


__all__ = [
    "REALISTIC_BATCH_SIZES",
    "THRESHOLD_DISTRIBUTIONS",
    "THRESHOLD_TOTAL_TOKENS",
    "Case",
    "Suite",
    "get_suite",
    "make_suite",
    "parse_batch_sizes",
    "suite_names",
    "threshold_batch_sizes",
]

"""Which cases a run measures: a named suite, or one distribution at some batch sizes and seeds.

`CaseSettings` is the plain settings object that `kvtune bench` and `kvtune tune` fill from their
flags (kvtune.cli); `resolve_shape` and `resolve_suite` turn it into an AttentionShape and a
Suite, raising ValueError that names the field for bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvtune.kernels.plan import AttentionShape
from kvtune.kernels.specs import parse_assignments, parse_int_list
from kvtune.workloads import hybrid
from kvtune.workloads.shapes import DEFAULT_SHAPE_NAME, get_shape
from kvtune.workloads.suites import Suite, get_suite, make_suite, parse_batch_sizes

HEAD_FIELDS = ("num_qo_heads", "num_kv_heads", "head_dim")


@dataclass(frozen=True)
class CaseSettings:
    """What chooses the cases of a run.

    suite: a suite name (default smoke when no distribution is given). distribution,
    batch_sizes ("1,8,64"), params (["KEY=VALUE", ...]), seeds ("0,1"): one distribution
    instead. shape: a shape name; page_size (tokens), dtype, kv_dtype ("bf16", "fp16",
    "fp8_e4m3"; default: dtype) and the head counts override it.
    """

    suite: str | None = None
    distribution: str | None = None
    batch_sizes: str | None = None
    params: tuple[str, ...] = field(default_factory=tuple)
    seeds: str = "0"
    shape: str | None = None
    page_size: int | None = None
    dtype: str | None = None
    kv_dtype: str | None = None
    num_qo_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    q_len: int | None = None

    def shape_given(self) -> bool:
        """True when any shape setting was given (a heuristic file's shape is used otherwise)."""
        return any(getattr(self, k) is not None
                   for k in ("shape", "page_size", "dtype", "kv_dtype", *HEAD_FIELDS))


def resolve_shape(settings: CaseSettings) -> AttentionShape:
    """The named shape with page size, dtype and head overrides applied."""
    shape = get_shape(settings.shape or DEFAULT_SHAPE_NAME, page_size=settings.page_size,
                      dtype=settings.dtype, kv_dtype=settings.kv_dtype)
    heads = {k: getattr(settings, k) for k in HEAD_FIELDS if getattr(settings, k) is not None}
    return replace(shape, **heads) if heads else shape


def resolve_suite(settings: CaseSettings, shape: AttentionShape) -> Suite:
    """The Suite chosen by `suite` or `distribution`/`batch_sizes`; ValueError for bad input."""
    if settings.suite and settings.distribution:
        raise ValueError("suite: give --suite or --distribution, not both")
    if settings.distribution:
        if not settings.batch_sizes:
            raise ValueError("batch-sizes: --distribution needs --batch-sizes, e.g. 1,8,64")
        seeds = parse_int_list(settings.seeds, "seeds", 0, 2**63 - 1)
        params = parse_assignments(settings.params, "param")
        if settings.distribution == hybrid.DISTRIBUTION:
            cases = hybrid.make_hybrid_cases(parse_batch_sizes(settings.batch_sizes), params,
                                             seeds, shape, settings.q_len)
            return Suite("hybrid", cases, "hybrid batches at batch sizes " + settings.batch_sizes)
        suite = make_suite(settings.distribution, settings.batch_sizes, params, seeds=seeds,
                           shape=shape)
    else:
        if settings.params or settings.batch_sizes:
            raise ValueError("param: --param and --batch-sizes go with --distribution, not --suite")
        suite = get_suite(settings.suite or "smoke", shape=shape)
    if settings.q_len is None:
        return suite
    if settings.suite in hybrid.HYBRID_SUITES:
        raise ValueError(f"q-len: the {settings.suite} suite sets its own q_lens; use "
                         "--distribution hybrid --q-len K")
    cases = tuple(hybrid.SpeculativeCase(c, settings.q_len) for c in suite.cases)
    return Suite(suite.name, cases, f"{suite.description}; every decode verifies "
                 f"{settings.q_len} tokens")


__all__ = ["CaseSettings", "resolve_shape", "resolve_suite"]

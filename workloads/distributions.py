"""Named kv_len distributions: every way kvtune makes the request lengths of a decode batch.

`sample_kv_lens(name, batch_size, params, seed)` is the one entry point. Each draw uses its own
`numpy.random.default_rng(seed)` (PCG64), never global state, so the same (name, params,
batch_size, seed) gives the same int64 kv_lens on any machine.

Families (DISTRIBUTIONS lists every name with its parameters, defaults, units and ranges):
- fixed total: `uniform`, `skew`, `skew40`, `skew60`, `skew80`, `2x40`. The total is split
  exactly; long requests come first (index 0, and 1 for 2x40); no randomness (the seed is
  accepted and ignored). These are the experiment of the seed article
  (shared/seeds/decode-batch-load-imbalance-article.txt).
- per request, i.i.d.: `uniform-range`, `prod-mix`, `lognormal`, `pareto`, `trace` (a trace file)
  and the built-in traces `azure-conv`, `azure-code`, `mooncake`, `arxiv`, `sharegpt`
  (workloads/traces.py). Only these can feed the prompt/output lengths of `continuous`.
- `continuous`: a step of the continuous-batching simulator (workloads/continuous.py, which
  registers it here: it builds on the per-request distributions); its batch size is an
  output, at most `batch_size`. Importing kvtune.workloads registers it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvtune.kernels.plan import MAX_BATCH, MAX_KV_LEN_TOKENS
from kvtune.workloads import traces

DEFAULT_TOTAL_TOKENS = 262_144
DEFAULT_MAX_KV_LEN = 131_072
PROD_MIX_KV_LENS = (4096, 8192, 16384, 32768, 65536, 131072)
PROD_MIX_WEIGHTS = (35, 20, 15, 12, 10, 8)
_MAX_TOTAL_TOKENS = MAX_BATCH * MAX_KV_LEN_TOKENS


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a distribution.

    kind: "int", "float", "str" or "dict". lo/hi: inclusive numeric range. default None marks a
    parameter that may stay unset (its description says what unset means).
    """

    name: str
    kind: str
    default: object
    description: str
    lo: float | None = None
    hi: float | None = None

    def allowed(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"{self.kind} in {_num(self.lo)}..{_num(self.hi)}"
        return {"str": "a string", "dict": "a mapping of parameter names to values"}.get(self.kind,
                                                                                          self.kind)

    def coerce(self, value, prefix: str = ""):
        """`value` as this parameter's type, range-checked; numeric strings are parsed (CLI)."""
        field = prefix + self.name
        if value is None and self.default is None:
            return None
        bad = ValueError(f"{field}: {value!r} not allowed; allowed: {self.allowed()}")
        if self.kind == "str":
            if isinstance(value, os.PathLike):
                value = os.fspath(value)
            if not isinstance(value, str) or not value:
                raise bad
            return value
        if self.kind == "dict":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    raise bad from None
            if not isinstance(value, dict):
                raise bad
            return dict(value)
        if isinstance(value, bool):
            raise bad
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise bad from None
        if self.kind == "int":
            if not np.isfinite(number) or number != round(number):
                raise bad
            number = int(number)
        if not np.isfinite(number) or not self.lo <= number <= self.hi:
            raise bad
        return number


@dataclass(frozen=True)
class Distribution:
    """A named kv_len distribution.

    draw(batch_size, params, rng) -> int64 [batch_size] (or fewer, for `continuous`), params
    already resolved. per_request: lengths are i.i.d. per request, so the distribution can feed
    the prompt/output lengths of the continuous simulator. finish(params, supplied) completes
    parameters whose default depends on another one and checks cross-parameter rules.
    """

    name: str
    summary: str
    params: tuple[ParamSpec, ...]
    draw: Callable[[int, dict, np.random.Generator], np.ndarray]
    per_request: bool
    finish: Callable[[dict, set], dict] | None = None

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}


def distribution_names(per_request_only: bool = False) -> list[str]:
    return [n for n, d in DISTRIBUTIONS.items() if d.per_request or not per_request_only]


def get_distribution(name: str) -> Distribution:
    """The distribution called `name`; ValueError names the allowed ones for an unknown name."""
    if name not in DISTRIBUTIONS:
        raise ValueError(f"distribution: {name!r} unknown; allowed: {', '.join(DISTRIBUTIONS)}")
    return DISTRIBUTIONS[name]


def describe_distributions() -> dict[str, dict]:
    """{name: {"summary", "params": {param: {"default", "description", "allowed"}}}} for the CLI."""
    return {
        name: {
            "summary": d.summary,
            "params": {p.name: {"default": p.default, "description": p.description,
                                "allowed": p.allowed()} for p in d.params},
        }
        for name, d in DISTRIBUTIONS.items()
    }


def resolve_params(name: str, params: dict | None = None, prefix: str = "") -> dict:
    """`params` of distribution `name` checked and completed with defaults.

    Raises ValueError naming the parameter and the allowed names or range for an unknown name,
    a wrong type or an out-of-range value. `prefix` is prepended to field names in messages
    (nested parameters of `continuous`).
    """
    dist = get_distribution(name)
    params = dict(params or {})
    specs = {p.name: p for p in dist.params}
    unknown = sorted(set(params) - set(specs))
    if unknown:
        allowed = ", ".join(specs) if specs else "none"
        raise ValueError(f"{prefix}{unknown[0]}: not a parameter of distribution {name!r}; "
                         f"allowed: {allowed}")
    resolved = {n: spec.coerce(params[n], prefix) if n in params else spec.default
                for n, spec in specs.items()}
    return dist.finish(resolved, set(params)) if dist.finish else resolved


def sample_kv_lens(name: str, batch_size: int, params: dict | None = None,
                   seed: int = 0) -> np.ndarray:
    """kv_lens (int64 tokens, each 1..MAX_KV_LEN_TOKENS) of one decode batch.

    batch_size: requests, 1..MAX_BATCH (for `continuous`, the max batch: the result may be
    shorter). seed: 0..2**63-1; the draw uses numpy.random.default_rng(seed) only.
    """
    check_batch_size(batch_size)
    check_seed(seed)
    resolved = resolve_params(name, params)
    return draw_kv_lens(name, batch_size, resolved, np.random.default_rng(seed))


def draw_kv_lens(name: str, batch_size: int, resolved: dict,
                 rng: np.random.Generator) -> np.ndarray:
    """Like sample_kv_lens, from already resolved params and a caller's generator."""
    kv = np.asarray(get_distribution(name).draw(batch_size, resolved, rng), dtype=np.int64)
    if kv.size and (kv.min() < 1 or kv.max() > MAX_KV_LEN_TOKENS):
        bad = int(kv[(kv < 1) | (kv > MAX_KV_LEN_TOKENS)][0])
        raise ValueError(f"kv_len: {name} drew {bad}; allowed: 1..{MAX_KV_LEN_TOKENS}")
    return kv


def check_batch_size(batch_size) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or not (
        1 <= batch_size <= MAX_BATCH
    ):
        raise ValueError(f"batch_size: {batch_size!r} not allowed; allowed: integer 1..{MAX_BATCH}")


def check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (
        0 <= seed < 2**63
    ):
        raise ValueError(f"seed: {seed!r} not allowed; allowed: integer 0..2**63-1")


# ---- fixed total ----------------------------------------------------------------------------

def fixed_total_kv_lens(batch_size: int, total_tokens: int, long_percents: tuple[int, ...],
                        name: str = "") -> np.ndarray:
    """Split `total_tokens` exactly: request i < k gets floor(long_percents[i] * total / 100),
    the other B - k requests share the rest evenly (the first ones get the remainder, one token
    each). When B <= k there is no short request to take the rest, so the whole total is split
    evenly over the B requests (B = 1: one request holds everything).

    Raises ValueError naming total_tokens when a request would get fewer than 1 token or more
    than MAX_KV_LEN_TOKENS.
    """
    check_batch_size(batch_size)
    k = len(long_percents)
    longs = [] if batch_size <= k else [total_tokens * p // 100 for p in long_percents]
    short = batch_size - len(longs)
    rest = total_tokens - sum(longs)
    if rest < short or any(x < 1 for x in longs):
        need = _safe_total(batch_size, long_percents)
        raise ValueError(f"total_tokens: {total_tokens} too small for batch_size {batch_size} of "
                         f"{name or 'this distribution'} (every kv_len >= 1); allowed: >= {need}")
    shorts = np.full(short, rest // short, dtype=np.int64)
    shorts[: rest % short] += 1
    kv = np.concatenate([np.array(longs, dtype=np.int64), shorts])
    if kv.max() > MAX_KV_LEN_TOKENS:
        raise ValueError(f"total_tokens: {total_tokens} gives a kv_len of {int(kv.max())} at "
                         f"batch_size {batch_size}; allowed: every kv_len <= {MAX_KV_LEN_TOKENS}")
    return kv


def _safe_total(batch_size: int, long_percents: tuple[int, ...]) -> int:
    """A total from which on every larger one splits with every kv_len >= 1 (floors only ever
    leave the short requests more than their (100 - sum)% share, so the bound is not tight)."""
    if batch_size <= len(long_percents):
        return batch_size
    short_percent = 100 - sum(long_percents)
    return max(batch_size, -(-(batch_size - len(long_percents)) * 100 // short_percent),
               -(-100 // min(long_percents, default=100)))


def _fixed_total(long_percents: tuple[int, ...], name: str):
    return lambda b, p, rng: fixed_total_kv_lens(b, p["total_tokens"], long_percents, name)


# ---- per request ----------------------------------------------------------------------------

def _uniform_range(b: int, p: dict, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(p["lo"], p["hi"] + 1, size=b, dtype=np.int64)


def _check_range(params: dict, supplied: set) -> dict:
    if params["lo"] > params["hi"]:
        raise ValueError(f"lo: {params['lo']} is above hi {params['hi']}; allowed: lo <= hi")
    return params


def _prod_mix(b: int, p: dict, rng: np.random.Generator) -> np.ndarray:
    # An integer draw over the summed weights picks each value with exactly its weight.
    ends = np.cumsum(PROD_MIX_WEIGHTS)
    pick = np.searchsorted(ends, rng.integers(0, int(ends[-1]), size=b), side="right")
    return np.asarray(PROD_MIX_KV_LENS, dtype=np.int64)[pick]


def _round_clip(x: np.ndarray, max_kv_len: int) -> np.ndarray:
    # Clip before converting: a heavy tail can reach inf, which has no int64 value.
    return np.rint(np.clip(x, 1, max_kv_len)).astype(np.int64)


def _lognormal(b: int, p: dict, rng: np.random.Generator) -> np.ndarray:
    x = p["median_tokens"] * np.exp(p["sigma"] * rng.standard_normal(b))
    return _round_clip(x, p["max_kv_len"])


def _pareto(b: int, p: dict, rng: np.random.Generator) -> np.ndarray:
    u = 1.0 - rng.random(b)  # in (0, 1], so the power below is finite or +inf, never nan
    with np.errstate(over="ignore", divide="ignore"):
        x = p["scale_tokens"] * u ** (-1.0 / p["alpha"])
    return _round_clip(x, p["max_kv_len"])


def _trace_file(b: int, p: dict, rng: np.random.Generator) -> np.ndarray:
    return traces.sample_decode_kv_lens(traces.read_trace(p["path"]), b, rng)


def _builtin_trace(name: str):
    return lambda b, p, rng: traces.sample_builtin_kv_lens(name, b, rng)


def _total_param() -> ParamSpec:
    return ParamSpec("total_tokens", "int", DEFAULT_TOTAL_TOKENS,
                     "tokens of the whole batch, split exactly", 1, _MAX_TOTAL_TOKENS)


def _max_kv_param(default: int = DEFAULT_MAX_KV_LEN) -> ParamSpec:
    return ParamSpec("max_kv_len", "int", default, "draws above it are clipped to it, tokens",
                     1, MAX_KV_LEN_TOKENS)


def _skew_percent(b: int, p: dict, rng: np.random.Generator) -> np.ndarray:
    return fixed_total_kv_lens(b, p["total_tokens"], (p["long_percent"],), "skew")


_SKEW_NOTE = ("request 0 holds {} of total_tokens (floored), the other B-1 split the rest evenly; "
              "B=1: the single request holds everything")

DISTRIBUTIONS: dict[str, Distribution] = {
    d.name: d
    for d in [
        Distribution("uniform", "all requests equal: total_tokens // B each, the remainder one "
                     "token each to the first requests (sum exact)", (_total_param(),),
                     _fixed_total((), "uniform"), per_request=False),
        Distribution("skew", _SKEW_NOTE.format("long_percent %"), (
            _total_param(),
            ParamSpec("long_percent", "int", 80, "share of total_tokens held by request 0, %",
                      1, 99),
        ), _skew_percent, per_request=False),
        *[Distribution(f"skew{s}", _SKEW_NOTE.format(f"{s}%"), (_total_param(),),
                       _fixed_total((s,), f"skew{s}"), per_request=False) for s in (40, 60, 80)],
        Distribution("2x40", "requests 0 and 1 hold 40% of total_tokens each (floored), the other "
                     "B-2 split the rest evenly; B=1: one request holds everything; B=2: the two "
                     "split the total evenly (no short request takes the other 20%)",
                     (_total_param(),), _fixed_total((40, 40), "2x40"), per_request=False),
        Distribution("uniform-range", "kv_len uniform integer in lo..hi (inclusive)", (
            ParamSpec("lo", "int", 1, "smallest kv_len, tokens", 1, MAX_KV_LEN_TOKENS),
            ParamSpec("hi", "int", 32768, "largest kv_len, tokens (>= lo)", 1, MAX_KV_LEN_TOKENS),
        ), _uniform_range, per_request=True, finish=_check_range),
        Distribution("prod-mix", "kv_len in {4096, 8192, 16384, 32768, 65536, 131072} with weights "
                     "{35, 20, 15, 12, 10, 8}: the synthetic long-context mix of the FlashInfer "
                     "trtllm-gen oversubscription benchmark (no public source)", (),
                     _prod_mix, per_request=True),
        Distribution("lognormal", "kv_len = round(median_tokens * exp(sigma * N(0,1))), clipped "
                     "to 1..max_kv_len", (
                         ParamSpec("median_tokens", "float", 4096.0, "median kv_len, tokens",
                                   1, MAX_KV_LEN_TOKENS),
                         ParamSpec("sigma", "float", 1.0, "std dev of ln(kv_len), 0 = constant",
                                   0, 4),
                         _max_kv_param(),
                     ), _lognormal, per_request=True),
        Distribution("pareto", "kv_len = round(scale_tokens * U**(-1/alpha)), U uniform in (0,1] "
                     "(classic Pareto, minimum scale_tokens), clipped to 1..max_kv_len", (
                         ParamSpec("scale_tokens", "float", 1024.0, "minimum kv_len, tokens",
                                   1, MAX_KV_LEN_TOKENS),
                         ParamSpec("alpha", "float", 1.5, "tail index, smaller = heavier tail",
                                   0.01, 100),
                         _max_kv_param(),
                     ), _pareto, per_request=True),
        Distribution("trace", "decode-weighted lengths of a trace file: request drawn with weight "
                     "output_tokens, kv_len = context_tokens + step, step uniform in "
                     "1..output_tokens; formats: " + ", ".join(traces.TRACE_FORMATS), (
                         ParamSpec("path", "str", None, "trace file (required): "
                                   + "; ".join(traces.TRACE_FORMATS.values())),
                     ), _trace_file, per_request=True,
                     finish=lambda p, s: p if p["path"] else _missing("path")),
        *[Distribution(name, f"decode-weighted kv_len of the {origin.source} trace "
                       f"({origin.license}), by inverse CDF of workloads/data/trace_quantiles.json",
                       (), _builtin_trace(name), per_request=True)
          for name, origin in traces.BUILTIN_TRACES.items()],
    ]
}


def register(dist: Distribution) -> Distribution:
    """Add a distribution built on the ones above (workloads/continuous.py adds `continuous`,
    which draws its prompt and output lengths from the per-request ones here)."""
    if dist.name in DISTRIBUTIONS:
        raise ValueError(f"distribution: {dist.name!r} registered twice")
    DISTRIBUTIONS[dist.name] = dist
    return dist


def _missing(field: str):
    raise ValueError(f"{field}: required; allowed: a path to a trace file")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


__all__ = [
    "DEFAULT_MAX_KV_LEN",
    "DEFAULT_TOTAL_TOKENS",
    "DISTRIBUTIONS",
    "PROD_MIX_KV_LENS",
    "PROD_MIX_WEIGHTS",
    "Distribution",
    "ParamSpec",
    "check_batch_size",
    "check_seed",
    "describe_distributions",
    "distribution_names",
    "draw_kv_lens",
    "fixed_total_kv_lens",
    "get_distribution",
    "register",
    "resolve_params",
    "sample_kv_lens",
]

"""Hybrid batches: prefill chunks beside decodes and speculative decodes (POD-Attention's workload).

Two sources of an `AttentionBatch`, both described by the `hybrid` parameters (HYBRID_PARAMS):

- `source=sweep`: the paper's sweep. `num_prefills` chunks of `chunk_tokens` query tokens, each
  after a prefix of `context_tokens` (kv_len = context + chunk, causal inside the chunk), beside
  `batch_size` decodes of `decode_q_len` tokens (1: plain decode; 2..16: a speculative verify)
  whose kv_len is `context_tokens` (the new tokens included). chunk_tokens=0 or num_prefills=0
  gives a decode-only batch, batch_size=0 is not allowed (use decode_q_len with num_prefills for
  prefill-only: `decodes=0`).
- `source=continuous`: one step of `ChunkedPrefillBatcher`, a continuous-batching simulator with
  chunked prefill (a per-step token budget, Sarathi-Serve style: running decodes take their
  tokens first, the rest of the budget goes to prefill chunks in admission order) and speculative
  decoding (`draft_tokens` drafts verified per decode step; each is accepted with probability
  `accept_rate` until the first rejection, plus one bonus token).

Decodes come first in a batch, prefill chunks after them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from kvtune.kernels.plan import MAX_BATCH, MAX_KV_LEN_TOKENS, AttentionShape
from kvtune.workloads.batch import MAX_DECODE_Q_LEN, AttentionBatch
from kvtune.workloads.distributions import ParamSpec, check_seed

DISTRIBUTION = "hybrid"
SOURCES = ("sweep", "continuous")
# The paper's sweep (section 5): context 4K..20K, chunk 512..2K, decode batch 8..256.
SWEEP_CONTEXT_TOKENS = (4096, 8192, 16384, 20480)
SWEEP_CHUNK_TOKENS = (512, 1024, 2048)
SWEEP_DECODE_BATCHES = (8, 16, 32, 64, 128, 256)
# Mixes from the chunked-prefill simulator: (token budget, draft tokens, accept rate).
MIX_SETTINGS = ((1024, 0, 0.0), (2048, 0, 0.0), (2048, 3, 0.7), (4096, 4, 0.8))
MIX_MAX_BATCHES = (64, 256)
MIX_SEEDS = (0, 1)
# `hybrid-quick`: a fifth of the suite for a tuning run that fits a short GPU session: the sweep's
# extreme contexts and chunks at three decode batches, and one seed of every mix.
QUICK_CONTEXT_TOKENS = (4096, 16384)
QUICK_CHUNK_TOKENS = (512, 2048)
QUICK_DECODE_BATCHES = (16, 64, 256)
# `hybrid-holdout`: traffic no hybrid suite tunes on (the default validation of `kvtune tune
# --suite hybrid*`): contexts, chunks and decode batches between the sweep's grid points, the two
# halves of some of those batches, and mixes of other token budgets, draft counts, accept rates
# and prompt lengths at seeds no suite uses.
HOLDOUT_CONTEXT_TOKENS = (6144, 12288)
# 3072: a tuned bucket spans up to 4096 prefill tokens, and the sweep's chunks stop at 2048; a
# file validated without longer chunks shipped a bucket that ran 0.93x of serial on a 3072-token
# chunk beside 21 decodes once the serial step's prefill got faster (H100, twentieth session).
HOLDOUT_CHUNK_TOKENS = (768, 1536, 3072)
HOLDOUT_DECODE_BATCHES = (12, 48, 96, 192)
# The third (twenty-eighth session): a busier step, 61-83 decodes beside about 3,000 prefill
# tokens, the only continuous steps of any validation suite with 65+ decodes beside more than
# 2,048 tokens (without them that bucket was judged on uniform sweep steps alone).
HOLDOUT_MIX_SETTINGS = ((1536, 0, 0.0, 4096), (3072, 2, 0.6, 8192), (3072, 0, 0.0, None))
HOLDOUT_MIX_SEEDS = (100, 101)
HYBRID_SUITES = ("hybrid", "hybrid-quick", "hybrid-holdout")

HYBRID_PARAMS = (
    ParamSpec("source", "str", "sweep", "sweep (the paper's fixed batch) or continuous (a step of "
              "the chunked-prefill simulator)"),
    ParamSpec("context_tokens", "int", 8192, "sweep: prefix before each chunk and kv_len of each "
              "decode, tokens", 1, MAX_KV_LEN_TOKENS),
    ParamSpec("chunk_tokens", "int", 1024, "sweep: query tokens of each prefill chunk (0: no "
              "prefill)", 0, MAX_KV_LEN_TOKENS),
    ParamSpec("num_prefills", "int", 1, "sweep: prefill chunks in the batch", 0, 256),
    ParamSpec("decodes", "int", 1, "sweep: 1 = batch_size decodes, 0 = none (prefill only)", 0, 1),
    ParamSpec("decode_q_len", "int", 1, "query tokens per decode (2..16: speculative verify)", 1,
              MAX_DECODE_Q_LEN),
    ParamSpec("step_token_budget", "int", 2048, "continuous: tokens per step (decodes first, the "
              "rest prefill chunks)", 1, MAX_KV_LEN_TOKENS),
    ParamSpec("draft_tokens", "int", 0, "continuous: drafts verified per decode step (q_len = "
              "drafts + 1)", 0, MAX_DECODE_Q_LEN - 1),
    ParamSpec("accept_rate", "float", 0.7, "continuous: probability that a draft is accepted", 0.0,
              1.0),
    ParamSpec("arrival_rate_per_step", "float", 0.25, "continuous: mean Poisson arrivals per step",
              1e-4, 1e3),
    ParamSpec("prompt_median_tokens", "int", 4096, "continuous: median prompt (lognormal, sigma "
              "0.8, at most 32768)", 1, MAX_KV_LEN_TOKENS),
    ParamSpec("output_median_tokens", "int", 256, "continuous: median output (lognormal, sigma "
              "0.8, at most 4096)", 1, MAX_KV_LEN_TOKENS),
    ParamSpec("kv_budget_tokens", "int", 1 << 20, "continuous: KV-cache capacity, tokens", 1,
              MAX_BATCH * MAX_KV_LEN_TOKENS),
    ParamSpec("warmup_steps", "int", 1000, "continuous: steps simulated before the snapshot (the "
              "first step after it that has a prefill chunk, or else any work)", 0, 1_000_000),
)
_SPECS = {p.name: p for p in HYBRID_PARAMS}


def resolve_hybrid_params(params: dict | None = None) -> dict:
    """`params` checked (ValueError naming the field) and completed with the defaults."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(_SPECS))
    if unknown:
        raise ValueError(f"{unknown[0]}: not a parameter of distribution 'hybrid'; allowed: "
                         f"{', '.join(_SPECS)}")
    out = {n: s.coerce(params[n]) if n in params else s.default for n, s in _SPECS.items()}
    if out["source"] not in SOURCES:
        raise ValueError(f"source: {out['source']!r} not allowed; allowed: {', '.join(SOURCES)}")
    return out


def sweep_lengths(batch_size: int, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """(q_lens, kv_lens) int64 of a sweep batch: decodes first, then the prefill chunks."""
    n_dec = batch_size if p["decodes"] else 0
    n_pre = p["num_prefills"] if p["chunk_tokens"] > 0 else 0
    if n_dec + n_pre == 0:
        raise ValueError("chunk_tokens: a batch with decodes=0 needs chunk_tokens >= 1 and "
                         "num_prefills >= 1 (an empty batch)")
    ctx, chunk, dq = p["context_tokens"], p["chunk_tokens"], p["decode_q_len"]
    if n_dec and dq > ctx:
        raise ValueError(f"decode_q_len: {dq} > context_tokens {ctx}; allowed: 1..context_tokens")
    if n_pre and ctx + chunk > MAX_KV_LEN_TOKENS:
        raise ValueError(f"chunk_tokens: context {ctx} + chunk {chunk} above "
                         f"{MAX_KV_LEN_TOKENS} tokens")
    q = np.concatenate([np.full(n_dec, dq), np.full(n_pre, chunk)]).astype(np.int64)
    kv = np.concatenate([np.full(n_dec, ctx), np.full(n_pre, ctx + chunk)]).astype(np.int64)
    return q, kv


def accepted_tokens(rng: np.random.Generator, n: int, draft_tokens: int,
                    accept_rate: float) -> np.ndarray:
    """Tokens kept per verify step: accepted drafts (until the first rejection) + 1, int64 [n]."""
    if draft_tokens == 0:
        return np.ones(n, dtype=np.int64)
    accept = rng.random((n, draft_tokens)) < accept_rate
    run = np.cumprod(accept, axis=1).sum(axis=1)
    return run.astype(np.int64) + 1


@dataclass
class ChunkedPrefillBatcher:
    """Continuous batching with chunked prefill and speculative decoding (see the module docstring).

    Per step: Poisson arrivals queue up; requests are admitted first come first served while the
    batch has fewer than max_batch requests and their prompt + output fits the KV budget; running
    decodes each take draft_tokens + 1 query tokens of the step's token budget (a decode that does
    not fit waits), then prefilling requests take chunks of what is left in admission order. A
    decode step keeps `accepted_tokens` tokens; a request leaves once its output is produced.
    """

    params: dict
    max_batch: int
    seed: int = 0
    steps: int = 0
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.params = resolve_hybrid_params(self.params)
        check_seed(self.seed)
        self._rng = np.random.default_rng(self.seed)
        # Running requests (admission order): prompt, prefilled tokens, context, output left.
        self._prompt = np.zeros(0, np.int64)
        self._done_prefill = np.zeros(0, np.int64)
        self._ctx = np.zeros(0, np.int64)
        self._left = np.zeros(0, np.int64)
        self._queue: list[tuple[int, int]] = []

    def _lognormal(self, median: int, hi: int) -> int:
        return int(np.clip(round(median * np.exp(0.8 * self._rng.standard_normal())), 1, hi))

    def step(self) -> tuple[np.ndarray, np.ndarray]:
        """Simulate one step; returns its (q_lens, kv_lens), decodes first (possibly empty)."""
        p, rng = self.params, self._rng
        for _ in range(rng.poisson(p["arrival_rate_per_step"])):
            prompt = self._lognormal(p["prompt_median_tokens"], 32768)
            out = self._lognormal(p["output_median_tokens"], 4096)
            if prompt + out <= p["kv_budget_tokens"]:
                self._queue.append((prompt, out))
        used = int((self._prompt + self._left).sum())
        while self._queue and self._prompt.shape[0] < self.max_batch:
            prompt, out = self._queue[0]
            if used + prompt + out > p["kv_budget_tokens"]:
                break
            self._queue.pop(0)
            used += prompt + out
            self._prompt = np.append(self._prompt, prompt)
            self._done_prefill = np.append(self._done_prefill, 0)
            self._ctx = np.append(self._ctx, 0)
            self._left = np.append(self._left, out)
        budget = p["step_token_budget"]
        dq = p["draft_tokens"] + 1
        decoding = np.flatnonzero(self._done_prefill == self._prompt)
        n_dec = min(decoding.shape[0], budget // dq)
        dec = decoding[:n_dec]
        budget -= n_dec * dq
        q_dec = np.full(n_dec, dq, np.int64)
        # A verify step can ask more drafts than the output has left: it still verifies dq tokens.
        kv_dec = self._ctx[dec] + dq
        pre, chunks = [], []
        for i in np.flatnonzero(self._done_prefill < self._prompt):
            if budget <= 0:
                break
            c = int(min(self._prompt[i] - self._done_prefill[i], budget))
            pre.append(i)
            chunks.append(c)
            budget -= c
        pre = np.asarray(pre, np.int64)
        chunks = np.asarray(chunks, np.int64)
        kv_pre = self._done_prefill[pre] + chunks
        # Advance the state.
        kept = accepted_tokens(rng, n_dec, p["draft_tokens"], p["accept_rate"])
        self._ctx[dec] += kept
        self._left[dec] -= kept
        self._done_prefill[pre] += chunks
        self._ctx[pre] = self._done_prefill[pre]
        alive = self._left > 0
        self._prompt, self._done_prefill = self._prompt[alive], self._done_prefill[alive]
        self._ctx, self._left = self._ctx[alive], self._left[alive]
        self.steps += 1
        return np.concatenate([q_dec, chunks]), np.concatenate([kv_dec, kv_pre])


def continuous_lengths(batch_size: int, p: dict, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(q_lens, kv_lens) of the first step at or after warm-up that has a prefill chunk (or, if
    none comes within warm-up + 10,000 steps, the first non-empty one after warm-up)."""
    sim = ChunkedPrefillBatcher(p, batch_size, seed)
    fallback = None
    for t in range(p["warmup_steps"] + 10_000):
        q, kv = sim.step()
        if t < p["warmup_steps"] or q.size == 0:
            continue
        if (q > MAX_DECODE_Q_LEN).any():
            return q, kv
        if fallback is None:
            fallback = (q, kv)
    if fallback is None:
        raise ValueError("arrival_rate_per_step: the simulator ran 10,000 steps after warm-up "
                         "without any work; raise the arrival rate")
    return fallback


@dataclass(frozen=True, eq=False)
class HybridCase:
    """One hybrid workload: `batch_size` (decodes for the sweep, max batch for continuous), the
    `hybrid` params, the attention shape and seed. Same interface as suites.Case."""

    params: dict = field(default_factory=dict)
    batch_size: int = 1
    shape: AttentionShape = field(default_factory=AttentionShape)
    seed: int = 0
    distribution: str = DISTRIBUTION

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, (int, np.integer)) \
                or not 1 <= self.batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size: {self.batch_size!r} not allowed; allowed: "
                             f"1..{MAX_BATCH}")
        check_seed(self.seed)
        if not isinstance(self.shape, AttentionShape):
            raise ValueError(f"shape: {self.shape!r} is not an AttentionShape")
        object.__setattr__(self, "params", resolve_hybrid_params(self.params))
        object.__setattr__(self, "batch_size", int(self.batch_size))

    @property
    def case_id(self) -> str:
        """"hybrid:B<batch>:seed<seed>" plus ":k=v,..." for params that differ from defaults."""
        defaults = resolve_hybrid_params({})
        changed = [(k, v) for k, v in sorted(self.params.items()) if v != defaults[k]]
        out = f"{DISTRIBUTION}:B{self.batch_size}:seed{self.seed}"
        if changed:
            out += ":" + ",".join(f"{k}={_id_value(v)}" for k, v in changed)
        return out

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        if self.params["source"] == "sweep":
            return sweep_lengths(self.batch_size, self.params)
        return continuous_lengths(self.batch_size, self.params, self.seed)

    def kv_lens(self) -> np.ndarray:
        return self.lengths()[1]

    def batch(self) -> AttentionBatch:
        q, kv = self.lengths()
        return AttentionBatch(q, kv, self.shape, self.seed, DISTRIBUTION, dict(self.params),
                              self.case_id)

    def to_dict(self) -> dict:
        return {"case_id": self.case_id, "distribution": DISTRIBUTION, "params": dict(self.params),
                "batch_size": self.batch_size, "seed": self.seed, "shape": self.shape.to_dict()}


def _id_value(value) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value)
    if isinstance(value, (int, float, str)) and text.replace(".", "").replace("-", "").isalnum():
        return text
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


def hybrid_cases(shape: AttentionShape) -> tuple[HybridCase, ...]:
    """The `hybrid` suite: the paper's sweep, each sweep batch's two halves alone (the prefill
    chunk without decodes, the decodes without a chunk: max of the two is the overlap bound,
    and they are the prefill-only and decode-only cases), then the simulator mixes."""
    cases = [HybridCase({"context_tokens": c, "chunk_tokens": k}, b, shape)
             for c in SWEEP_CONTEXT_TOKENS for k in SWEEP_CHUNK_TOKENS
             for b in SWEEP_DECODE_BATCHES]
    cases += [HybridCase({"context_tokens": c, "chunk_tokens": k, "decodes": 0}, 1, shape)
              for c in SWEEP_CONTEXT_TOKENS for k in SWEEP_CHUNK_TOKENS]
    cases += [HybridCase({"context_tokens": c, "chunk_tokens": 0}, b, shape)
              for c in SWEEP_CONTEXT_TOKENS for b in SWEEP_DECODE_BATCHES]
    return tuple(cases) + _mix_cases(shape, [(b, d, r, None) for b, d, r in MIX_SETTINGS],
                                     MIX_SEEDS)


def quick_hybrid_cases(shape: AttentionShape) -> tuple[HybridCase, ...]:
    """The `hybrid-quick` suite (20 cases, all in the `hybrid` suite): sweep batches at contexts
    QUICK_CONTEXT_TOKENS, chunks QUICK_CHUNK_TOKENS and QUICK_DECODE_BATCHES decodes, then every
    mix of MIX_SETTINGS x MIX_MAX_BATCHES at seed 0."""
    cases = [HybridCase({"context_tokens": c, "chunk_tokens": k}, b, shape)
             for c in QUICK_CONTEXT_TOKENS for k in QUICK_CHUNK_TOKENS
             for b in QUICK_DECODE_BATCHES]
    return tuple(cases) + _mix_cases(shape, [(b, d, r, None) for b, d, r in MIX_SETTINGS],
                                     MIX_SEEDS[:1])


def holdout_hybrid_cases(shape: AttentionShape) -> tuple[HybridCase, ...]:
    """The `hybrid-holdout` suite (43 cases, none in another suite): sweep batches off the
    sweep's grid (HOLDOUT_CONTEXT_TOKENS x HOLDOUT_CHUNK_TOKENS x HOLDOUT_DECODE_BATCHES), the
    decode-only halves at 48 and 192 decodes and the prefill-only ones of the longer context,
    and the HOLDOUT_MIX_SETTINGS mixes (token budget, drafts, accept rate, median prompt) at
    max batch 64 and 256 and HOLDOUT_MIX_SEEDS."""
    cases = [HybridCase({"context_tokens": c, "chunk_tokens": k}, b, shape)
             for c in HOLDOUT_CONTEXT_TOKENS for k in HOLDOUT_CHUNK_TOKENS
             for b in HOLDOUT_DECODE_BATCHES]
    cases += [HybridCase({"context_tokens": c, "chunk_tokens": 0}, b, shape)
              for c in HOLDOUT_CONTEXT_TOKENS for b in (48, 192)]
    cases += [HybridCase({"context_tokens": HOLDOUT_CONTEXT_TOKENS[-1], "chunk_tokens": k,
                          "decodes": 0}, 1, shape) for k in HOLDOUT_CHUNK_TOKENS]
    return tuple(cases) + _mix_cases(shape, HOLDOUT_MIX_SETTINGS, HOLDOUT_MIX_SEEDS)


def _mix_cases(shape: AttentionShape, settings, seeds) -> tuple[HybridCase, ...]:
    """Continuous-batching cases: (token budget, drafts, accept rate, median prompt or None for
    the default) x MIX_MAX_BATCHES x seeds."""
    out = []
    for budget, drafts, rate, prompt in settings:
        for b in MIX_MAX_BATCHES:
            for s in seeds:
                p = {"source": "continuous", "step_token_budget": budget, "draft_tokens": drafts}
                if drafts:
                    p["accept_rate"] = rate
                if prompt is not None:
                    p["prompt_median_tokens"] = prompt
                out.append(HybridCase(p, b, shape, s))
    return tuple(out)


def halves(params: dict) -> tuple[dict, dict] | None:
    """The params of a sweep case's prefill-alone and decode-alone cases (None for a case that
    is not a two-kind sweep batch). The decode-alone case has the same batch_size."""
    p = resolve_hybrid_params(params)
    if p["source"] != "sweep" or not p["decodes"] or p["chunk_tokens"] == 0 \
            or p["num_prefills"] == 0:
        return None
    return {**p, "decodes": 0}, {**p, "chunk_tokens": 0}


def make_hybrid_cases(batch_sizes, params: dict | None = None, seeds=(0,),
                      shape: AttentionShape | None = None,
                      q_len: int | None = None) -> tuple[HybridCase, ...]:
    """Ad-hoc hybrid cases (`--distribution hybrid`); q_len sets decode_q_len (and draft_tokens
    for source=continuous) unless params give them."""
    p = dict(params or {})
    if q_len is not None:
        if isinstance(q_len, bool) or not isinstance(q_len, (int, np.integer)) \
                or not 1 <= q_len <= MAX_DECODE_Q_LEN:
            raise ValueError(f"q_len: {q_len!r} not allowed; allowed: 1..{MAX_DECODE_Q_LEN}")
        p.setdefault("decode_q_len", int(q_len))
        if p.get("source") == "continuous":
            p.setdefault("draft_tokens", int(q_len) - 1)
    shape = shape or AttentionShape()
    return tuple(HybridCase(p, b, shape, s) for b in batch_sizes for s in seeds)


@dataclass(frozen=True, eq=False)
class SpeculativeCase:
    """A decode case (suites.Case) whose every request verifies `q_len` tokens (`--q-len K`).

    kv_lens below q_len are raised to q_len (kv_len counts the new tokens)."""

    case: object
    q_len: int

    def __post_init__(self) -> None:
        if isinstance(self.q_len, bool) or not isinstance(self.q_len, (int, np.integer)) \
                or not 1 <= self.q_len <= MAX_DECODE_Q_LEN:
            raise ValueError(f"q_len: {self.q_len!r} not allowed; allowed: 1..{MAX_DECODE_Q_LEN}")

    distribution = property(lambda self: self.case.distribution)
    params = property(lambda self: self.case.params)
    batch_size = property(lambda self: self.case.batch_size)
    shape = property(lambda self: self.case.shape)
    seed = property(lambda self: self.case.seed)

    @property
    def case_id(self) -> str:
        return f"{self.case.case_id}:q{self.q_len}"

    def kv_lens(self) -> np.ndarray:
        return np.maximum(self.case.kv_lens(), self.q_len)

    def batch(self) -> AttentionBatch:
        kv = self.kv_lens()
        return AttentionBatch(np.full(kv.shape[0], self.q_len), kv, self.shape, self.seed,
                              self.distribution, dict(self.params), self.case_id)

    def to_dict(self) -> dict:
        return {**self.case.to_dict(), "case_id": self.case_id, "q_len": self.q_len}


__all__ = [
    "DISTRIBUTION",
    "HYBRID_PARAMS",
    "SOURCES",
    "ChunkedPrefillBatcher",
    "HybridCase",
    "accepted_tokens",
    "continuous_lengths",
    "halves",
    "hybrid_cases",
    "make_hybrid_cases",
    "resolve_hybrid_params",
    "SpeculativeCase",
    "sweep_lengths",
]

"""A continuous-batching simulator: the decode batches a serving engine runs, step by step.

The model, per decode step t (steps are numbered from 0):
1. Arrivals: Poisson(arrival_rate_per_step) new requests join the waiting queue, each with a
   prompt length and an output length (decode steps) drawn from named per-request distributions
   (workloads/distributions.py). A request whose prompt + output exceeds kv_budget_tokens could
   never finish, so it is rejected on arrival (counted in `stats.rejected`), as a server refuses
   a request longer than its KV cache.
2. Growth: a running request with `ctx` tokens cached reads `ctx + 1` tokens this step (its new
   token included). If the running batch's tokens exceed kv_budget_tokens, the most recently
   admitted requests are preempted (recompute style, as vLLM does) until it fits: they go back to
   the front of the queue keeping the tokens they hold as their new prompt.
3. Admission at the step boundary, first come first served: preempted requests first, then the
   queue in arrival order. The next one joins only if the batch has fewer than max_batch requests
   and the step's tokens (running `ctx + 1` summed, plus its `prompt + 1`) fit kv_budget_tokens;
   the first one that does not fit stops admission (no overtaking).
4. The step runs: the batch is every running request in admission order, kv_len = ctx + 1. So a
   request with prompt c and output o has kv_lens c + 1, ..., c + o over its o steps, the
   convention of workloads/traces.py. It leaves after its o-th step.

Invariants (tested): every batch has at most max_batch requests and at most kv_budget_tokens
tokens; each request appears in exactly `output` steps. Work per step is a handful of numpy
operations on the running arrays; arrivals and their lengths are drawn in blocks of steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kvtune.kernels.plan import MAX_BATCH, MAX_KV_LEN_TOKENS
from kvtune.workloads import distributions as dists

ARRIVAL_BLOCK_STEPS = 1024
MAX_SEARCH_STEPS = 10_000_000


@dataclass(frozen=True, eq=False)
class DecodeStep:
    """One simulated decode step: request ids (arrival order numbers) and their kv_lens, int64 [n],
    in admission order; n = 0 when nothing runs."""

    step: int
    request_ids: np.ndarray
    kv_lens: np.ndarray


@dataclass
class ContinuousStats:
    """Counters since the start of a simulation (requests, steps)."""

    steps: int = 0
    arrived: int = 0
    rejected: int = 0
    admitted: int = 0
    preempted: int = 0
    finished: int = 0


class ContinuousBatcher:
    """The simulator. `params` are those of the `continuous` distribution (warmup_steps and
    snapshot are not used here); `batch_size` supplies max_batch when params leave it unset.
    The seed (0..2**63-1) or a caller's `rng` drives every draw."""

    def __init__(self, params: dict | None = None, batch_size: int | None = None, seed: int = 0,
                 rng: np.random.Generator | None = None):
        p = dists.resolve_params("continuous", params)
        self.params = p
        self.max_batch = _max_batch(p, batch_size)
        self.kv_budget_tokens = int(p["kv_budget_tokens"])
        if rng is None:
            dists.check_seed(seed)
            rng = np.random.default_rng(seed)
        self._rng = rng
        self.stats = ContinuousStats()
        # Every arrival, by id: prompt and output tokens and arrival step.
        self._prompt = np.zeros(0, dtype=np.int64)
        self._output = np.zeros(0, dtype=np.int64)
        self._arrival = np.zeros(0, dtype=np.int64)
        self._drawn_steps = 0
        # Accepted arrivals not admitted yet: ids in arrival order; _head is the next one.
        self._queue = np.zeros(0, dtype=np.int64)
        self._queue_arrival = np.zeros(0, dtype=np.int64)
        self._head = 0
        # Preempted requests (ids ascending), with the tokens they hold and steps still to run.
        self._resume_ids = np.zeros(0, dtype=np.int64)
        self._resume_ctx = np.zeros(0, dtype=np.int64)
        self._resume_left = np.zeros(0, dtype=np.int64)
        # Running requests in admission order.
        self._run_ids = np.zeros(0, dtype=np.int64)
        self._run_ctx = np.zeros(0, dtype=np.int64)
        self._run_left = np.zeros(0, dtype=np.int64)

    def prompt_tokens(self, ids) -> np.ndarray:
        """Prompt lengths (tokens) of the requests with these ids, as drawn on arrival."""
        return self._prompt[np.asarray(ids, dtype=np.int64)]

    def output_tokens(self, ids) -> np.ndarray:
        """Output lengths (decode steps) of the requests with these ids."""
        return self._output[np.asarray(ids, dtype=np.int64)]

    def arrival_steps(self, ids) -> np.ndarray:
        return self._arrival[np.asarray(ids, dtype=np.int64)]

    def __iter__(self) -> Iterator[DecodeStep]:
        while True:
            yield self.step()

    def step(self) -> DecodeStep:
        """Simulate the next decode step and return its batch."""
        t = self.stats.steps
        if t >= self._drawn_steps:
            self._draw_arrivals()
        arrived_end = int(np.searchsorted(self._queue_arrival, t, side="right"))
        self.stats.arrived = int(np.searchsorted(self._arrival, t, side="right"))
        self._preempt_to_fit()
        self._admit(arrived_end)
        batch = DecodeStep(t, self._run_ids.copy(), self._run_ctx + 1)
        self._run_ctx = self._run_ctx + 1
        self._run_left = self._run_left - 1
        done = self._run_left == 0
        if done.any():
            self.stats.finished += int(done.sum())
            keep = ~done
            self._run_ids, self._run_ctx, self._run_left = (
                self._run_ids[keep], self._run_ctx[keep], self._run_left[keep])
        self.stats.steps = t + 1
        return batch

    def _draw_arrivals(self) -> None:
        rng, p = self._rng, self.params
        counts = rng.poisson(p["arrival_rate_per_step"], ARRIVAL_BLOCK_STEPS)
        n = int(counts.sum())
        if n:
            prompt = dists.draw_kv_lens(p["prompt_distribution"], n, p["prompt_params"], rng)
            output = dists.draw_kv_lens(p["output_distribution"], n, p["output_params"], rng)
            first_id = self._prompt.shape[0]
            steps = self._drawn_steps + np.arange(ARRIVAL_BLOCK_STEPS, dtype=np.int64)
            fits = prompt + output <= self.kv_budget_tokens
            self.stats.rejected += int((~fits).sum())
            self._prompt = np.concatenate([self._prompt, prompt])
            self._output = np.concatenate([self._output, output])
            self._arrival = np.concatenate([self._arrival, np.repeat(steps, counts)])
            accepted = first_id + np.flatnonzero(fits)
            self._queue = np.concatenate([self._queue[self._head:], accepted])
            self._queue_arrival = np.concatenate([self._queue_arrival[self._head:],
                                                  self._arrival[accepted]])
            self._head = 0
        self._drawn_steps += ARRIVAL_BLOCK_STEPS

    def _preempt_to_fit(self) -> None:
        step_tokens = np.cumsum(self._run_ctx + 1)
        if not step_tokens.size or step_tokens[-1] <= self.kv_budget_tokens:
            return
        keep = int(np.searchsorted(step_tokens, self.kv_budget_tokens, side="right"))
        self.stats.preempted += self._run_ids.shape[0] - keep
        ids = np.concatenate([self._resume_ids, self._run_ids[keep:]])
        order = np.argsort(ids, kind="stable")
        self._resume_ids = ids[order]
        self._resume_ctx = np.concatenate([self._resume_ctx, self._run_ctx[keep:]])[order]
        self._resume_left = np.concatenate([self._resume_left, self._run_left[keep:]])[order]
        self._run_ids, self._run_ctx, self._run_left = (
            self._run_ids[:keep], self._run_ctx[:keep], self._run_left[:keep])

    def _admit(self, arrived_end: int) -> None:
        room = self.max_batch - self._run_ids.shape[0]
        if room <= 0:
            return
        # Candidates in FCFS order: preempted ones (they arrived before anything still queued).
        new = self._queue[self._head: min(arrived_end, self._head + room)]
        ids = np.concatenate([self._resume_ids, new])[:room]
        if not ids.size:
            return
        ctx = np.concatenate([self._resume_ctx, self._prompt[new]])[:room]
        left = np.concatenate([self._resume_left, self._output[new]])[:room]
        free = self.kv_budget_tokens - int((self._run_ctx + 1).sum())
        n = int(np.searchsorted(np.cumsum(ctx + 1), free, side="right"))
        if n == 0:
            return
        from_resume = min(n, self._resume_ids.shape[0])
        self._resume_ids = self._resume_ids[from_resume:]
        self._resume_ctx = self._resume_ctx[from_resume:]
        self._resume_left = self._resume_left[from_resume:]
        self._head += n - from_resume
        self.stats.admitted += n - from_resume
        self._run_ids = np.concatenate([self._run_ids, ids[:n]])
        self._run_ctx = np.concatenate([self._run_ctx, ctx[:n]])
        self._run_left = np.concatenate([self._run_left, left[:n]])


def decode_batches(params: dict | None = None, batch_size: int | None = None, seed: int = 0,
                   num_steps: int | None = None) -> Iterator[np.ndarray]:
    """kv_lens (int64 [n], n = 0..max_batch) of each step, from step 0; endless if num_steps is
    None."""
    batcher = ContinuousBatcher(params, batch_size, seed)
    count = 0
    while num_steps is None or count < num_steps:
        yield batcher.step().kv_lens
        count += 1


def continuous_snapshot(params: dict, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """kv_lens of the `snapshot`-th non-empty step at or after `warmup_steps` (steps where nothing
    runs launch no decode kernel, so they are skipped). `params` are the resolved params of the
    `continuous` distribution; `batch_size` is its max batch. int64 [1..batch_size]."""
    batcher = ContinuousBatcher(params, batch_size, rng=rng)
    for _ in range(params["warmup_steps"]):
        batcher.step()
    seen = 0
    for _ in range(MAX_SEARCH_STEPS):
        kv = batcher.step().kv_lens
        if kv.size:
            if seen == params["snapshot"]:
                return kv
            seen += 1
    raise ValueError(f"arrival_rate_per_step: {params['arrival_rate_per_step']} left the batch "
                     f"empty for {MAX_SEARCH_STEPS} steps; allowed: a higher rate")


def _max_batch(params: dict, batch_size: int | None) -> int:
    set_value = params.get("max_batch")
    if batch_size is not None:
        dists.check_batch_size(batch_size)
    if set_value is None and batch_size is None:
        raise ValueError("max_batch: unset and no batch_size given; allowed: integer >= 1")
    if set_value is not None and batch_size is not None and set_value != batch_size:
        raise ValueError(f"max_batch: {set_value} differs from batch_size {batch_size}; for the "
                         "continuous distribution batch_size is the max batch, so leave max_batch "
                         "unset or equal to it")
    return int(set_value if set_value is not None else batch_size)


# ---- the `continuous` distribution ---------------------------------------------------------

_CONTINUOUS_PROMPT_PARAMS = {"median_tokens": 2048.0, "sigma": 1.0}
_CONTINUOUS_OUTPUT_PARAMS = {"median_tokens": 256.0, "sigma": 0.8, "max_kv_len": 4096}


def _finish_continuous(params: dict, supplied: set) -> dict:
    out = dict(params)
    for role, default_params in (("prompt", _CONTINUOUS_PROMPT_PARAMS),
                                 ("output", _CONTINUOUS_OUTPUT_PARAMS)):
        name = out[f"{role}_distribution"]
        if name not in dists.distribution_names(per_request_only=True):
            raise ValueError(f"{role}_distribution: {name!r} not allowed; allowed: "
                             f"{', '.join(dists.distribution_names(per_request_only=True))}")
        # The default params belong to the default distribution; another one starts from its own.
        if f"{role}_params" not in supplied and f"{role}_distribution" in supplied:
            out[f"{role}_params"] = {}
        elif f"{role}_params" not in supplied:
            out[f"{role}_params"] = dict(default_params)
        out[f"{role}_params"] = dists.resolve_params(name, out[f"{role}_params"], f"{role}_params.")
    return out


CONTINUOUS = dists.register(
    dists.Distribution("continuous", "kv_lens of one decode step of a continuous-batching simulator "
                 "after warm-up; batch_size is the max batch, so the result has 1..batch_size "
                 "requests", (
                     dists.ParamSpec("arrival_rate_per_step", "float", 0.5,
                               "mean Poisson arrivals per decode step", 1e-4, 1e4),
                     dists.ParamSpec("prompt_distribution", "str", "lognormal",
                               "per-request distribution of prompt lengths"),
                     dists.ParamSpec("prompt_params", "dict", dict(_CONTINUOUS_PROMPT_PARAMS),
                               "params of prompt_distribution; the default shown is for "
                               "lognormal; a given mapping replaces it, and keys it leaves "
                               "out take the distribution's own defaults"),
                     dists.ParamSpec("output_distribution", "str", "lognormal",
                               "per-request distribution of output lengths (decode steps)"),
                     dists.ParamSpec("output_params", "dict", dict(_CONTINUOUS_OUTPUT_PARAMS),
                               "params of output_distribution (as prompt_params)"),
                     dists.ParamSpec("max_batch", "int", None, "most running requests; unset = "
                               "batch_size, and if set it must equal batch_size", 1, MAX_BATCH),
                     dists.ParamSpec("kv_budget_tokens", "int", 524_288, "KV-cache capacity, tokens",
                               1, MAX_BATCH * MAX_KV_LEN_TOKENS),
                     dists.ParamSpec("warmup_steps", "int", 2000, "decode steps simulated before "
                               "snapshots count", 0, 10_000_000),
                     dists.ParamSpec("snapshot", "int", 0, "which non-empty step at or after "
                               "warm-up (0 = the first)", 0, 10_000_000),
                 ), lambda b, p, rng: continuous_snapshot(p, b, rng), per_request=False, finish=_finish_continuous)
)


__all__ = [
    "CONTINUOUS",
    "ARRIVAL_BLOCK_STEPS",
    "ContinuousBatcher",
    "ContinuousStats",
    "DecodeStep",
    "continuous_snapshot",
    "decode_batches",
]

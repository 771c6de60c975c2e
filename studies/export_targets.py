"""Engine translations of a tuned heuristic: FlashInfer's `fixed_split_size` and trtllm-gen's
KV-oversubscription environment variables.

Each bucket's params, planned with the heuristic's rule (kernels/parametric.py: "parametric",
ParametricPolicy, or "fixed-chunk", pieces of exactly min_tokens_per_cta tokens), are translated
only where the engine's own rule then gives every request the same split count as kvtune, for
every batch of the bucket's batch range whose requests are at most `max_kv_len_tokens` long (the
"domain"). Everywhere else the target says "not expressible" with the reason and, where one
exists, the part of the domain where it would be exact; nothing is approximated silently.
A fixed-chunk bucket is FlashInfer's fixed_split_size itself (c pages), always expressible there.

Facts about kvtune's rule used here (B requests, H_kv KV heads, c = the bucket's minimum chunk in
pages, K = max_kv_len in pages, w = max_waves, slots = S x min(ctas_per_sm, device occupancy)):
- kvtune splits some request of the domain iff max_splits >= 2, K > c and w x slots >= H_kv x
  (min_batch + 1) (a second piece must fit the budget max(w x slots, B x H_kv));
- the chunk stays c for every batch of the domain iff H_kv x max_batch x ceil(K / c) <= w x slots
  (the all-longest batch fits; fewer or shorter requests need fewer tasks), and max_splits never
  binds iff ceil(K / c) <= max_splits.
Under the fixed-chunk rule the chunk is c whatever the batch, and some request of the domain is
split iff K > c.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvtune.kernels.baselines_flashinfer import TrtllmOversubPolicy, fa2_cta_tile_q
from kvtune.kernels.parametric import FIXED_CHUNK_RULE, PARAMETRIC_RULE, rule_policy
from kvtune.kernels.plan import AttentionShape, DeviceSpec, SplitParams
from kvtune.kernels.policy_common import cdiv

DEFAULT_MAX_KV_LEN_TOKENS = 131072
ENV_MIN_TOKENS = "FLASHINFER_KV_OVERSUB_MIN_TOKENS_PER_CTA"
ENV_MAX_WAVES = "FLASHINFER_KV_OVERSUB_MAX_WAVES"
ENV_MAX_SPLITS = "FLASHINFER_KV_OVERSUB_MAX_SPLITS"
# trtllm-gen constants the env vars do not change (TrtllmOversubPolicy's defaults).
TRTLLM_TILE_KV_TOKENS = 128
TRTLLM_Q_HEADS_PER_CTA = 128
TRTLLM_MIN_DESIRED_SPLITS = 4
TRTLLM_PR_DEFAULT_MIN_TOKENS = 2048
# Keeps the counterexample search cheap: plans are built only for batches this small in pieces.
_MAX_EXAMPLE_PIECES = 200_000
# TrtllmOversubPolicy's largest max_splits (a fixed chunk's knob-for-knob MAX_SPLITS is capped).
TRTLLM_MAX_SPLITS = 4096


@dataclass(frozen=True)
class BucketFacts:
    """What both targets reason from, for one bucket and the domain (see the module docstring).

    rule: the heuristic's split rule ("parametric" or "fixed-chunk").
    """

    min_batch: int
    max_batch: int
    params: SplitParams
    chunk_pages: int
    page_size: int
    max_kv_pages: int
    ctas: int
    slots: int
    num_kv_heads: int
    max_kv_len_tokens: int
    rule: str = PARAMETRIC_RULE

    @property
    def fixed_chunk(self) -> bool:
        return self.rule == FIXED_CHUNK_RULE

    @property
    def chunk_tokens(self) -> int:
        return self.chunk_pages * self.page_size

    @property
    def pieces_at_max(self) -> int:
        """Pieces a request of max_kv_len tokens gets at chunk c, before the max_splits cap."""
        return cdiv(self.max_kv_pages, self.chunk_pages)

    @property
    def budget_tasks(self) -> int:
        return self.params.max_waves * self.slots

    def never_split_reason(self) -> str | None:
        """Why kvtune splits no request of the domain, or None when it splits some."""
        p = self.params
        if self.fixed_chunk:  # one fixed chunk: neither the budget nor max_splits applies
            if self.max_kv_pages <= self.chunk_pages:
                return (f"no request of at most {self.max_kv_len_tokens} tokens is longer than the "
                        f"{self.chunk_tokens}-token chunk")
            return None
        if p.max_splits == 1:
            return "max_splits is 1"
        if self.max_kv_pages <= self.chunk_pages:
            return (f"no request of at most {self.max_kv_len_tokens} tokens is longer than the "
                    f"{self.chunk_tokens}-token minimum chunk")
        if self.budget_tasks < self.num_kv_heads * (self.min_batch + 1):
            return (f"the budget of max_waves {p.max_waves} x {self.slots} CTA slots = "
                    f"{self.budget_tasks} tasks has no room for a second piece at "
                    f"{self.min_batch} requests x {self.num_kv_heads} KV heads")
        return None


def bucket_facts(lo: int, hi: int, params: SplitParams, shape: AttentionShape, device: DeviceSpec,
                 max_kv_len_tokens: int, rule: str = PARAMETRIC_RULE) -> BucketFacts:
    page = shape.page_size
    ctas = min(params.ctas_per_sm, device.max_ctas_per_sm)
    return BucketFacts(
        min_batch=lo, max_batch=hi, params=params,
        chunk_pages=cdiv(max(params.min_tokens_per_cta, page), page), page_size=page,
        max_kv_pages=cdiv(max_kv_len_tokens, page), ctas=ctas, slots=device.sm_count * ctas,
        num_kv_heads=shape.num_kv_heads, max_kv_len_tokens=max_kv_len_tokens, rule=rule,
    )


def flashinfer_workspace(facts: BucketFacts, shape: AttentionShape) -> dict:
    """Float workspace FlashInfer's tensor-core decode plan asks for at the bucket's worst case.

    FlashInfer (scheduler.cuh, PrefillPlan, no CUDA graph) allocates, when split-KV is on,
    `batch_prefill_tmp_v` = num_qo_heads x padded_batch x cta_tile_q x head_dim x 4 bytes and
    `batch_prefill_tmp_s` = num_qo_heads x padded_batch x cta_tile_q x 4 bytes, padded_batch being
    ceil(G / cta_tile_q) x the number of pieces. The worst case of the domain is max_batch
    requests of max_kv_len tokens each.
    """
    tile_q = fa2_cta_tile_q(shape.group_size, shape.head_dim)
    tiles_q = cdiv(shape.group_size, tile_q)
    pieces = facts.max_batch * facts.pieces_at_max if facts.pieces_at_max > 1 else 0
    per_piece_v = shape.num_qo_heads * tiles_q * tile_q * shape.head_dim * 4
    per_piece_s = shape.num_qo_heads * tiles_q * tile_q * 4
    tmp_v, tmp_s = pieces * per_piece_v, pieces * per_piece_s
    return {
        "float_workspace_bytes": _round16(tmp_v) + _round16(tmp_s),
        "tmp_v_bytes": tmp_v,
        "tmp_s_bytes": tmp_s,
        "pieces": pieces,
        "bytes_per_piece": per_piece_v + per_piece_s,
        "at_batch": facts.max_batch,
        "at_kv_len_tokens": facts.max_kv_len_tokens,
        "cta_tile_q": tile_q,
        "assumes": "every request at max_kv_len, no CUDA graph (a graph pads to the planner's "
                   "maximum); the integer workspace is separate and small",
    }


def _round16(n: int) -> int:
    return cdiv(n, 16) * 16


def flashinfer_bucket(facts: BucketFacts, shape: AttentionShape) -> dict:
    """FlashInfer tensor-core decode setting for one bucket, or every reason there is none."""
    p = facts.params
    entry = {"min_batch": facts.min_batch, "max_batch": facts.max_batch}
    if facts.fixed_chunk:
        return {**entry, "expressible": True, "disable_split_kv": False,
                "fixed_split_size_pages": facts.chunk_pages,
                "workspace": flashinfer_workspace(facts, shape),
                "note": "the heuristic's rule is fixed-chunk: fixed_split_size cuts exactly "
                        f"kvtune's pieces ({facts.chunk_pages} pages each, the last one shorter, "
                        "request order) for any batch"}
    reasons = []
    if p.schedule != "static":
        reasons.append(f"schedule {p.schedule!r}: FlashInfer's tensor-core decode launches a static "
                       "grid in request order; only 'static' maps")
    never = facts.never_split_reason()
    if never is not None and facts.max_kv_pages > facts.chunk_pages:
        if reasons:
            return {**entry, "expressible": False, "reason": "; ".join(reasons)}
        return {**entry, "expressible": True, "disable_split_kv": True, "fixed_split_size_pages": None,
                "workspace": None,
                "note": f"kvtune splits no request in this bucket ({never}); disable_split_kv=True "
                        "does the same"}
    pieces = facts.pieces_at_max
    heads, hi, budget = facts.num_kv_heads, facts.max_batch, facts.budget_tasks
    if pieces > p.max_splits:
        exact_kv = p.max_splits * facts.chunk_tokens
        reasons.append(f"max_splits {p.max_splits} binds: kvtune cuts a request longer than {exact_kv} "
                       f"tokens into {p.max_splits} equal pieces, fixed_split_size into pieces of "
                       f"{facts.chunk_pages} pages ({pieces} at {facts.max_kv_len_tokens} tokens); "
                       f"it does not bind for kv_len up to {exact_kv}")
    capped = min(pieces, p.max_splits)
    if capped > 1 and heads * hi * capped > budget:
        batch_ok = budget // (heads * capped)
        pieces_ok = budget // (heads * hi)
        where = []
        if batch_ok >= facts.min_batch:
            where.append(f"batches of at most {batch_ok} requests at this max_kv_len")
        if pieces_ok >= 2:
            where.append(f"kv_len up to {pieces_ok * facts.chunk_tokens} tokens at batch {hi}")
        hint = " (it does not bind for " + " or ".join(where) + ")" if where else ""
        reasons.append(f"the grid budget binds: {hi} requests of {facts.max_kv_len_tokens} tokens need "
                       f"{heads} x {hi} x {capped} = {heads * hi * capped} tasks > max_waves "
                       f"{p.max_waves} x {facts.slots} CTA slots = {budget}, so kvtune's chunk grows "
                       f"past {facts.chunk_tokens} tokens where fixed_split_size stays{hint}")
    if reasons:
        return {**entry, "expressible": False, "reason": "; ".join(reasons)}
    return {**entry, "expressible": True, "disable_split_kv": False,
            "fixed_split_size_pages": facts.chunk_pages,
            "workspace": flashinfer_workspace(facts, shape),
            "note": "same split count per request as kvtune; FlashInfer cuts pieces of exactly "
                    f"{facts.chunk_pages} pages (the last one shorter) where kvtune cuts equal "
                    "pieces, so the CTA count is the same and the longest piece can be longer"}


def flashinfer_target(facts_list: list[BucketFacts], shape: AttentionShape) -> dict:
    return {
        "kernel": "flashinfer-tensor-core",
        "api": "BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True).plan(..., "
               "fixed_split_size=<pages>, disable_split_kv=<bool>), chosen per batch by bucket",
        "buckets": [flashinfer_bucket(f, shape) for f in facts_list],
    }


def trtllm_knob_env(facts: BucketFacts) -> dict:
    """The env values that carry kvtune's knobs over one for one (trtllm's wave is S CTAs). A
    fixed chunk has no split cap of its own: MAX_SPLITS is then the most pieces it makes in the
    domain, ceil(K / c)."""
    max_splits = (min(facts.pieces_at_max, TRTLLM_MAX_SPLITS) if facts.fixed_chunk
                  else facts.params.max_splits)
    return {
        ENV_MIN_TOKENS: facts.chunk_tokens,
        ENV_MAX_WAVES: facts.params.max_waves * facts.ctas,
        ENV_MAX_SPLITS: max_splits,
    }


def trtllm_bucket(facts: BucketFacts, shape: AttentionShape, device: DeviceSpec) -> dict:
    """trtllm-gen env setting that reproduces one bucket, or why there is none."""
    entry = {"min_batch": facts.min_batch, "max_batch": facts.max_batch}
    knob_env = trtllm_knob_env(facts)
    if facts.params.schedule != "static" and not facts.fixed_chunk:  # fixed-chunk is always static
        return {**entry, "expressible": False, "env": None, "knob_for_knob_env": knob_env,
                "reason": f"schedule {facts.params.schedule!r}: trtllm-gen's CTA order is not "
                          "configurable; only 'static' maps"}
    never = facts.never_split_reason()
    tiles = cdiv(shape.group_size, TRTLLM_Q_HEADS_PER_CTA)
    base_split_batches = device.sm_count // (2 * shape.num_kv_heads * tiles)
    if never is not None:
        trtllm_never = (facts.min_batch > base_split_batches
                        or facts.max_kv_len_tokens <= 2 * TRTLLM_TILE_KV_TOKENS)
        if trtllm_never:
            return {**entry, "expressible": True, "knob_for_knob_env": knob_env,
                    "env": {ENV_MIN_TOKENS: TRTLLM_PR_DEFAULT_MIN_TOKENS, ENV_MAX_WAVES: 1, ENV_MAX_SPLITS: 1},
                    "reason": None,
                    "note": f"kvtune splits no request in this bucket ({never}); trtllm-gen's base "
                            f"rule splits only batches of at most {base_split_batches} requests, and "
                            "MAX_SPLITS=1 keeps oversubscription off (MIN_TOKENS_PER_CTA then has no effect)"}
        return {**entry, "expressible": False, "env": None, "knob_for_knob_env": knob_env,
                "reason": f"kvtune splits no request in this bucket ({never}), but trtllm-gen's base rule "
                          f"splits every batch of at most {base_split_batches} requests (B x H_kv x "
                          f"ceil(G/{TRTLLM_Q_HEADS_PER_CTA}) <= S/2) whatever the env vars say"}
    example = _trtllm_counterexample(facts, shape, device, knob_env)
    ours = (f"kvtune cuts each request by its own length (pieces of exactly {facts.chunk_tokens} "
            "tokens, the fixed-chunk rule)" if facts.fixed_chunk else
            "kvtune cuts each request by its own length (chunk >= "
            f"{facts.chunk_tokens} tokens, at most {facts.params.max_splits} pieces)")
    reason = (f"{ours}; trtllm-gen "
              "gives every request of a batch one split count taken from the longest request "
              "(chunk = ceil(max_L / splits)), adds a base split of up to S / (B x H_kv) that the "
              f"env vars do not control, and oversubscribes only above {TRTLLM_MIN_DESIRED_SPLITS} "
              "desired splits, so per-request splits differ")
    if example:
        reason += f"; e.g. {example}"
    return {**entry, "expressible": False, "env": None, "knob_for_knob_env": knob_env, "reason": reason}


def _example_batches(facts: BucketFacts):
    """A few batches of the domain where the two rules are likely to part (longest first)."""
    top = facts.max_kv_len_tokens
    just_over = min(top, facts.chunk_tokens + facts.page_size)
    for batch in dict.fromkeys((facts.min_batch, facts.max_batch)):
        yield batch, [(top, 1), (1, batch - 1)]
        yield batch, [(just_over, 1), (1, batch - 1)]
        yield batch, [(top, 1), (just_over, batch - 1)]
        yield batch, [(top, batch)]


def _trtllm_counterexample(facts: BucketFacts, shape, device, knob_env) -> str | None:
    kvtune = rule_policy(facts.rule, facts.params)
    trtllm = TrtllmOversubPolicy(
        min_tokens_per_cta=knob_env[ENV_MIN_TOKENS], max_waves=min(knob_env[ENV_MAX_WAVES], 1024),
        max_splits=knob_env[ENV_MAX_SPLITS],
    )
    for batch, groups in _example_batches(facts):
        groups = [(length, count) for length, count in groups if count > 0]
        if sum(cdiv(length, TRTLLM_TILE_KV_TOKENS) * count for length, count in groups) > _MAX_EXAMPLE_PIECES:
            continue
        kv_lens = np.concatenate([np.full(count, length, dtype=np.int64) for length, count in groups])
        ours = kvtune.plan(kv_lens, shape, device).splits
        theirs = trtllm.plan(kv_lens, shape, device).splits
        if not np.array_equal(ours, theirs):
            first = int(np.flatnonzero(ours != theirs)[0])
            described = " + ".join(f"{count} x {length}" for length, count in groups)
            noun = "request" if batch == 1 else "requests"
            return (f"a batch of {batch} {noun} ({described} tokens): request {first} of "
                    f"{int(kv_lens[first])} tokens gets {int(ours[first])} pieces from kvtune, "
                    f"{int(theirs[first])} from trtllm-gen with the knob-for-knob env")
    return None


def trtllm_target(facts_list: list[BucketFacts], shape: AttentionShape, device: DeviceSpec) -> dict:
    buckets = [trtllm_bucket(f, shape, device) for f in facts_list]
    envs = {tuple(sorted(b["env"].items())) for b in buckets if b["expressible"]}
    missing = [f"{b['min_batch']}..{b['max_batch']}" for b in buckets if not b["expressible"]]
    if missing:
        process = {"expressible": False, "env": None,
                   "reason": "the env vars are read once per process, so one setting must serve every "
                             f"batch size; not expressible for batches {', '.join(missing)}"}
    elif len(envs) > 1:
        process = {"expressible": False, "env": None,
                   "reason": "the env vars are read once per process and the buckets need different values"}
    else:
        process = {"expressible": True, "env": dict(next(iter(envs))), "reason": None}
    return {
        "kernel": "trtllm-gen (FlashInfer, KV oversubscription of PR 3379)",
        "scope": "process-wide: the engine reads the env vars once per process",
        "assumes": {"tile_kv_tokens": TRTLLM_TILE_KV_TOKENS, "q_heads_per_cta": TRTLLM_Q_HEADS_PER_CTA,
                    "min_desired_splits": TRTLLM_MIN_DESIRED_SPLITS,
                    "max_seq_len": "the longest request of the batch"},
        "process_wide": process,
        "buckets": buckets,
    }


def build_targets(buckets: list[tuple[int, int, SplitParams]], shape: AttentionShape,
                  device: DeviceSpec, max_kv_len_tokens: int = DEFAULT_MAX_KV_LEN_TOKENS,
                  rule: str = PARAMETRIC_RULE) -> dict:
    """The `targets` section of the heuristic file for (min_batch, max_batch, params) buckets
    planned with `rule` ("parametric" or "fixed-chunk")."""
    facts = [bucket_facts(lo, hi, p, shape, device, max_kv_len_tokens, rule)
             for lo, hi, p in buckets]
    return {
        "max_kv_len_tokens": max_kv_len_tokens,
        "domain": "every batch of a bucket's batch range whose requests are at most "
                  "max_kv_len_tokens long",
        "flashinfer": flashinfer_target(facts, shape),
        "trtllm_gen": trtllm_target(facts, shape, device),
    }


__all__ = ["DEFAULT_MAX_KV_LEN_TOKENS", "BucketFacts", "bucket_facts", "build_targets",
           "flashinfer_bucket", "flashinfer_workspace", "trtllm_bucket"]

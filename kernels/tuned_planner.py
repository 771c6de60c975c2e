"""Split counts for a decode batch from a tuned heuristic JSON (`kvtune export`), in plain numpy.

This module is meant to be vendored: it imports only the Python standard library and numpy (no
torch, no triton, nothing of kvtune), so a serving engine can copy this one file into its tree.
To vendor it: copy `kernels/tuned_planner.py` as is (keep this docstring: it says which kvtune
version and schema it follows), then

    import tuned_planner
    heuristic = tuned_planner.load_document("tuned.json")    # once, at start-up
    splits = tuned_planner.plan_splits(heuristic, kv_lens, num_sms=132)   # every decode step

`plan_splits` returns, per request, how many KV pieces the tuned rule cuts it into; `plan_pieces`
also returns the tokens per piece and the bucket used. They reproduce kvtune's `tuned` policy
(kernels.parametric.BucketedPolicy) exactly, under either rule; kvtune's tests check that.

The file's top-level `rule` (schema 1.1; absent in 1.0 files, which are "parametric") says how a
bucket's params become pieces. For B requests of L_b tokens, H_kv KV heads, S SMs and page size
P, with the params of the bucket whose [min_batch, max_batch] holds B (the last bucket above the
last max_batch), and pages_b = ceil(L_b / P):
"parametric":
  ctas = min(ctas_per_sm, max_ctas_per_sm); budget = max(max_waves * S * ctas, B * H_kv)
  c = the smallest whole number of pages >= ceil(max(min_tokens_per_cta, P) / P) with
      H_kv * sum_b min(ceil(pages_b / c), max_splits) <= budget    (binary search, as FlashInfer's)
  wanted_b = min(ceil(pages_b / c), max_splits)
  piece_pages_b = ceil(pages_b / wanted_b);  splits_b = ceil(pages_b / piece_pages_b)
"fixed-chunk" (one chunk per batch, as FlashInfer's fixed_split_size; only min_tokens_per_cta
counts, the other knobs are ignored):
  c = ceil(min_tokens_per_cta / P);  splits_b = ceil(pages_b / c);  piece_pages_b = min(c, pages_b)
Request b is cut into splits_b contiguous pieces of piece_pages_b pages (the last may be shorter).

Schema 1.2 lets a bucket name its own rule `family`, which replaces the file's rule there:
"adaptive" (one chunk per batch, computed from the batch every call, as FlashInfer's plan() can
take a fixed_split_size per decode step; knobs: max_waves = target waves W, min_tokens_per_cta =
min chunk, the bucket's max_chunk_tokens = max chunk, max_splits, ctas_per_sm), with
T = sum_b L_b, L = max_b L_b, slots = S x min(ctas_per_sm, max_ctas_per_sm), even slots
E = S x min(2, max_ctas_per_sm) and even = T x H_kv / E tokens (adaptive_chunk_pages):
  if ceil(B x H_kv / E) x T / B + (L - T / B) <= 1.2 x even: no split (c = max_b pages_b; the
      unsplit batch, whole waves of the mean request plus the longest one's excess as the tail,
      is already within 20% of an even spread);
  else, with budget = max(W x slots, B x H_kv + (W - 1) x slots) pieces, c = the smallest whole
      number of pages >= ceil(max(min chunk, P) / P) with H_kv x sum_b ceil(pages_b / c) <=
      budget (FlashInfer's own search when W = 1 and ctas_per_sm = 2); spread = min(c x P,
      max(2048, ceil(1.2 x even / W))) tokens (W pieces per slot); c = spread if its pieces
      (H_kv x sum_b ceil(pages_b / c)) exceed E (a short tail of the last wave), or if
      c x P > 1.2 x even and 1.1 x M(spread) < M(c x P), M = in_order_makespan_tokens (a batch
      one wave cannot balance is spread when that shortens the busiest slot by more than 10%);
  then c = ceil(min(max_chunk, max(min_chunk, c, ceil(L / max_splits))) / P) pages, and the
  pieces are as "fixed-chunk" with c.
"makespan" (schema 1.4; one chunk per batch, chosen every call among a few candidates by a
model of the launch; knobs: min_tokens_per_cta = smallest candidate m, the bucket's
max_chunk_tokens = largest candidate, max_splits, ctas_per_sm, and the bucket's
piece_cost_tokens = a, default DEFAULT_PIECE_COST_TOKENS; makespan_chunk_pages):
  candidates: m, 2m, 4m, ... up to max chunk, and the engine's own chunk e (engine_chunk_pages:
      FlashInfer's tensor-core decode planner, 2 CTAs per SM, min chunk 128 tokens; every
      request whole when nothing fits), each raised to ceil(L / max_splits) pages;
  cost(c) = in_order_makespan_tokens of the pieces of c over slots = S x min(ctas_per_sm,
      max_ctas_per_sm), each piece counted as its tokens + a; with N = H_kv x sum_b
      ceil(pages_b / c) pieces above MAX_SIMULATED_WAVES x slots, (H_kv x T + N x a) / slots +
      c x P + a instead (modelled_makespan_tokens);
  c = the cheapest candidate (the smaller chunk on a tie) if ENGINE_PREFERENCE x cost(c) <
      cost(e), else e; but c = e, with no candidate weighed, where the longest request is at
      most UNIFORM_SPREAD x the shortest; the pieces are as "fixed-chunk" with c.
"defer": use the engine's own planner. plan_pieces then returns `deferred=True` and no splits,
plan_splits returns None, and fixed_split_size returns None: FlashInfer's own planner (pass
fixed_split_size=None / -1), vLLM's and SGLang's own num_kv_splits logic. See docs/EXPORT.md.

Reading a file is defensive: files over MAX_FILE_BYTES, JSON nested deeper than
MAX_NESTING_DEPTH, NaN or Infinity, duplicate keys, an unknown major schema version, wrong types,
values out of range, and buckets that leave a gap or overlap are refused with a ValueError whose
one-line message names the field. (kvtune's own loader, studies.export.load_heuristic, adds the
full JSON Schema check on top of this.)
"""

from __future__ import annotations

import heapq
import json
import math
import os
import re
from typing import NamedTuple

import numpy as np

SCHEMA_MAJOR = 1
MAX_FILE_BYTES = 1_000_000
MAX_NESTING_DEPTH = 32
MAX_BATCH = 1 << 16
MAX_KV_LEN_TOKENS = 1 << 20
SCHEDULES = ("static", "static-heavy-first", "persistent-round-robin", "persistent-heavy-first")
PARAMETRIC_RULE = "parametric"
FIXED_CHUNK_RULE = "fixed-chunk"
RULES = (PARAMETRIC_RULE, FIXED_CHUNK_RULE)
ADAPTIVE_FAMILY = "adaptive"
MAKESPAN_FAMILY = "makespan"
DEFER_FAMILY = "defer"
FAMILIES = (FIXED_CHUNK_RULE, PARAMETRIC_RULE, ADAPTIVE_FAMILY, MAKESPAN_FAMILY, DEFER_FAMILY)
DEFAULT_MAX_CHUNK_TOKENS = 16384
# The makespan family's modelled cost of one piece beyond its tokens, when a bucket gives none.
DEFAULT_PIECE_COST_TOKENS = 384
# The makespan family replaces the engine's own chunk only when another chunk's modelled busiest
# slot is shorter by more than this factor: the model is a token count and misjudges near-ties.
# On 1,197 GPU cases (13 runs: H100 and H200, Triton and FlashInfer, 2026-11-26) 6% still let
# a held-out case through 3.0% slower than FlashInfer's planner (H100, mooncake B=16: the model
# saw 8%); at 10%, with piece costs 384-768, no case was slower than the engine's planner, and
# the geomean over the engine moved by under 0.3%.
ENGINE_PREFERENCE = 1.10
# On a batch whose longest request is at most this many times its shortest, the makespan family
# keeps the engine's chunk without weighing the others. Why: its model counts CTA slots at the
# bucket's CTAs per SM, but kvtune's Triton kernel picks a twin with more programs per SM when a
# launch fills a wave poorly (kernels/decode_config.py), so an unsplit uniform launch of 1-1.5
# waves on paper runs as one, and cutting it only adds pieces and a merge. On an H200
# (twenty-seventh session, docs/PERFORMANCE.md) such cuts ran 2.2% and 4.5% slower than the
# engine's unsplit launch (40 decodes at 10K, 48 four-token decodes at 8K, in hybrid serial
# steps), and the simulator at the kernel's own residency puts the s26 fp8 file's cuts of 40-48
# uniform requests at 0.90-0.98x the engine. Uniform batches are what the engine's planner was
# built for; the gains of the rule are on skewed ones (no trace batch of 8 or more requests
# here is within 2x, so this guard leaves them as they were).
UNIFORM_SPREAD = 1.25
# Beyond this many waves of pieces the makespan family does not simulate the launch (a heap step
# per piece is too slow for a planner called every decode step): it counts the mean load per
# slot plus one piece, Graham's bound for in-order list scheduling. On the 471 GPU cases of the
# third session every choice was the same as with the full simulation.
MAX_SIMULATED_WAVES = 32
# FlashInfer's decode planner: CTAs per SM it budgets (num_blocks_per_sm) and its minimum chunk.
ENGINE_CTAS_PER_SM = 2
ENGINE_MIN_CHUNK_TOKENS = 128
# The adaptive family's balance check: an unsplit batch within this factor of an even spread
# over the CTA slots is left unsplit.
BALANCE_TOLERANCE = 1.2
# The adaptive family's smallest piece when it spreads a batch that one wave cannot balance.
SPREAD_FLOOR_TOKENS = 2048
# A one-wave fit is spread only when that shortens the busiest slot's tokens by this factor.
SPREAD_MIN_GAIN = 1.1
# CTAs per SM that the adaptive family's evenness test counts: two decode CTAs per SM stream
# the copy bandwidth on Hopper (FlashInfer's decode planner also assumes two).
EVEN_CTAS_PER_SM = 2
# Inclusive ranges of the integer knobs (kvtune's SplitParams).
PARAM_RANGES = {
    "min_tokens_per_cta": (1, MAX_KV_LEN_TOKENS),
    "max_waves": (1, 64),
    "max_splits": (1, 1024),
    "ctas_per_sm": (1, 32),
}
SHAPE_RANGES = {"num_qo_heads": (1, 1024), "num_kv_heads": (1, 1024), "head_dim": (1, 1024),
                "page_size": (1, 128)}

_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_VERSION = re.compile(r"^(\d+)\.(\d+)$")


class TunedPieces(NamedTuple):
    """What the tuned rule makes of one batch.

    splits: [B] int64, pieces per request (>= 1). piece_tokens: [B] int64, tokens per piece
    (a multiple of page_size; the last piece of a request may be shorter). bucket_index: which
    entry of `buckets` was used. params: that bucket's params. chunk_tokens: the common chunk c
    in tokens (parametric: what the budget search settled on; fixed-chunk: the fixed chunk;
    adaptive: the chunk computed for this batch). rule: the file's rule. family: the rule this
    bucket planned with (its `family`, else the file's rule). deferred: True for a "defer"
    bucket: use the engine's own planner; splits, piece_tokens and chunk_tokens are then None.
    """

    splits: np.ndarray
    piece_tokens: np.ndarray
    bucket_index: int
    params: dict
    chunk_tokens: int | None
    rule: str = PARAMETRIC_RULE
    family: str = PARAMETRIC_RULE
    deferred: bool = False


class _NonFinite:
    """Stands in for a NaN/Infinity literal until the walk finds where it is."""

    def __init__(self, text: str) -> None:
        self.text = text


def read_document(path) -> dict:
    """Parse a heuristic file defensively (size, nesting, NaN/Infinity, duplicate keys).

    Returns the JSON object as a dict without checking its fields (see check_document).
    ValueError, one line, for anything unreadable.
    """
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise ValueError(f"heuristic: cannot read {os.fspath(path)!r} ({exc.strerror})") from None
    if size > MAX_FILE_BYTES:  # refused before reading a byte of it
        raise ValueError(f"heuristic: file is {size} bytes; allowed: at most {MAX_FILE_BYTES} bytes")
    with open(path, "rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)  # a file that grew since stat() is still capped
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"heuristic: file is over {MAX_FILE_BYTES} bytes; allowed: at most {MAX_FILE_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"heuristic: not UTF-8 text (byte {exc.start})") from None
    return parse_document(text)


def parse_document(text: str) -> dict:
    """The JSON object in `text`, with the checks of read_document (except the file size)."""
    if len(text) > MAX_FILE_BYTES:
        raise ValueError(f"heuristic: text is over {MAX_FILE_BYTES} characters")
    _check_nesting(text)
    try:
        doc = json.loads(text, parse_constant=_NonFinite, parse_float=_finite_float,
                         parse_int=_bounded_int, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ValueError(f"heuristic: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    _reject_non_finite(doc, "")
    if not isinstance(doc, dict):
        raise ValueError(f"heuristic: the top level is a JSON {type(doc).__name__}; allowed: an object")
    return doc


def _check_nesting(text: str) -> None:
    # Python's json recurses once per level: measure depth first, without recursion.
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                raise ValueError(
                    f"heuristic: JSON nested deeper than {MAX_NESTING_DEPTH} levels "
                    f"(at character {match.start()}); allowed: at most {MAX_NESTING_DEPTH}"
                )
        elif token in "]}":
            depth -= 1


class _HugeInt:
    """Stands in for an integer literal of more than MAX_INT_DIGITS digits (Python refuses to
    convert 4,300 digits and more, with a message that names no field) until the walk finds it."""

    def __init__(self, text: str) -> None:
        self.text = text


MAX_INT_DIGITS = 18  # every integer of the format fits in far fewer


def _bounded_int(text: str):
    return _HugeInt(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)


def _finite_float(text: str):
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _unique_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"heuristic: key {key!r} appears twice in one object; allowed: once")
        out[key] = value
    return out


def _reject_non_finite(node, path: str) -> None:
    stack = [(node, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, _NonFinite):
            raise ValueError(f"{where or 'heuristic'}: {value.text} is not allowed; allowed: a finite number")
        if isinstance(value, _HugeInt):
            raise ValueError(f"{where or 'heuristic'}: an integer of {len(value.text.lstrip('-'))} digits; "
                             f"allowed: at most {MAX_INT_DIGITS} digits")
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))


def schema_major(doc: dict) -> int:
    """The major version of doc['schema_version'] ("MAJOR.MINOR"); ValueError if unreadable."""
    version = doc.get("schema_version")
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        raise ValueError(f"schema_version: {version!r} is not \"MAJOR.MINOR\"; allowed: \"{SCHEMA_MAJOR}.x\"")
    return int(match.group(1))


def check_schema_version(doc: dict) -> None:
    """Refuse a major version this planner does not know (a minor one only adds information)."""
    major = schema_major(doc)
    if major != SCHEMA_MAJOR:
        raise ValueError(
            f"schema_version: {doc['schema_version']!r} has major version {major}; this planner "
            f"reads {SCHEMA_MAJOR}.x (export the heuristic again, or use a matching kvtune)"
        )


def _int(where: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: {value!r} is not an integer; allowed: {lo}..{hi}")
    if not lo <= value <= hi:
        raise ValueError(f"{where}: {value} out of range; allowed: {lo}..{hi}")
    return value


def _object(where: str, value) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {type(value).__name__} given; allowed: an object")
    return value


def _field(obj: dict, where: str, key: str):
    if key not in obj:
        raise ValueError(f"{where}.{key}: required field missing")
    return obj[key]


def check_params(params, where: str) -> dict:
    """The five knobs of one bucket: exactly these keys, integers in range, a known schedule."""
    params = _object(where, params)
    allowed = (*PARAM_RANGES, "schedule")
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown field; allowed: {', '.join(allowed)}")
    for key, (lo, hi) in PARAM_RANGES.items():
        _int(f"{where}.{key}", _field(params, where, key), lo, hi)
    schedule = _field(params, where, "schedule")
    if schedule not in SCHEDULES:
        raise ValueError(f"{where}.schedule: {schedule!r} not allowed; allowed: {', '.join(SCHEDULES)}")
    return params


def check_buckets(buckets) -> list:
    """Buckets ordered by batch size, starting at 1, each beginning right after the previous."""
    if not isinstance(buckets, list) or not buckets:
        raise ValueError("buckets: need a non-empty list of {min_batch, max_batch, params}")
    previous_max = 0
    for i, bucket in enumerate(buckets):
        where = f"buckets[{i}]"
        bucket = _object(where, bucket)
        allowed = ("min_batch", "max_batch", "params", "family", "max_chunk_tokens",
                   "piece_cost_tokens")
        unknown = sorted(set(bucket) - set(allowed))
        if unknown:
            raise ValueError(f"{where}.{unknown[0]}: unknown field; allowed: {', '.join(allowed)}")
        if "family" in bucket and bucket["family"] not in FAMILIES:
            raise ValueError(f"{where}.family: {bucket['family']!r} not allowed; allowed: "
                             f"{', '.join(FAMILIES)}")
        if "max_chunk_tokens" in bucket:
            _int(f"{where}.max_chunk_tokens", bucket["max_chunk_tokens"], 1, MAX_KV_LEN_TOKENS)
        if "piece_cost_tokens" in bucket:
            _int(f"{where}.piece_cost_tokens", bucket["piece_cost_tokens"], 0, MAX_KV_LEN_TOKENS)
        lo = _int(f"{where}.min_batch", _field(bucket, where, "min_batch"), 1, MAX_BATCH)
        hi = _int(f"{where}.max_batch", _field(bucket, where, "max_batch"), lo, MAX_BATCH)
        if lo <= previous_max:
            raise ValueError(
                f"{where}.min_batch: {lo} overlaps buckets[{i - 1}] (which ends at {previous_max}); "
                f"allowed: {previous_max + 1}"
            )
        if lo != previous_max + 1:
            what = "must start at 1" if i == 0 else f"leaves batch sizes {previous_max + 1}..{lo - 1} uncovered"
            raise ValueError(f"{where}.min_batch: {lo} {what}; allowed: {previous_max + 1}")
        check_params(_field(bucket, where, "params"), f"{where}.params")
        previous_max = hi
    return buckets


def document_rule(doc: dict) -> str:
    """The file's split rule: its `rule`, or "parametric" when absent (schema 1.0)."""
    rule = doc.get("rule", PARAMETRIC_RULE)
    if not isinstance(rule, str) or rule not in RULES:
        raise ValueError(f"rule: {rule!r} not allowed; allowed: {', '.join(RULES)}")
    return rule


def check_document(doc) -> dict:
    """Check every field the planner reads; return the doc. ValueError names the bad field."""
    doc = _object("heuristic", doc)
    check_schema_version(doc)
    document_rule(doc)
    shape = _object("shape", _field(doc, "heuristic", "shape"))
    for key, (lo, hi) in SHAPE_RANGES.items():
        _int(f"shape.{key}", _field(shape, "shape", key), lo, hi)
    if shape["page_size"] & (shape["page_size"] - 1):
        raise ValueError(f"shape.page_size: {shape['page_size']} is not a power of two; allowed: 1..128")
    if shape["num_qo_heads"] % shape["num_kv_heads"]:
        raise ValueError("shape.num_qo_heads: not a multiple of shape.num_kv_heads")
    device = _object("device", _field(doc, "heuristic", "device"))
    _int("device.max_ctas_per_sm", _field(device, "device", "max_ctas_per_sm"), 1, 32)
    check_buckets(_field(doc, "heuristic", "buckets"))
    return doc


def load_document(path) -> dict:
    """read_document + check_document: a heuristic ready for plan_splits."""
    return check_document(read_document(path))


def _as_document(heuristic) -> dict:
    if isinstance(heuristic, (str, os.PathLike)):
        return load_document(heuristic)
    document = getattr(heuristic, "document", heuristic)  # kvtune's loaded policy carries it
    return check_document(document)


def select_bucket(heuristic, batch_size: int) -> int:
    """Index of the bucket that plans `batch_size` requests (the last one above its max_batch)."""
    buckets = _as_document(heuristic)["buckets"]
    _int("batch_size", batch_size, 1, MAX_BATCH)
    for index, bucket in enumerate(buckets):
        if batch_size <= bucket["max_batch"]:
            return index
    return len(buckets) - 1


def _kv_lens(kv_lens) -> np.ndarray:
    arr = np.asarray(kv_lens)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError("kv_lens: need a non-empty 1-D list of request lengths")
    if arr.shape[0] > MAX_BATCH:
        raise ValueError(f"kv_lens: batch size {arr.shape[0]} out of range; allowed: 1..{MAX_BATCH}")
    integral = arr.dtype.kind in "iu" or (
        arr.dtype.kind == "f" and bool(np.all(np.isfinite(arr))) and bool(np.all(arr == np.round(arr))))
    if not integral:
        raise ValueError("kv_lens: every kv_len must be an integer")
    arr = arr.astype(np.int64)
    bad = (arr < 1) | (arr > MAX_KV_LEN_TOKENS)
    if bad.any():
        raise ValueError(f"kv_len: {int(arr[bad][0])} out of range; allowed: 1..{MAX_KV_LEN_TOKENS}")
    return arr


def adaptive_chunk_pages(kv_lens, num_kv_heads: int, page_size: int, slots: int, max_waves: int,
                         min_chunk_tokens: int, max_chunk_tokens: int, max_splits: int,
                         even_slots: int | None = None) -> int:
    """The "adaptive" family's chunk for one batch, in pages (see the module docstring).

    kv_lens: [B] tokens, each >= 1. slots: CTA slots of one wave (SMs x CTAs per SM), >= 1.
    max_waves: target waves, >= 1. min/max_chunk_tokens, max_splits: the bucket's knobs.
    even_slots: the CTAs that stream the bandwidth when the batch is spread evenly (SMs x
    EVEN_CTAS_PER_SM, capped by the occupancy; default: slots).
    The balance check keeps a batch whose requests already spread evenly over the slots unsplit
    (splitting it only adds merge work); the exact count of pieces (sum of ceilings, as FlashInfer
    counts) keeps a small batch inside W waves instead of spilling a few pieces into another one.
    """
    kv = np.asarray(kv_lens, dtype=np.int64)
    pages = -(-kv // page_size)
    max_pages = int(pages.max())
    batch, total = int(kv.shape[0]), int(kv.sum())
    even = even_slots or slots
    fair_tokens = total * num_kv_heads / even
    # The unsplit batch's makespan, in tokens per CTA: whole waves of the mean request, plus the
    # excess of the longest one as the tail (a long request dispatched late ends last). One
    # wave: the longest request; equal requests: the wave-quantised mean.
    mean_tokens = total / batch
    unsplit_tokens = (-(-batch * num_kv_heads // even) * mean_tokens
                      + (int(kv.max()) - mean_tokens))
    if unsplit_tokens <= BALANCE_TOLERANCE * fair_tokens:
        return max_pages
    # One piece per request and head always fits this budget, so the search always ends.
    budget = max(max_waves * slots, batch * num_kv_heads + (max_waves - 1) * slots)
    low = _smallest_fitting_chunk(pages, num_kv_heads, budget,
                                  -(-max(min_chunk_tokens, page_size) // page_size))
    chunk_tokens = low * page_size
    fit_pieces = num_kv_heads * int((-(-pages // low)).sum())
    if fit_pieces > even or chunk_tokens > BALANCE_TOLERANCE * fair_tokens:
        # The fit needs more than one wave of the even slots (its last wave's tail), or left
        # one piece far above the even share: pieces no longer than 1.2 x the even share / W,
        # W per slot, keep the tail short (FlashInfer's search alone stops at one piece per
        # slot). Never below SPREAD_FLOOR_TOKENS: on small batches the per-piece and merge
        # costs of smaller pieces outweigh the imbalance (FlashInfer's one-wave chunk wins).
        spread_tokens = min(chunk_tokens, max(SPREAD_FLOOR_TOKENS, math.ceil(
            BALANCE_TOLERANCE * fair_tokens / max_waves)))
        # A fit inside one wave is only spread when that shortens the busiest slot by more than
        # SPREAD_MIN_GAIN: smaller pieces that spill into a second wave can end later than the
        # one-wave fit, and every extra piece adds its start and merge work (H200, Triton
        # kernel, graph replays, 2026-11-26: 2x40/skew80/prod-mix at B=16 ran 6-15% slower
        # spread, where the in-order makespan was longer; skew40 B=16 4% slower at 0.1% shorter).
        if fit_pieces > even or (
                SPREAD_MIN_GAIN * in_order_makespan_tokens(
                    kv, num_kv_heads, page_size, -(-spread_tokens // page_size), even)
                < in_order_makespan_tokens(kv, num_kv_heads, page_size, low, even)):
            chunk_tokens = spread_tokens
    chunk_tokens = min(max_chunk_tokens,
                       max(min_chunk_tokens, chunk_tokens, -(-int(kv.max()) // max_splits)))
    return -(-chunk_tokens // page_size)


def in_order_makespan_tokens(kv_lens, num_kv_heads: int, page_size: int, chunk_pages: int,
                             slots: int, piece_cost_tokens: float = 0.0) -> float:
    """Tokens the busiest CTA slot streams when the batch is cut into chunks of `chunk_pages`
    pages and the pieces go, in launch order, each to the slot that frees first.

    Launch order is that of a static grid (FlashInfer's decode and kvtune's Triton kernel):
    every piece of request 0, then of request 1, ..., for KV head 0, then again for head 1, and
    so on. kv_lens: [B] tokens, >= 1. num_kv_heads, page_size, chunk_pages, slots: >= 1.
    piece_cost_tokens: >= 0, added to every piece (its start, its partial's write and merge, in
    tokens of streaming time); 0 counts tokens only. It compares cuts of one batch.
    """
    kv = np.asarray(kv_lens, dtype=np.int64)
    chunk = int(chunk_pages) * page_size
    counts = -(-kv // chunk)
    sizes = np.full(int(counts.sum()), chunk, dtype=np.int64)
    last = np.cumsum(counts) - 1
    sizes[last] = kv - (counts - 1) * chunk
    order = np.tile(sizes, num_kv_heads) + float(piece_cost_tokens)
    if order.size <= slots:
        return float(order.max())
    # The first wave starts together; every later piece takes the slot that frees first.
    free = order[:slots].astype(np.float64).tolist()
    heapq.heapify(free)
    for size in order[slots:].tolist():
        heapq.heapreplace(free, free[0] + size)
    return float(max(free))


def modelled_makespan_tokens(kv_lens, num_kv_heads: int, page_size: int, chunk_pages: int,
                             slots: int, piece_cost_tokens: float) -> float:
    """The makespan family's cost of cutting the batch into chunks of `chunk_pages` pages:
    in_order_makespan_tokens with `piece_cost_tokens` per piece, or, past MAX_SIMULATED_WAVES
    waves of pieces, the mean load per slot plus one whole piece (the bound of list scheduling;
    a large batch's cost is its load, and the bound keeps planning a few numpy operations).
    Arguments as in_order_makespan_tokens."""
    kv = np.asarray(kv_lens, dtype=np.int64)
    pages = -(-kv // page_size)
    pieces = num_kv_heads * int((-(-pages // chunk_pages)).sum())
    if pieces <= MAX_SIMULATED_WAVES * slots:
        return in_order_makespan_tokens(kv, num_kv_heads, page_size, chunk_pages, slots,
                                        piece_cost_tokens)
    longest = min(int(chunk_pages) * page_size, int(kv.max()))
    return ((num_kv_heads * float(kv.sum()) + pieces * float(piece_cost_tokens)) / slots
            + longest + float(piece_cost_tokens))


def engine_chunk_pages(kv_lens, num_kv_heads: int, page_size: int, num_sms: int) -> int:
    """FlashInfer's own chunk for this decode batch, in pages (its tensor-core decode planner,
    PrefillSplitQOKVIndptr, for q_len 1 and up to 128 query heads per KV head): the smallest c >=
    max(128 // page_size, 1) with sum_b ceil(pages_b / c) <= (2 x num_sms) // num_kv_heads; the
    longest request's pages (every request whole, no split) when nothing smaller fits.
    kv_lens: [B] tokens, >= 1; num_kv_heads, page_size, num_sms: >= 1."""
    pages = -(-np.asarray(kv_lens, dtype=np.int64) // page_size)
    budget = (ENGINE_CTAS_PER_SM * num_sms) // num_kv_heads
    low = max(ENGINE_MIN_CHUNK_TOKENS // page_size, 1)
    return min(_smallest_fitting_chunk(pages, 1, budget, low), int(pages.max()))


def makespan_chunk_pages(kv_lens, num_kv_heads: int, page_size: int, num_sms: int, slots: int,
                         min_chunk_tokens: int, max_chunk_tokens: int, max_splits: int,
                         piece_cost_tokens: int) -> int:
    """The "makespan" family's chunk for one batch, in pages (see the module docstring).

    kv_lens: [B] tokens, each >= 1. num_sms: the GPU's SMs (the engine's chunk depends on it).
    slots: CTA slots the model spreads pieces over (SMs x CTAs per SM), >= 1.
    min_chunk_tokens, max_chunk_tokens: the smallest and largest candidate, tokens (a max below
    the min gives the min alone). max_splits: >= 1. piece_cost_tokens: >= 0.
    Why a model and not a formula: the best chunk of a small skewed batch depends on where its
    long request's pieces land in the waves; the busiest slot of the in-order launch, with a
    fixed cost per piece, ranked the chunk grid within 1% of the per-case best chunk in
    geomean on 471 GPU cases (docs/PERFORMANCE.md, fourth session).
    """
    kv = np.asarray(kv_lens, dtype=np.int64)
    max_pages = int(-(-int(kv.max()) // page_size))
    floor_pages = -(-max_pages // max_splits)
    engine = max(engine_chunk_pages(kv, num_kv_heads, page_size, num_sms), floor_pages)
    if int(kv.max()) <= UNIFORM_SPREAD * int(kv.min()):
        return engine  # a uniform batch: the engine's own cut (UNIFORM_SPREAD)
    best_pages, best_cost = None, math.inf
    chunk_tokens = max(min_chunk_tokens, page_size)
    while True:
        pages = max(-(-chunk_tokens // page_size), floor_pages)
        cost = modelled_makespan_tokens(kv, num_kv_heads, page_size, pages, slots,
                                        piece_cost_tokens)
        if cost < best_cost:
            best_pages, best_cost = pages, cost
        if pages >= max_pages or chunk_tokens * 2 > max_chunk_tokens:
            break
        chunk_tokens *= 2
    engine_cost = modelled_makespan_tokens(kv, num_kv_heads, page_size, engine, slots,
                                           piece_cost_tokens)
    return best_pages if ENGINE_PREFERENCE * best_cost < engine_cost else engine


def plan_pieces(heuristic, kv_lens, num_sms: int, *, max_ctas_per_sm: int | None = None) -> TunedPieces:
    """Splits and piece sizes of the tuned rule for one batch (see the module docstring).

    heuristic: a document from load_document, or a path to the JSON file (read on every call:
        load it once instead on a hot path).
    kv_lens: [B] tokens per request, 1..1,048,576; B in 1..65,536.
    num_sms: the GPU's SM count, 1..1024.
    max_ctas_per_sm: the decode kernel's occupancy on this GPU, 1..32; default: the file's
        device.max_ctas_per_sm.
    Under the fixed-chunk rule the pieces depend on the lengths alone; num_sms and
    max_ctas_per_sm are still checked.
    """
    doc = _as_document(heuristic)
    kv = _kv_lens(kv_lens)
    _int("num_sms", num_sms, 1, 1024)
    occupancy = doc["device"]["max_ctas_per_sm"] if max_ctas_per_sm is None else max_ctas_per_sm
    _int("max_ctas_per_sm", occupancy, 1, 32)
    index = select_bucket(doc, int(kv.shape[0]))
    bucket = doc["buckets"][index]
    params = bucket["params"]
    heads = doc["shape"]["num_kv_heads"]
    page = doc["shape"]["page_size"]
    max_splits = params["max_splits"]
    pages = -(-kv // page)
    rule = document_rule(doc)
    family = bucket.get("family", rule)
    if family == DEFER_FAMILY:
        return TunedPieces(None, None, index, dict(params), None, rule, family, True)
    if family in (FIXED_CHUNK_RULE, ADAPTIVE_FAMILY, MAKESPAN_FAMILY):
        if family == MAKESPAN_FAMILY:
            chunk = _bucket_makespan_pages(kv, heads, page, num_sms, occupancy, params,
                                           bucket.get("max_chunk_tokens"),
                                           bucket.get("piece_cost_tokens"))
            tokens = chunk * page
        elif family == ADAPTIVE_FAMILY:
            chunk = adaptive_chunk_pages(
                kv, heads, page, num_sms * min(params["ctas_per_sm"], occupancy),
                params["max_waves"], params["min_tokens_per_cta"],
                bucket.get("max_chunk_tokens", DEFAULT_MAX_CHUNK_TOKENS), max_splits,
                even_slots=num_sms * min(EVEN_CTAS_PER_SM, occupancy))
            tokens = chunk * page
        else:
            tokens = params["min_tokens_per_cta"]
        chunk = -(-tokens // page)
        splits = -(-pages // chunk)
        piece_tokens = np.minimum(pages, chunk) * page
        return TunedPieces(splits.astype(np.int64), piece_tokens.astype(np.int64), index,
                           dict(params), int(chunk * page), rule, family)

    splits, piece_pages, low = _parametric_pieces(pages, heads, page, num_sms, occupancy, params)
    return TunedPieces(splits, (piece_pages * page).astype(np.int64), index,
                       dict(params), int(low * page), rule, family)


def _bucket_makespan_pages(kv: np.ndarray, heads: int, page_size: int, num_sms: int,
                           occupancy: int, params: dict, max_chunk_tokens: int | None,
                           piece_cost_tokens: int | None) -> int:
    """makespan_chunk_pages with a bucket's knobs (min_tokens_per_cta, max_splits, ctas_per_sm
    capped by the occupancy) and its largest candidate and piece cost (None: the defaults):
    the decode buckets' makespan family and a hybrid bucket's makespan decodes alike."""
    return makespan_chunk_pages(
        kv, heads, page_size, num_sms, num_sms * min(int(params["ctas_per_sm"]), occupancy),
        params["min_tokens_per_cta"],
        DEFAULT_MAX_CHUNK_TOKENS if max_chunk_tokens is None else max_chunk_tokens,
        params["max_splits"],
        DEFAULT_PIECE_COST_TOKENS if piece_cost_tokens is None else int(piece_cost_tokens))


def _smallest_fitting_chunk(pages: np.ndarray, heads: int, budget: int, low: int,
                            max_splits: int | None = None) -> int:
    """FlashInfer's binary search, bit for bit: the smallest chunk (pages, from `low` up to the
    longest request's pages) whose pieces, heads x sum_b ceil(pages_b / c) (each capped at
    max_splits when given), fit `budget`; `low` when low already exceeds the longest request."""
    high = max(low, int(pages.max()))
    while low < high:
        mid = (low + high) // 2
        pieces = -(-pages // mid)
        if max_splits is not None:
            pieces = np.minimum(pieces, max_splits)
        if heads * int(pieces.sum()) <= budget:
            high = mid
        else:
            low = mid + 1
    return low


def _parametric_pieces(pages: np.ndarray, heads: int, page_size: int, num_sms: int,
                       occupancy: int, params: dict) -> tuple[np.ndarray, np.ndarray, int]:
    """(splits, piece pages, chunk pages) of the "parametric" rule (the module docstring)."""
    ctas = min(params["ctas_per_sm"], occupancy)
    budget = max(params["max_waves"] * num_sms * ctas, int(pages.shape[0]) * heads)
    max_splits = params["max_splits"]
    low = _smallest_fitting_chunk(pages, heads, budget,
                                  -(-max(params["min_tokens_per_cta"], page_size) // page_size),
                                  max_splits)
    wanted = np.minimum(-(-pages // low), max_splits)
    piece_pages = -(-pages // wanted)
    splits = -(-pages // piece_pages)  # equal pieces can need fewer than asked
    return splits.astype(np.int64), piece_pages, int(low)


HYBRID_SCHEMA_PREFIX = "kvtune-hybrid-heuristic/"
# Requests with at most this many new tokens are decodes (speculative ones included).
MAX_DECODE_Q_LEN = 16


class HybridPieces(NamedTuple):
    """What a tuned hybrid heuristic (`kvtune tune --suite hybrid`, hybrid_heuristic.json) makes
    of one batch of decodes and prefill chunks.

    knobs: the bucket's params (schedule, ctas_per_sm, sm_policy, prefill_split_cap_waves,
    prefill_block_m, min_prefill_split_tokens, the decode split knobs, decode_sm_share).
    bucket_index: the bucket used. decode_requests: [D] batch indices of the decodes (q_len <=
    16). decode_splits: [D] KV pieces per decode (the parametric rule with the decode knobs, or
    the makespan family's where the bucket's `decode_family` is "makespan", schema 1.4).
    prefill_kv_splits: KV splits of every prefill tile (1..64). deferred: True when no bucket
    holds the batch: use the engine's own hybrid planner (the others are then None).
    """

    knobs: dict | None
    bucket_index: int | None
    decode_requests: np.ndarray | None
    decode_splits: np.ndarray | None
    prefill_kv_splits: int | None
    deferred: bool = False


def plan_hybrid(heuristic: dict, q_lens, kv_lens, num_sms: int, *,
                max_ctas_per_sm: int | None = None) -> HybridPieces:
    """The tuned hybrid rule for one batch (kernels.hybrid_policies.HybridTunedPolicy plans the
    same decode splits and prefill kv splits; kvtune's tests check it).

    heuristic: the parsed hybrid_heuristic.json (json.load; its `schema` starts with
        kvtune-hybrid-heuristic/), or a `kvtune export` document with a `hybrid` section
        (schema 1.3, `kvtune export --hybrid`). q_lens, kv_lens: [B] new tokens and total tokens per request
        (kv_len counts the new ones; 1 <= q_len <= kv_len <= 1,048,576). num_sms: 1..1024.
    The bucket is the one whose decode count and prefill token ranges hold the batch; the decode
    splits follow the "parametric" rule of the module docstring with the bucket's
    min_tokens_per_cta, max_waves, max_splits and ctas_per_sm (where the bucket's
    `decode_family` is "makespan", hybrid schema 1.4: the makespan family's chunk with its
    min_tokens_per_cta, max_splits, ctas_per_sm and piece_cost_tokens, over the decodes'
    kv_lens, as plan_pieces computes it); a prefill tile's kv splits are
    max(1, min(64, cap_waves x slots // (tiles x H_kv))) with tiles = sum over prefill requests of
    ceil(q_len / (block_m // G)). Outside every bucket of `buckets` (a bucket that failed its
    held-out check is listed under `deferred_buckets` instead, schema 1.2), and for a batch
    without a decode (prefill only: nothing to co-locate it with): deferred, the engine keeps its
    own planner (kvtune itself then plans `hybrid-serial`).
    """
    if isinstance(heuristic, dict) and isinstance(heuristic.get("hybrid"), dict):
        # An export of schema 1.3 carries the hybrid buckets as its `hybrid` section.
        heuristic = {**heuristic["hybrid"], "shape": heuristic["shape"],
                     "device": heuristic["device"]}
    if not isinstance(heuristic, dict) or not str(heuristic.get("schema", "")).startswith(
            HYBRID_SCHEMA_PREFIX):
        raise ValueError(f"schema: not a {HYBRID_SCHEMA_PREFIX}* document nor an export with a "
                         "hybrid section")
    _int("num_sms", num_sms, 1, 1024)
    q = np.asarray(q_lens, dtype=np.int64).ravel()
    kv = _kv_lens(kv_lens)
    if q.shape != kv.shape:
        raise ValueError(f"q_lens: {q.shape[0]} entries for {kv.shape[0]} kv_lens")
    if q.size and (q.min() < 1 or (q > kv).any()):
        raise ValueError("q_lens: each must be 1..its kv_len")
    shape = heuristic["shape"]
    heads, page = int(shape["num_kv_heads"]), int(shape["page_size"])
    group = int(shape["num_qo_heads"]) // heads
    occupancy = (heuristic["device"]["max_ctas_per_sm"] if max_ctas_per_sm is None
                 else max_ctas_per_sm)
    _int("max_ctas_per_sm", occupancy, 1, 32)
    dec = np.flatnonzero(q <= MAX_DECODE_Q_LEN)
    prefill_tokens = int(q[q > MAX_DECODE_Q_LEN].sum())
    for index, b in enumerate(heuristic.get("buckets", []) if dec.size else []):
        if (b["min_decodes"] <= dec.size <= b["max_decodes"]
                and b["min_prefill_tokens"] <= prefill_tokens <= b["max_prefill_tokens"]):
            break
    else:
        return HybridPieces(None, None, None, None, None, True)
    knobs = dict(b["params"])
    ctas = int(knobs.get("ctas_per_sm", 2))
    splits = np.ones(0, dtype=np.int64)
    if dec.size:
        params = {"min_tokens_per_cta": int(knobs.get("min_tokens_per_cta", 2048)),
                  "max_waves": int(knobs.get("max_waves", 1)),
                  "max_splits": int(knobs.get("max_splits", 32)), "ctas_per_sm": ctas}
        pages = -(-kv[dec] // page)
        family = knobs.get("decode_family") or ""
        if family not in ("", MAKESPAN_FAMILY):
            raise ValueError(f"decode_family: {family!r} in bucket {index} not allowed; allowed: "
                             f"'' (parametric) or {MAKESPAN_FAMILY!r}")
        if family == MAKESPAN_FAMILY:
            chunk = _bucket_makespan_pages(kv[dec], heads, page, num_sms, occupancy, params,
                                           None, knobs.get("piece_cost_tokens"))
            splits = (-(-pages // chunk)).astype(np.int64)
        else:
            splits = _parametric_pieces(pages, heads, page, num_sms, occupancy, params)[0]
    kv_splits = prefill_kv_splits(q, group_size=group,
                                  block_m=int(knobs.get("prefill_block_m", 128)),
                                  num_kv_heads=heads, slots=num_sms * ctas,
                                  cap_waves=int(knobs.get("prefill_split_cap_waves", 2)))
    return HybridPieces(knobs, index, dec, splits, kv_splits)


def prefill_kv_splits(q_lens, *, group_size: int, block_m: int, num_kv_heads: int,
                      slots: int, cap_waves: int) -> int:
    """The largest kv split count (1..64) that keeps the prefill tasks within `cap_waves` waves of
    `slots` CTA slots; 1 when the unsplit tiles already fill that many. A prefill request (q_len
    above MAX_DECODE_Q_LEN) has ceil(q_len / (block_m // group_size)) tiles per KV head."""
    q = np.asarray(q_lens, dtype=np.int64)
    tok = block_m // group_size
    tiles = int((-(-q[q > MAX_DECODE_Q_LEN] // tok)).sum())
    if tiles == 0:
        return 1
    return int(max(1, min(64, (cap_waves * slots) // (tiles * num_kv_heads))))


def plan_splits(heuristic, kv_lens, num_sms: int, *, max_ctas_per_sm: int | None = None):
    """Pieces per request ([B] int64, each >= 1) under the tuned heuristic; see plan_pieces.
    None for a deferred bucket: use the engine's own planner."""
    return plan_pieces(heuristic, kv_lens, num_sms, max_ctas_per_sm=max_ctas_per_sm).splits


def fixed_split_size(heuristic, kv_lens, num_sms: int, *, max_ctas_per_sm: int | None = None):
    """FlashInfer's `fixed_split_size` (pages) for this batch, or None: use FlashInfer's own
    planner (a deferred bucket; pass fixed_split_size=None, i.e. -1). ValueError for a bucket of
    the "parametric" family, whose pieces one chunk per batch cannot express (use plan_pieces)."""
    pieces = plan_pieces(heuristic, kv_lens, num_sms, max_ctas_per_sm=max_ctas_per_sm)
    if pieces.deferred:
        return None
    if pieces.family == PARAMETRIC_RULE:
        raise ValueError(f"family: bucket {pieces.bucket_index} is parametric; fixed_split_size "
                         "needs fixed-chunk, adaptive, makespan or defer")
    doc = _as_document(heuristic)
    return pieces.chunk_tokens // doc["shape"]["page_size"]


__all__ = [
    "ADAPTIVE_FAMILY",
    "BALANCE_TOLERANCE",
    "DEFAULT_PIECE_COST_TOKENS",
    "ENGINE_PREFERENCE",
    "MAKESPAN_FAMILY",
    "engine_chunk_pages",
    "makespan_chunk_pages",
    "modelled_makespan_tokens",
    "DEFER_FAMILY",
    "EVEN_CTAS_PER_SM",
    "FAMILIES",
    "FIXED_CHUNK_RULE",
    "MAX_FILE_BYTES",
    "MAX_NESTING_DEPTH",
    "PARAMETRIC_RULE",
    "RULES",
    "SCHEMA_MAJOR",
    "SPREAD_FLOOR_TOKENS",
    "SPREAD_MIN_GAIN",
    "UNIFORM_SPREAD",
    "in_order_makespan_tokens",
    "HybridPieces",
    "TunedPieces",
    "adaptive_chunk_pages",
    "check_document",
    "check_schema_version",
    "document_rule",
    "fixed_split_size",
    "load_document",
    "parse_document",
    "plan_hybrid",
    "prefill_kv_splits",
    "plan_pieces",
    "plan_splits",
    "read_document",
    "select_bucket",
]

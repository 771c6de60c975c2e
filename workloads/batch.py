"""DecodeBatch: one decode step as a kernel sees it; AttentionBatch: a hybrid step (prefill chunks,
multi-token and single-token decodes)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvtune.kernels.hybrid_plan import MAX_DECODE_Q_LEN
from kvtune.kernels.plan import DTYPE_BYTES, MAX_KV_LEN_TOKENS, AttentionShape, as_kv_lens


def attention_min_bytes(shape: AttentionShape, kv_tokens: int, q_tokens: int) -> int:
    """Fewest bytes an attention launch must move: every KV token's K and V once (at the KV
    element size, 1 byte for fp8), every query row read and its output written once (at the
    query element size). kv_tokens, q_tokens: totals over the batch."""
    kv = kv_tokens * shape.num_kv_heads * shape.kv_bytes_per_token_per_head
    qo = 2 * q_tokens * shape.num_qo_heads * shape.head_dim * DTYPE_BYTES[shape.dtype]
    return int(kv + qo)


@dataclass(frozen=True, eq=False)
class DecodeBatch:
    """kv_lens of one decode step (q_len = 1 per request) with the attention shape it runs on.

    kv_lens: [B] int64 tokens, 1..1,048,576. seed: seeds the random tensors a GPU backend fills the
    cache and queries with. distribution/params/label describe where the lengths came from.
    """

    kv_lens: np.ndarray
    shape: AttentionShape = field(default_factory=AttentionShape)
    seed: int = 0
    distribution: str = "explicit"
    params: dict = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kv_lens", as_kv_lens(self.kv_lens))

    @property
    def batch_size(self) -> int:
        return int(self.kv_lens.shape[0])

    @property
    def total_tokens(self) -> int:
        return int(self.kv_lens.sum())

    @property
    def min_bytes(self) -> int:
        """Fewest bytes a decode kernel must move: K and V once, q read and out written once."""
        return attention_min_bytes(self.shape, self.total_tokens, self.batch_size)


# MAX_DECODE_Q_LEN (16): a request with a longer q_len is a prefill chunk (tensor-core tiles of
# 64/128 query rows); at or below it a decode (1) or a speculative decode (2..16), q_len x G rows.


@dataclass(frozen=True, eq=False)
class AttentionBatch:
    """One serving step's attention: requests with `q_lens` new query tokens over `kv_lens` keys.

    q_lens: [B] int64 new tokens per request, 1..kv_len (1: decode; 2..16: speculative decode;
        above 16: a prefill chunk, at most 1,048,576). kv_lens: [B] int64 tokens cached per
        request *including* the q_len new ones, 1..1,048,576. Attention is causal inside the new
        tokens: query i (0-based) of a request attends keys 0 .. kv_len - q_len + i.
    A batch may hold only decodes or only prefill chunks. seed, distribution, params, label: as
    DecodeBatch. Bad input raises ValueError naming q_lens or kv_lens.
    """

    q_lens: np.ndarray
    kv_lens: np.ndarray
    shape: AttentionShape = field(default_factory=AttentionShape)
    seed: int = 0
    distribution: str = "explicit"
    params: dict = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        kv = as_kv_lens(self.kv_lens)
        q = np.asarray(self.q_lens)
        if q.ndim != 1 or q.shape[0] != kv.shape[0]:
            raise ValueError(f"q_lens: {q.shape[0] if q.ndim == 1 else q.shape} entries for "
                             f"{kv.shape[0]} kv_lens; allowed: one q_len per request")
        if q.size and not np.issubdtype(q.dtype, np.integer):
            if not np.all(np.equal(np.mod(q, 1), 0)):
                raise ValueError("q_lens: not integers; allowed: integers 1..kv_len")
        q = q.astype(np.int64)
        if (q < 1).any():
            raise ValueError(f"q_lens: {int(q[q < 1][0])} out of range; allowed: 1..kv_len "
                             "(a request needs at least one new token)")
        if (q > MAX_KV_LEN_TOKENS).any():
            raise ValueError(f"q_lens: chunk of {int(q.max())} tokens out of range; allowed: "
                             f"1..{MAX_KV_LEN_TOKENS}")
        if (q > kv).any():
            b = int(np.flatnonzero(q > kv)[0])
            raise ValueError(f"q_lens: request {b} has q_len {int(q[b])} > kv_len {int(kv[b])}; "
                             "allowed: 1..kv_len (kv_len counts the new tokens)")
        if not isinstance(self.shape, AttentionShape):
            raise ValueError(f"shape: {self.shape!r} is not an AttentionShape")
        object.__setattr__(self, "q_lens", q)
        object.__setattr__(self, "kv_lens", kv)

    @classmethod
    def decode(cls, batch: DecodeBatch) -> AttentionBatch:
        """The decode batch as an AttentionBatch with q_len 1 everywhere."""
        return cls(np.ones_like(batch.kv_lens), batch.kv_lens, batch.shape, batch.seed,
                   batch.distribution, dict(batch.params), batch.label)

    @property
    def batch_size(self) -> int:
        return int(self.kv_lens.shape[0])

    @property
    def total_tokens(self) -> int:
        return int(self.kv_lens.sum())

    @property
    def num_q_tokens(self) -> int:
        """sum(q_lens): rows of q and of the output."""
        return int(self.q_lens.sum())

    @property
    def is_prefill(self) -> np.ndarray:
        """[B] bool: q_len > MAX_DECODE_Q_LEN (run as prefill tiles)."""
        return self.q_lens > MAX_DECODE_Q_LEN

    @property
    def num_decodes(self) -> int:
        return int((~self.is_prefill).sum())

    @property
    def num_prefills(self) -> int:
        return int(self.is_prefill.sum())

    @property
    def prefill_tokens(self) -> int:
        return int(self.q_lens[self.is_prefill].sum())

    @property
    def max_q_len(self) -> int:
        return int(self.q_lens.max())

    @property
    def min_bytes(self) -> int:
        """Fewest bytes: K and V once, q read and the output written once."""
        return attention_min_bytes(self.shape, self.total_tokens, self.num_q_tokens)

    @property
    def causal_flops(self) -> int:
        """Matrix-product FLOPs (QK^T and PV, 2 x 2 x D per query-key pair) with causal masking."""
        q, kv = self.q_lens, self.kv_lens
        pairs = int((q * (kv - q)).sum() + (q * (q + 1) // 2).sum())
        return 4 * pairs * self.shape.num_qo_heads * self.shape.head_dim

    def summary(self) -> dict:
        """The q_lens-derived columns of a result row."""
        return {"prefill_tokens": self.prefill_tokens, "num_prefills": self.num_prefills,
                "num_decodes": self.num_decodes, "max_q_len": self.max_q_len,
                "q_tokens": self.num_q_tokens}

"""DecodeBatch: one decode step's requests as a kernel sees them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvtune.kernels.plan import DTYPE_BYTES, AttentionShape, as_kv_lens


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
        s = self.shape
        kv = self.total_tokens * s.num_kv_heads * s.kv_bytes_per_token_per_head
        qo = 2 * self.batch_size * s.num_qo_heads * s.head_dim * DTYPE_BYTES[s.dtype]
        return int(kv + qo)

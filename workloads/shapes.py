"""Named attention shapes: one GPU's shard of the decode attention of common models.

Each shape is an `AttentionShape` (kernels/plan.py) with tensor parallelism already applied, so
`llama3-70b-tp8` is what one of eight GPUs runs. Head counts are from the models' published
configs (num_attention_heads, num_key_value_heads, head_dim).
"""

from __future__ import annotations

from dataclasses import replace

from kvtune.kernels.plan import AttentionShape

DEFAULT_SHAPE_NAME = "llama3-8b"

SHAPES: dict[str, AttentionShape] = {
    # Llama-3-8B: 32 query heads, 8 KV heads (GQA group 4), head_dim 128.
    "llama3-8b": AttentionShape(num_qo_heads=32, num_kv_heads=8, head_dim=128),
    # Llama-3-70B (64 q / 8 KV heads) cut over 8 GPUs: 8 q heads and 1 KV head per GPU.
    "llama3-70b-tp8": AttentionShape(num_qo_heads=8, num_kv_heads=1, head_dim=128),
    # Qwen2.5-7B: 28 query heads, 4 KV heads (group 7), head_dim 128.
    "qwen2.5-7b": AttentionShape(num_qo_heads=28, num_kv_heads=4, head_dim=128),
    # Yi-6B: 32 query heads, 4 KV heads (group 8), head_dim 128.
    "yi-6b": AttentionShape(num_qo_heads=32, num_kv_heads=4, head_dim=128),
    # Multi-head attention (Llama-2-7B-like): 32 query and 32 KV heads (group 1), head_dim 128.
    "mha-32": AttentionShape(num_qo_heads=32, num_kv_heads=32, head_dim=128),
    # A wide group: 64 query heads over 4 KV heads (group 16), head_dim 128.
    "g16": AttentionShape(num_qo_heads=64, num_kv_heads=4, head_dim=128),
    # head_dim 64 and 256 at 16 query / 8 KV heads (group 2), for the kernels' head_dim range.
    "hd64": AttentionShape(num_qo_heads=16, num_kv_heads=8, head_dim=64),
    "hd256": AttentionShape(num_qo_heads=16, num_kv_heads=8, head_dim=256),
}


def shape_names() -> list[str]:
    """Names accepted by get_shape, default first."""
    return list(SHAPES)


def get_shape(name: str = DEFAULT_SHAPE_NAME, page_size: int | None = None,
              dtype: str | None = None, kv_dtype: str | None = None) -> AttentionShape:
    """The attention shape called `name` (case-insensitive), optionally with another page size/dtype.

    page_size: tokens per KV page, a power of two 1..128 (default 16).
    dtype: "bf16" or "fp16", queries and output (default "bf16").
    kv_dtype: "bf16", "fp16" or "fp8_e4m3", the KV cache (default: the same as dtype).
    Raises ValueError naming the allowed shapes for an unknown name, and AttentionShape's own
    ValueError for a bad page_size, dtype or kv_dtype.
    """
    key = str(name).lower()
    if key not in SHAPES:
        raise ValueError(f"shape: {name!r} unknown; allowed: {', '.join(SHAPES)}")
    shape = SHAPES[key]
    changes = {}
    if page_size is not None:
        changes["page_size"] = page_size
    if dtype is not None:
        changes["dtype"] = dtype
        # A 16-bit cache follows the query type unless a kv_dtype is given.
        changes["kv_dtype"] = kv_dtype
    if kv_dtype is not None:
        changes["kv_dtype"] = kv_dtype
    return replace(shape, **changes) if changes else shape


def shape_name(shape: AttentionShape) -> str | None:
    """The name of a shape whose heads and head_dim match `shape` (page size and dtypes ignored)."""
    for name, known in SHAPES.items():
        if (known.num_qo_heads, known.num_kv_heads, known.head_dim) == (
            shape.num_qo_heads, shape.num_kv_heads, shape.head_dim
        ):
            return name
    return None


__all__ = ["DEFAULT_SHAPE_NAME", "SHAPES", "get_shape", "shape_name", "shape_names"]

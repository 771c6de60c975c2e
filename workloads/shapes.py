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
}


def shape_names() -> list[str]:
    """Names accepted by get_shape, default first."""
    return list(SHAPES)


def get_shape(name: str = DEFAULT_SHAPE_NAME, page_size: int | None = None,
              dtype: str | None = None) -> AttentionShape:
    """The attention shape called `name` (case-insensitive), optionally with another page size/dtype.

    page_size: tokens per KV page, a power of two 1..128 (default 16).
    dtype: "bf16" or "fp16" (default "bf16").
    Raises ValueError naming the allowed shapes for an unknown name, and AttentionShape's own
    ValueError for a bad page_size or dtype.
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
    return replace(shape, **changes) if changes else shape


def shape_name(shape: AttentionShape) -> str | None:
    """The name of a shape whose heads and head_dim match `shape` (page size and dtype ignored)."""
    for name, known in SHAPES.items():
        if (known.num_qo_heads, known.num_kv_heads, known.head_dim) == (
            shape.num_qo_heads, shape.num_kv_heads, shape.head_dim
        ):
            return name
    return None


__all__ = ["DEFAULT_SHAPE_NAME", "SHAPES", "get_shape", "shape_name", "shape_names"]

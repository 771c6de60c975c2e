import pytest

from kvtune.workloads.shapes import get_shape, shape_name, shape_names


def test_default_is_llama3_8b():
    s = get_shape()
    assert (s.num_qo_heads, s.num_kv_heads, s.head_dim, s.page_size, s.dtype) == (
        32, 8, 128, 16, "bf16")
    assert shape_names()[0] == "llama3-8b"


@pytest.mark.parametrize("name, heads", [
    ("llama3-8b", (32, 8)),
    ("llama3-70b-tp8", (8, 1)),
    ("qwen2.5-7b", (28, 4)),
    ("yi-6b", (32, 4)),
    ("mha-32", (32, 32)),
    ("g16", (64, 4)),
])
def test_named_shapes(name, heads):
    s = get_shape(name)
    assert (s.num_qo_heads, s.num_kv_heads, s.head_dim) == (*heads, 128)
    assert s.kv_dtype == s.dtype == "bf16"
    assert shape_name(s) == name
    assert get_shape(name.upper()) == s


def test_head_dim_shapes_and_group_sizes():
    assert (get_shape("hd64").head_dim, get_shape("hd256").head_dim) == (64, 256)
    assert {n: get_shape(n).group_size for n in ("hd64", "hd256", "qwen2.5-7b", "g16",
                                                "llama3-70b-tp8")} == {
        "hd64": 2, "hd256": 2, "qwen2.5-7b": 7, "g16": 16, "llama3-70b-tp8": 8}


def test_kv_dtype_override_and_default():
    s = get_shape("llama3-70b-tp8", kv_dtype="fp8_e4m3")
    assert (s.dtype, s.kv_dtype, s.kv_bytes_per_token_per_head) == ("bf16", "fp8_e4m3", 256)
    assert get_shape("yi-6b", dtype="fp16").kv_dtype == "fp16"  # a 16-bit cache follows dtype
    assert get_shape("yi-6b", dtype="fp16", kv_dtype="fp8_e4m3").kv_dtype == "fp8_e4m3"
    with pytest.raises(ValueError, match="kv_dtype"):
        get_shape("yi-6b", kv_dtype="int8")


def test_page_size_and_dtype_overrides():
    s = get_shape("yi-6b", page_size=64, dtype="fp16")
    assert (s.page_size, s.dtype, s.num_kv_heads) == (64, "fp16", 4)
    assert get_shape("yi-6b").page_size == 16  # the preset itself is unchanged


def test_bad_shape_arguments():
    with pytest.raises(ValueError, match=r"shape: 'llama2' unknown; allowed: llama3-8b, "
                                         r"llama3-70b-tp8, qwen2.5-7b, yi-6b"):
        get_shape("llama2")
    with pytest.raises(ValueError, match="page_size"):
        get_shape("llama3-8b", page_size=24)
    with pytest.raises(ValueError, match="dtype"):
        get_shape("llama3-8b", dtype="fp8")

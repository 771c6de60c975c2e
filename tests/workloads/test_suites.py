import numpy as np
import pytest

from kvtune.kernels.plan import AttentionShape
from kvtune.workloads.batch import DecodeBatch
from kvtune.workloads.shapes import get_shape
from kvtune.workloads.suites import (
    Case,
    Suite,
    get_suite,
    make_suite,
    parse_batch_sizes,
    suite_names,
    threshold_batch_sizes,
)


def test_suite_names():
    assert {"threshold", "prod-mix", "traces", "smoke"} <= set(suite_names())


def test_threshold_suite_has_the_article_experiment():
    suite = get_suite("threshold")
    grid = {(c.distribution, c.batch_size) for c in suite}
    dists = {"uniform", "skew40", "skew60", "skew80", "2x40"}
    sizes = {1, 2, 4, 8, 16, 32, 33, 34, 48, 64, 128, 256, 512}
    assert {(d, b) for d in dists for b in sizes} <= grid
    assert {d for d, _ in grid} == dists
    for case in suite:
        assert case.params["total_tokens"] == 262_144
        assert case.shape == get_shape("llama3-8b")
        assert int(case.kv_lens().sum()) == 262_144


def test_threshold_sizes_follow_the_shape():
    assert {32, 33, 34, 35, 48} <= set(threshold_batch_sizes(8))
    # one KV head per GPU (Llama-3-70B at TP8): 2 * 132 / 1 = 264
    sizes = {c.batch_size for c in get_suite("threshold", "llama3-70b-tp8")}
    assert {263, 264, 265, 512, 48, 1} <= sizes


def test_prod_mix_and_traces_suites():
    prod = get_suite("prod-mix")
    sizes = {c.batch_size for c in prod}
    assert {8, 16, 32, 48, 64, 96, 128, 192, 256} <= sizes and min(sizes) == 8 and max(sizes) == 256
    assert len({c.seed for c in prod}) >= 3
    assert {c.distribution for c in prod} == {"prod-mix"}
    tr = get_suite("traces")
    assert {c.distribution for c in tr} == {"azure-conv", "azure-code", "mooncake", "arxiv",
                                           "sharegpt"}
    assert {c.batch_size for c in tr} == sizes


def test_smoke_suite_is_small_and_runs():
    suite = get_suite("smoke")
    assert 3 <= len(suite) <= 8
    for case in suite:
        batch = case.batch()
        assert isinstance(batch, DecodeBatch)
        assert batch.total_tokens <= 8192
        assert batch.label == case.case_id and batch.distribution == case.distribution


def test_case_ids_are_stable_unique_and_readable():
    for name in suite_names():
        suite = get_suite(name)
        ids = [c.case_id for c in suite]
        assert len(set(ids)) == len(ids)
        assert ids == [c.case_id for c in get_suite(name)]
    assert Case("skew80", {}, 32).case_id == "skew80:B32:seed0"
    assert Case("skew80", {"total_tokens": 262_144}, 32).case_id == "skew80:B32:seed0"
    assert Case("skew80", {"total_tokens": 4096}, 8, seed=3).case_id == \
        "skew80:B8:seed3:total_tokens=4096"
    assert Case("lognormal", {"sigma": 0.5}, 4).case_id == "lognormal:B4:seed0:sigma=0.5"
    a = Case("continuous", {"output_params": {"median_tokens": 99}}, 8).case_id
    b = Case("continuous", {"output_params": {"median_tokens": 98}}, 8).case_id
    assert a != b and a.startswith("continuous:B8:seed0:output_params=")


def test_case_batch_carries_everything():
    shape = get_shape("qwen2.5-7b", page_size=32)
    case = Case("2x40", {"total_tokens": 10_000}, 5, shape, seed=9)
    batch = case.batch()
    assert batch.kv_lens.tolist() == [4000, 4000, 667, 667, 666]
    assert batch.shape == shape and batch.seed == 9
    assert batch.params == {"total_tokens": 10_000}
    assert case.to_dict()["shape"]["num_qo_heads"] == 28
    assert np.array_equal(case.kv_lens(), Case("2x40", {"total_tokens": 10_000}, 5).kv_lens())


def test_continuous_case_batch_size_is_the_max_batch():
    case = Case("continuous", {"warmup_steps": 100}, 16, seed=1)
    kv = case.kv_lens()
    assert 1 <= kv.size <= 16
    assert case.batch().batch_size == kv.size


def test_adhoc_suite_like_the_cli():
    suite = make_suite("skew80", "1,8,64", shape="yi-6b")
    assert isinstance(suite, Suite) and suite.name == "skew80"
    assert [c.batch_size for c in suite] == [1, 8, 64]
    assert suite.cases[0].shape.num_kv_heads == 4
    seeded = make_suite("prod-mix", [8, 16], seeds=(0, 1))
    assert len(seeded) == 4
    assert make_suite("uniform", [4], {"total_tokens": 64}).cases[0].kv_lens().tolist() == [16] * 4


def test_parse_batch_sizes():
    assert parse_batch_sizes("1, 8,64") == (1, 8, 64)


@pytest.mark.parametrize("call, pattern", [
    (lambda: get_suite("nightly"), r"suite: 'nightly' unknown; allowed: threshold"),
    (lambda: get_suite("smoke", "gpt-5"), r"shape: 'gpt-5' unknown; allowed: llama3-8b"),
    (lambda: get_suite("smoke", 3), r"shape: 3"),
    (lambda: make_suite("skew90", [1]), r"distribution: 'skew90' unknown"),
    (lambda: make_suite("skew80", "1,,8"), r"batch_sizes: ''"),
    (lambda: make_suite("skew80", "0,8"), r"batch_size: 0"),
    (lambda: make_suite("skew80", []), r"batch_sizes: empty"),
    (lambda: make_suite("skew80", [-4]), r"batch_size: -4"),
    (lambda: make_suite("skew80", [4], {"share": 3}), r"share: not a parameter"),
    (lambda: make_suite("skew80", [8], seeds=(0, 0)), r"appears twice"),
    (lambda: Case("uniform", {}, 0), r"batch_size: 0"),
    (lambda: Case("uniform", {}, 4, seed=-2), r"seed: -2"),
    (lambda: Case("uniform", {}, 4, shape="llama3-8b"), r"shape: 'llama3-8b' is not an AttentionShape"),
    (lambda: Suite("empty", ()), r"cases: suite 'empty' has none"),
])
def test_errors_name_the_field(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_suite_on_an_explicit_shape():
    shape = AttentionShape(num_qo_heads=16, num_kv_heads=2, head_dim=64)
    suite = get_suite("threshold", shape)
    assert all(c.shape == shape for c in suite)
    assert {131, 132, 133} <= {c.batch_size for c in suite}

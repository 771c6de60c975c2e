import numpy as np
import pytest

from kvtune.workloads.distributions import (
    DISTRIBUTIONS,
    PROD_MIX_KV_LENS,
    PROD_MIX_WEIGHTS,
    describe_distributions,
    distribution_names,
    fixed_total_kv_lens,
    resolve_params,
    sample_kv_lens,
)

RANDOM = ["uniform-range", "prod-mix", "lognormal", "pareto", "azure-conv", "azure-code",
          "mooncake", "arxiv", "sharegpt", "continuous"]


def _params(name):
    return {"warmup_steps": 50} if name == "continuous" else {}


@pytest.mark.parametrize("name", [n for n in DISTRIBUTIONS if n != "trace"])
def test_same_seed_same_batch_and_int64(name):
    a = sample_kv_lens(name, 16, _params(name), seed=7)
    b = sample_kv_lens(name, 16, _params(name), seed=7)
    assert a.dtype == np.int64 and a.ndim == 1 and 1 <= a.size <= 16
    assert np.array_equal(a, b)
    assert a.min() >= 1


@pytest.mark.parametrize("name", RANDOM)
def test_different_seeds_differ(name):
    a = sample_kv_lens(name, 64, _params(name), seed=1)
    b = sample_kv_lens(name, 64, _params(name), seed=2)
    assert a.shape != b.shape or not np.array_equal(a, b)


def test_draws_do_not_touch_global_state():
    np.random.seed(123)
    before = np.random.random()
    np.random.seed(123)
    sample_kv_lens("lognormal", 100, seed=5)
    assert np.random.random() == before


def test_known_values_pin_the_generator():
    # PCG64 draws are specified bit for bit: a change here changes every stored workload.
    assert sample_kv_lens("uniform-range", 4, {"lo": 1, "hi": 1000}, seed=0).tolist() == [
        851, 637, 512, 270]


@pytest.mark.parametrize("name", ["uniform", "skew40", "skew60", "skew80", "2x40"])
@pytest.mark.parametrize("batch_size", [1, 2, 3, 7, 32, 33, 48, 512])
@pytest.mark.parametrize("total", [262_144, 100_003, 7919])
def test_fixed_total_sums_exactly(name, batch_size, total):
    kv = sample_kv_lens(name, batch_size, {"total_tokens": total})
    assert kv.shape == (batch_size,)
    assert int(kv.sum()) == total
    assert kv.min() >= 1


@pytest.mark.parametrize("share", [40, 60, 80])
def test_skew_shares_and_long_request_first(share):
    total, batch = 262_144, 33
    kv = sample_kv_lens(f"skew{share}", batch, {"total_tokens": total})
    assert kv[0] == total * share // 100
    rest = kv[1:]
    assert rest.max() - rest.min() <= 1  # the rest is split evenly
    assert kv[0] > rest.max()
    assert np.array_equal(kv, sample_kv_lens("skew", batch, {"total_tokens": total,
                                                            "long_percent": share}))


def test_2x40_two_long_requests_first():
    kv = sample_kv_lens("2x40", 16, {"total_tokens": 262_144})
    assert kv[0] == kv[1] == 262_144 * 40 // 100
    assert kv[2:].max() - kv[2:].min() <= 1
    assert kv[2:].max() < kv[0]


def test_small_batches_of_the_fixed_total_family():
    assert sample_kv_lens("skew80", 1, {"total_tokens": 1000}).tolist() == [1000]
    assert sample_kv_lens("2x40", 1, {"total_tokens": 1000}).tolist() == [1000]
    assert sample_kv_lens("2x40", 2, {"total_tokens": 1001}).tolist() == [501, 500]
    assert sample_kv_lens("uniform", 3, {"total_tokens": 10}).tolist() == [4, 3, 3]
    assert sample_kv_lens("skew80", 2, {"total_tokens": 10}).tolist() == [8, 2]


def test_fixed_total_too_small_names_field_and_minimum():
    with pytest.raises(ValueError, match=r"total_tokens: 5 .*allowed: >= 45"):
        sample_kv_lens("skew80", 10, {"total_tokens": 5})
    # the minimum the message gives works
    assert sample_kv_lens("skew80", 10, {"total_tokens": 45}).min() >= 1
    with pytest.raises(ValueError, match="total_tokens"):
        sample_kv_lens("uniform", 8, {"total_tokens": 7})
    with pytest.raises(ValueError, match="total_tokens"):
        fixed_total_kv_lens(1, 2_000_000, (80,))  # one kv_len above the 1M limit


def test_prod_mix_support_and_weights():
    kv = sample_kv_lens("prod-mix", 60_000, seed=3)
    values, counts = np.unique(kv, return_counts=True)
    assert values.tolist() == list(PROD_MIX_KV_LENS)
    share = counts / kv.size
    expected = np.asarray(PROD_MIX_WEIGHTS) / sum(PROD_MIX_WEIGHTS)
    assert np.abs(share - expected).max() < 0.01


def test_uniform_range_inclusive_bounds():
    kv = sample_kv_lens("uniform-range", 5000, {"lo": 3, "hi": 6}, seed=1)
    assert set(kv.tolist()) == {3, 4, 5, 6}
    assert sample_kv_lens("uniform-range", 5, {"lo": 9, "hi": 9}).tolist() == [9] * 5


def test_lognormal_median_and_clipping():
    kv = sample_kv_lens("lognormal", 20_000, {"median_tokens": 1000, "sigma": 0.5}, seed=2)
    assert abs(np.median(kv) / 1000 - 1) < 0.03
    clipped = sample_kv_lens("lognormal", 20_000, {"median_tokens": 1000, "sigma": 3,
                                                   "max_kv_len": 4000}, seed=2)
    assert clipped.max() == 4000 and clipped.min() >= 1
    assert (clipped == 1).any()  # the low tail is clipped to 1, not to 0
    assert sample_kv_lens("lognormal", 4, {"median_tokens": 77, "sigma": 0}).tolist() == [77] * 4


def test_pareto_minimum_tail_and_clipping():
    kv = sample_kv_lens("pareto", 50_000, {"scale_tokens": 100, "alpha": 2.0,
                                           "max_kv_len": 10**6}, seed=4)
    assert kv.min() >= 100
    # P(X > 400) = (100/400)^2
    assert abs((kv > 400).mean() - 1 / 16) < 0.005
    heavy = sample_kv_lens("pareto", 50_000, {"scale_tokens": 100, "alpha": 0.05,
                                              "max_kv_len": 5000}, seed=4)
    assert heavy.max() == 5000 and heavy.dtype == np.int64


def test_registry_lists_every_name_with_defaults():
    described = describe_distributions()
    required = {"uniform", "uniform-range", "skew40", "skew60", "skew80", "2x40", "prod-mix",
                "lognormal", "pareto", "trace", "azure-conv", "azure-code", "mooncake", "arxiv",
                "sharegpt", "continuous"}
    assert required <= set(described)
    assert described["uniform"]["params"]["total_tokens"]["default"] == 262_144
    assert described["lognormal"]["params"]["max_kv_len"]["default"] == 131_072
    assert described["pareto"]["params"]["max_kv_len"]["default"] == 131_072
    assert set(described["uniform-range"]["params"]) == {"lo", "hi"}
    for entry in described.values():
        assert entry["summary"]
        for p in entry["params"].values():
            assert p["description"] and p["allowed"]
    assert "continuous" not in distribution_names(per_request_only=True)
    assert "skew80" not in distribution_names(per_request_only=True)


def test_params_from_strings_like_the_cli_passes_them():
    assert resolve_params("uniform", {"total_tokens": "4096"}) == {"total_tokens": 4096}
    assert resolve_params("lognormal", {"sigma": "0.5"})["sigma"] == 0.5
    cont = resolve_params("continuous", {"output_params": '{"median_tokens": 64}'})
    assert cont["output_params"]["median_tokens"] == 64


@pytest.mark.parametrize("call, pattern", [
    (lambda: sample_kv_lens("zipf", 4), r"distribution: 'zipf' unknown; allowed: uniform"),
    (lambda: sample_kv_lens("uniform", 0), r"batch_size: 0 .*allowed: integer 1\.\.65536"),
    (lambda: sample_kv_lens("uniform", -3), r"batch_size: -3"),
    (lambda: sample_kv_lens("uniform", 4, seed=-1), r"seed: -1"),
    (lambda: sample_kv_lens("uniform", 4, {"totl": 9}), r"totl: .*allowed: total_tokens"),
    (lambda: sample_kv_lens("prod-mix", 4, {"x": 9}), r"x: .*allowed: none"),
    (lambda: sample_kv_lens("uniform", 4, {"total_tokens": 0}), r"total_tokens: 0 .*allowed"),
    (lambda: sample_kv_lens("uniform-range", 4, {"lo": 0}), r"lo: 0 .*allowed: int in 1\.\."),
    (lambda: sample_kv_lens("uniform-range", 4, {"hi": -5}), r"hi: -5"),
    (lambda: sample_kv_lens("uniform-range", 4, {"lo": 9, "hi": 3}), r"lo: 9 is above hi 3"),
    (lambda: sample_kv_lens("uniform-range", 4, {"lo": 1.5}), r"lo: 1.5"),
    (lambda: sample_kv_lens("uniform-range", 4, {"lo": True}), r"lo: True"),
    (lambda: sample_kv_lens("lognormal", 4, {"median_tokens": 0}), r"median_tokens: 0"),
    (lambda: sample_kv_lens("lognormal", 4, {"sigma": "wide"}), r"sigma: 'wide'"),
    (lambda: sample_kv_lens("pareto", 4, {"alpha": 0}), r"alpha: 0 .*allowed: float in"),
    (lambda: sample_kv_lens("pareto", 4, {"max_kv_len": 0}), r"max_kv_len: 0"),
    (lambda: sample_kv_lens("trace", 4), r"path: required"),
    (lambda: sample_kv_lens("skew", 4, {"long_percent": 100}), r"long_percent: 100 .*1\.\.99"),
])
def test_bad_input_names_the_field(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()

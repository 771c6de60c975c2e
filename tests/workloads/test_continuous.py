import time
from collections import defaultdict

import numpy as np
import pytest

from kvtune.workloads.continuous import ContinuousBatcher, decode_batches
from kvtune.workloads.distributions import sample_kv_lens

# Tight budget and a short output so that admission, preemption and departures all happen often.
TIGHT = {
    "arrival_rate_per_step": 0.8,
    "prompt_distribution": "uniform-range",
    "prompt_params": {"lo": 100, "hi": 3000},
    "output_distribution": "uniform-range",
    "output_params": {"lo": 1, "hi": 120},
    "kv_budget_tokens": 40_000,
}


def _run(params, max_batch, steps, seed=0):
    batcher = ContinuousBatcher(params, batch_size=max_batch, seed=seed)
    return batcher, [batcher.step() for _ in range(steps)]


def test_batch_and_kv_budget_never_exceeded():
    batcher, steps = _run(TIGHT, max_batch=24, steps=3000)
    sizes = np.array([s.kv_lens.size for s in steps])
    tokens = np.array([int(s.kv_lens.sum()) for s in steps])
    assert sizes.max() <= 24 and tokens.max() <= 40_000
    assert sizes.max() == 24 or tokens.max() > 35_000  # the limits were actually reached
    assert batcher.stats.preempted > 0  # growth past the budget forced preemption


def test_each_request_runs_its_output_steps_with_growing_kv():
    batcher, steps = _run(TIGHT, max_batch=24, steps=3000)
    seen = defaultdict(list)
    for s in steps:
        assert len(set(s.request_ids.tolist())) == s.request_ids.size
        for rid, kv in zip(s.request_ids.tolist(), s.kv_lens.tolist()):
            seen[rid].append((s.step, kv))
    finished = 0
    for rid, rows in seen.items():
        prompt = int(batcher.prompt_tokens([rid])[0])
        output = int(batcher.output_tokens([rid])[0])
        kvs = [kv for _, kv in rows]
        # one token more every step it runs, starting at prompt + 1
        assert kvs == list(range(prompt + 1, prompt + 1 + len(kvs)))
        assert len(kvs) <= output
        assert rows[0][0] >= batcher.arrival_steps([rid])[0]
        if rows[-1][0] < steps[-1].step:  # it left before the end: after exactly its output
            assert len(kvs) == output
            finished += 1
    assert finished == batcher.stats.finished > 100


def test_fcfs_admission_order():
    _, steps = _run(TIGHT, max_batch=24, steps=2000)
    first_step = {}
    for s in steps:
        for rid in s.request_ids.tolist():
            first_step.setdefault(rid, s.step)
    ids = sorted(first_step)
    starts = [first_step[i] for i in ids]
    # a later arrival never starts before an earlier one
    assert starts == sorted(starts)


def test_arrival_rate():
    batcher, _ = _run({"arrival_rate_per_step": 0.37}, max_batch=64, steps=20_000)
    rate = batcher.stats.arrived / 20_000
    assert abs(rate - 0.37) < 0.02


def test_light_load_runs_every_request_without_waiting():
    params = {"arrival_rate_per_step": 0.05, "prompt_distribution": "uniform-range",
              "prompt_params": {"lo": 10, "hi": 20}, "output_distribution": "uniform-range",
              "output_params": {"lo": 5, "hi": 5}}
    batcher, steps = _run(params, max_batch=64, steps=4000)
    # Little's law: mean running = rate x steps each request runs
    mean_running = np.mean([s.kv_lens.size for s in steps])
    assert abs(mean_running - 0.05 * 5) < 0.05
    assert batcher.stats.preempted == 0 and batcher.stats.rejected == 0
    assert batcher.stats.admitted == batcher.stats.arrived  # admitted in the step they arrive


def test_too_long_requests_are_rejected():
    params = dict(TIGHT, prompt_params={"lo": 39_000, "hi": 39_990}, arrival_rate_per_step=0.2)
    batcher, steps = _run(params, max_batch=8, steps=500)
    assert batcher.stats.rejected > 0
    assert max(int(s.kv_lens.sum()) for s in steps) <= 40_000


def test_deterministic_and_seed_dependent():
    a = [kv.tolist() for kv in decode_batches(TIGHT, 16, seed=3, num_steps=400)]
    b = [kv.tolist() for kv in decode_batches(TIGHT, 16, seed=3, num_steps=400)]
    c = [kv.tolist() for kv in decode_batches(TIGHT, 16, seed=4, num_steps=400)]
    assert a == b and a != c


def test_ten_thousand_steps_are_fast():
    batcher = ContinuousBatcher({}, batch_size=256, seed=0)
    start = time.perf_counter()
    for _ in range(10_000):
        batcher.step()
    assert time.perf_counter() - start < 5.0


def test_snapshot_distribution():
    params = dict(TIGHT, warmup_steps=300)
    first = sample_kv_lens("continuous", 24, params, seed=1)
    later = sample_kv_lens("continuous", 24, dict(params, snapshot=5), seed=1)
    assert 1 <= first.size <= 24 and first.sum() <= 40_000
    assert not np.array_equal(first, later)
    # the snapshot is the 300th step of the same simulation
    steps = list(decode_batches(params, 24, seed=0, num_steps=301))
    assert sample_kv_lens("continuous", 24, params, seed=0).tolist() == steps[300].tolist()


def test_snapshot_skips_idle_steps():
    params = {"arrival_rate_per_step": 0.001, "warmup_steps": 0, "output_distribution":
              "uniform-range", "output_params": {"lo": 1, "hi": 1}}
    kv = sample_kv_lens("continuous", 4, params, seed=0)
    assert kv.size >= 1


@pytest.mark.parametrize("params, pattern", [
    ({"max_batch": 8}, r"max_batch: 8 differs from batch_size 16"),
    ({"prompt_distribution": "skew80"}, (r"prompt_distribution: 'skew80' not allowed; "
                                         r"allowed: uniform-range")),
    ({"output_distribution": "continuous"}, r"output_distribution: 'continuous'"),
    ({"prompt_params": {"median": 5}}, r"prompt_params\.median: .*allowed: median_tokens"),
    ({"output_params": {"sigma": 9}}, r"output_params\.sigma: 9"),
    ({"arrival_rate_per_step": 0}, r"arrival_rate_per_step: 0"),
    ({"kv_budget_tokens": 0}, r"kv_budget_tokens: 0"),
    ({"warmup_steps": -1}, r"warmup_steps: -1"),
    ({"rate": 1}, r"rate: not a parameter of distribution 'continuous'"),
])
def test_bad_params(params, pattern):
    with pytest.raises(ValueError, match=pattern):
        sample_kv_lens("continuous", 16, params)


def test_other_distributions_feed_prompts_and_outputs():
    params = {"prompt_distribution": "azure-conv", "output_distribution": "pareto",
              "output_params": {"scale_tokens": 20, "alpha": 1.2, "max_kv_len": 2000},
              "warmup_steps": 200}
    kv = sample_kv_lens("continuous", 32, params, seed=2)
    assert kv.size >= 1 and kv.min() >= 2

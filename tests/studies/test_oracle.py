"""The oracle's per-request split search: grouping, and that it is never beaten by a baseline."""

from __future__ import annotations

import numpy as np

from kvtune.harness.device import device_model
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape
from kvtune.studies.oracle import ExplicitSplitPolicy, OracleSearch, length_groups
from kvtune.studies.records import RowRecorder
from kvtune.studies.space import space_for
from tests.studies.conftest import sim_cases, sim_runner

BASELINES = ("flashinfer-tensor-core", "flashinfer-cuda-core", "fa3", "trtllm-oversub",
             "fixed-split", "no-split", "sglang-triton", "vllm-triton")


def test_groups_per_request_by_length_and_by_rank():
    assert list(length_groups(np.array([5, 5, 9]))) == [0, 1, 2]
    assert list(length_groups(np.array([500, 900, 500, 900, 501]))) == [0, 1, 0, 1, 0]
    g = length_groups(np.arange(1, 17) * 100)
    assert sorted(set(g)) == [0, 1, 2, 3] and list(g) == sorted(g)


def test_explicit_splits_plan_as_asked():
    plan = ExplicitSplitPolicy((1, 4), "persistent-heavy-first", 2).plan(
        np.array([100, 4096]), AttentionShape(), device_model("h200"))
    assert list(plan.splits) == [1, 4] and plan.grid_size <= 132 * 2


def test_oracle_on_a_tiny_case_beats_or_equals_every_baseline():
    case = sim_cases(distribution="skew80", batch_sizes="3", total_tokens=32768)[0]
    runner = sim_runner()
    space = space_for(runner.device, case.batch.shape)
    recorder = RowRecorder(None)
    seeds = [policies.get(name) for name in BASELINES]
    result = OracleSearch(runner, space, recorder, study_name="s/1-8", bucket="1-8").run(case, seeds)
    for name in BASELINES:
        row, _ = runner.measure_one(case, policies.get(name))
        assert result.best_us <= row["latency_us"] * (1 + 1e-9), name
    no_split = runner.measure_one(case, policies.get("no-split"))[0]["latency_us"]
    assert result.best_us < 0.8 * no_split  # the long request is worth splitting
    assert result.method.startswith("exhaustive") and result.evaluations == len(recorder.rows)
    assert {r["phase"] for r in recorder.rows} == {"oracle"}
    assert max(result.splits) > 1


def test_larger_batch_uses_coordinate_descent_within_budget():
    case = sim_cases(distribution="skew60", batch_sizes="24", total_tokens=65536)[0]
    runner = sim_runner()
    space = space_for(runner.device, case.batch.shape, overrides={"ctas_per_sm": "1,2",
                                                                  "schedule": "static,persistent-heavy-first"})
    result = OracleSearch(runner, space, RowRecorder(None), study_name="s", bucket="9-32").run(case)
    assert result.method in ("exhaustive", "coordinate-descent")
    assert result.evaluations < 200
    fa3 = runner.measure_one(case, policies.get("fa3"))[0]["latency_us"]
    assert result.best_us <= fa3

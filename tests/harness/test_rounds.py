"""Interleaved rounds (harness/rounds.py) and Runner.run(rounds=N): the order alternates, each
policy's rounds merge into one row, and a drift between back-to-back measurements stops showing
as a difference between two policies that run the same work."""

import json
import math

import pytest

from kvtune.harness.rounds import MAX_ROUNDS, check_rounds, merge_rounds, round_order
from kvtune.harness.runner import Runner, Series
from kvtune.kernels import policies


def _row(latency, p10=None, p90=None, **extra):
    p10 = latency * 0.99 if p10 is None else p10
    p90 = latency * 1.01 if p90 is None else p90
    return {"status": "ok", "latency_us": latency, "p10_us": p10, "p90_us": p90,
            "mean_us": latency, "std_us": 1.0, "samples": 10, "noise_met": True,
            "bytes_moved": 1_000_000, "ceiling_bytes_per_s": 2e12, "interference_retries": 0,
            "rel_spread": (p90 - p10) / latency, **extra}


def test_round_order_alternates():
    assert round_order([0, 1, 2], 0) == [0, 1, 2]
    assert round_order([0, 1, 2], 1) == [2, 1, 0]
    assert round_order(range(2), 2) == [0, 1]


@pytest.mark.parametrize("bad", [0, -1, MAX_ROUNDS + 1, 1.5, "2", True, None])
def test_check_rounds_names_the_field(bad):
    with pytest.raises(ValueError, match=r"^rounds: .*allowed: an integer 1\.\.20"):
        check_rounds(bad)
    assert check_rounds(3) == 3


def test_merge_takes_the_median_of_the_round_medians_and_pools_the_rest():
    rows = [_row(100.0, 98.0, 103.0), _row(110.0, 107.0, 111.0), _row(104.0, 101.0, 120.0)]
    rows[1]["noise_met"] = False
    rows[2]["interference_retries"] = 1
    m = merge_rounds(rows)
    assert m["latency_us"] == 104.0
    assert (m["p10_us"], m["p90_us"]) == (98.0, 120.0)
    assert m["rel_spread"] == pytest.approx((120.0 - 98.0) / 104.0)
    assert m["samples"] == 30 and m["rounds"] == 3 and m["interference_retries"] == 1
    assert m["noise_met"] is False
    assert json.loads(m["round_latencies_us"]) == [100.0, 110.0, 104.0]
    grand = (100 + 110 + 104) / 3
    between = ((100 - grand) ** 2 + (110 - grand) ** 2 + (104 - grand) ** 2) / 3
    assert m["mean_us"] == pytest.approx(grand)
    assert m["std_us"] == pytest.approx(math.sqrt(1.0 + between))
    assert m["achieved_bytes_per_s"] == pytest.approx(1e6 / 104e-6)
    assert m["bw_fraction"] == pytest.approx(1e6 / 104e-6 / 2e12)


def test_merge_of_two_rounds_is_their_mean_and_one_round_stays_as_is():
    assert merge_rounds([_row(100.0), _row(102.0)])["latency_us"] == pytest.approx(101.0)
    one = merge_rounds([_row(100.0)])
    assert one["latency_us"] == 100.0 and one["rounds"] == 1 and one["samples"] == 10


def test_a_round_that_failed_makes_the_row_failed():
    bad = {"status": "failed", "message": "verification failed", "latency_us": float("nan")}
    m = merge_rounds([_row(100.0), bad])
    assert m["status"] == "failed" and m["message"] == "verification failed"
    assert m["rounds"] == 2
    with pytest.raises(ValueError, match="rows"):
        merge_rounds([])


class DriftRunner(Runner):
    """Every measurement reads the same work 1% slower than the one before (a drift), and
    records the order of the calls."""

    def __init__(self):
        super().__init__(backend=None, device=None)
        self.calls = []

    def measure_one(self, case, policy, series=None):
        self.calls.append(policy.label)
        latency = 100.0 * 1.01 ** (len(self.calls) - 1)
        return {**_row(latency), "case_id": case, "series": policy.label}, None


def _two_series():
    return [Series("a", policies.get("fa3")), Series("b", policies.get("fa3"))]


def test_runner_rounds_alternate_and_cancel_a_linear_drift():
    single = DriftRunner().run(["c"], _two_series())
    assert single[1]["latency_us"] / single[0]["latency_us"] == pytest.approx(1.01)
    runner = DriftRunner()
    seen = []
    runner.on_row = seen.append
    rows = runner.run(["c"], _two_series(), rounds=2)
    assert runner.calls == ["a", "b", "b", "a"]
    assert [r["series"] for r in rows] == ["a", "b"] and seen == rows
    # a: calls 0 and 3, b: calls 1 and 2 -> (1 + 1.01^3) / 2 against (1.01 + 1.01^2) / 2
    ratio = rows[1]["latency_us"] / rows[0]["latency_us"]
    assert abs(ratio - 1.0) < 2e-4 and all(r["rounds"] == 2 for r in rows)


def test_runner_rejects_bad_rounds_before_measuring():
    runner = DriftRunner()
    with pytest.raises(ValueError, match="rounds"):
        runner.run(["c"], _two_series(), rounds=0)
    assert runner.calls == []


def _speedups(worst):
    import pandas as pd

    return pd.DataFrame([{"policy": "tuned", "kind": "all", "never_2pct_slower": worst >= 1 / 1.02}])


def test_one_round_note_only_for_a_measured_one_round_run_that_fails_the_check():
    from kvtune.harness.hybrid_summary import ONE_ROUND_NOTE, one_round_note

    measured = [{"simulated": False, "latency_us": 1.0}]
    assert one_round_note(measured, _speedups(0.97)) == ONE_ROUND_NOTE
    assert one_round_note(measured, _speedups(0.99)) is None  # the check holds
    assert one_round_note([{"simulated": True}], _speedups(0.97)) is None  # the simulator
    assert one_round_note([{"simulated": False, "rounds": 2}], _speedups(0.97)) is None
    assert one_round_note([{"simulated": False, "rounds": 1}], _speedups(0.97)) == ONE_ROUND_NOTE
    assert one_round_note([], _speedups(0.97)) is None
    assert one_round_note(measured, _speedups(0.97).iloc[:0]) is None

"""The noise-aware choice of the winner among the re-measured finalists."""

from __future__ import annotations

import pytest

from kvtune.kernels.plan import SplitParams
from kvtune.studies.finalists import FinalistStats, choose, measure_finalists
from kvtune.studies.records import RowRecorder
from tests.studies.conftest import sim_cases, sim_runner


def stats(scores, ctas, failed=None, tokens=128):
    return FinalistStats(SplitParams(min_tokens_per_cta=tokens), tuple(scores),
                         tuple(1000 * s for s in scores), {}, ctas, failed)


def test_fastest_wins_when_the_others_are_clearly_slower():
    finalists = [stats([1.00, 1.01, 1.00], 500), stats([1.10, 1.11, 1.12], 10)]
    assert choose(finalists) == 0


def test_simpler_config_wins_within_the_noise():
    # B is a bit slower at the median but its range overlaps A's, and it launches fewer CTAs.
    finalists = [stats([0.95, 1.00, 1.05], 900), stats([0.99, 1.02, 1.04], 300),
                 stats([1.20, 1.21, 1.22], 100)]
    assert choose(finalists) == 1


def test_without_noise_only_an_exact_tie_goes_to_the_simpler():
    assert choose([stats([1.0], 900), stats([1.0000001], 10)]) == 0
    assert choose([stats([1.0], 900), stats([1.0], 10)]) == 1


def test_failed_finalist_never_wins_and_none_left_is_an_error():
    finalists = [stats([], 1, failed="failed on c: output wrong"), stats([1.5, 1.5], 900)]
    assert choose(finalists) == 1
    with pytest.raises(ValueError, match="finalists"):
        choose([stats([], 1, failed="x")])


def test_spread_and_percentiles():
    s = stats([1.0, 2.0, 3.0], 5)
    assert s.median == 2.0 and s.p10 == pytest.approx(1.2) and s.p90 == pytest.approx(2.8)
    assert s.spread == pytest.approx(0.8)
    f = s.to_finalist(True)
    assert f.chosen and f.score_median == 2.0 and f.ctas == 5


def test_measurement_is_interleaved_round_by_round_case_by_case():
    cases = sim_cases(batch_sizes="4,8")
    runner = sim_runner()
    recorder = RowRecorder(None)
    candidates = [SplitParams(min_tokens_per_cta=128), SplitParams(min_tokens_per_cta=4096),
                  SplitParams(min_tokens_per_cta=512)]
    baselines = {c.case_id: {"fa3": 500.0} for c in cases}
    out = measure_finalists(runner, cases, candidates, baselines, recorder, study_name="s/1-8",
                            bucket="1-8", rounds=2)
    order = [(r["round"], r["case_id"], r["candidate"]) for r in recorder.rows]
    expected = [(r, c.case_id, i) for r in range(2) for c in cases for i in range(3)]
    assert order == expected
    assert all(r["phase"] == "finalist" for r in recorder.rows)
    for s in out:
        assert len(s.scores) == 2 and s.spread == 0.0  # the simulator is deterministic
        assert set(s.case_us) == {c.case_id for c in cases} and s.ctas > 0


def test_runners_up_are_the_safe_faster_than_default_finalists_fastest_first():
    from kvtune.studies.finalists import runners_up

    def at(case_us, score, ctas=100, failed=None):
        return FinalistStats(SplitParams(), (score,), (1000 * score,), case_us, ctas, failed)

    default = {"a": 100.0, "b": 100.0}
    finalists = [
        at({"a": 60.0, "b": 70.0}, 0.6),       # the winner: never its own runner-up
        at({"a": 90.0, "b": 99.0}, 0.9),       # safe and faster: second
        at({"a": 50.0, "b": 103.0}, 0.5),      # 1.03x the default on b: past the 1.02 limit
        at({"a": 80.0, "b": 101.0}, 0.8),      # within the limit, faster in geomean: first
        at({"a": 101.0, "b": 100.0}, 1.0),     # not faster than the default in geomean
        at({}, 0.1, failed="output wrong"),    # failed
    ]
    assert runners_up(finalists, 0, default, 1.02, count=5) == [3, 1]
    assert runners_up(finalists, 0, default, 1.02, count=1) == [3]
    assert runners_up(finalists, 0, None) == []

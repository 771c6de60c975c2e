"""The interference guard's decisions (harness/interference.py), with fake probes: no GPU."""

import math

import pytest

from kvtune.harness.interference import QuietCheck, QuietGuard, QuietOutcome, measure_quietly
from kvtune.harness.timing import TimingResult


def fake_guard(speeds, check=None):
    """A guard whose probes return `speeds` in order (higher is quieter)."""
    it = iter(speeds)
    return QuietGuard(lambda: next(it), check or QuietCheck())


def counting(values):
    """measure() returning values in order, and the list of what it returned."""
    it = iter(values)
    seen = []

    def measure():
        seen.append(next(it))
        return seen[-1]

    return measure, seen


def test_no_guard_measures_once():
    measure, seen = counting([1.0, 2.0])
    result, outcome = measure_quietly(measure, None)
    assert result == 1.0 and seen == [1.0]
    assert math.isnan(outcome.quiet_ratio) and outcome.retries == 0 and outcome.quiet


def test_quiet_bracket_keeps_the_first_measurement():
    measure, seen = counting([10.0, 20.0])
    sleeps = []
    result, outcome = measure_quietly(measure, fake_guard([4.2e12, 4.1e12]), sleeps.append)
    assert result == 10.0 and seen == [10.0] and sleeps == []
    assert outcome.quiet and outcome.retries == 0
    assert outcome.quiet_ratio == pytest.approx(4.1 / 4.2)


def test_a_slow_probe_after_a_quiet_one_retries_until_quiet():
    # the first bracket sets the reference at 4.2 TB/s; the second reads 2.0 after the
    # measurement (a window began): measured again after wait_s, then quiet.
    check = QuietCheck(wait_s=1.5)
    guard = fake_guard([4.2e12, 4.2e12, 4.2e12, 2.0e12, 4.1e12, 4.2e12], check)
    first, _ = counting([50.0])
    measure_quietly(first, guard)
    measure, seen = counting([95.0, 46.0])
    sleeps = []
    result, outcome = measure_quietly(measure, guard, sleeps.append)
    assert result == 46.0 and seen == [95.0, 46.0]
    assert outcome.retries == 1 and outcome.quiet and sleeps == [1.5]


def test_a_guard_without_readings_has_no_reference():
    guard = fake_guard([])
    assert math.isnan(guard.reference)


def test_one_lucky_high_probe_does_not_set_the_bar():
    # Quiet probes read 3.5-3.7; one read 4.3. With the maximum as the reference 3.6 would be
    # "disturbed" (0.84); the second-fastest reading keeps it quiet.
    readings = [3.6e12, 3.7e12, 4.3e12, 3.5e12, 3.6e12, 3.7e12, 3.6e12, 3.5e12, 3.6e12, 3.7e12,
                3.6e12, 3.6e12]
    guard = fake_guard(readings + [3.6e12, 3.6e12])
    for _ in readings:
        guard.probe()
    assert guard.reference == pytest.approx(3.7e12)
    _, outcome = measure_quietly(counting([1.0])[0], guard, lambda s: None)
    assert outcome.quiet and outcome.retries == 0


def test_retries_are_bounded_and_the_fastest_attempt_is_kept():
    check = QuietCheck(max_retries=2, wait_s=0.0)
    guard = fake_guard([4.0e12, 4.0e12] + [1.0e12] * 6, check)
    guard.probe()  # two quiet readings: 4.0
    guard.probe()
    result, outcome = measure_quietly(counting([3.0, 1.0, 2.0])[0], guard, lambda s: None,
                                      key=lambda r: r)
    assert result == 1.0
    assert outcome.retries == 2 and not outcome.quiet
    assert outcome.quiet_ratio == pytest.approx(0.25)
    assert outcome.to_dict() == {"quiet_ratio": pytest.approx(0.25), "interference_retries": 2,
                                 "quiet": False}
    # six disturbed readings against two quiet ones: the reference stays the quiet speed
    assert guard.reference == pytest.approx(4.0e12)
    # without a key: the last attempt
    guard = fake_guard([4.0e12, 4.0e12] + [1.0e12] * 6, check)
    guard.probe()
    guard.probe()
    result, _ = measure_quietly(counting([3.0, 1.0, 2.0])[0], guard, lambda s: None)
    assert result == 2.0


def test_tolerance_decides():
    # 0.93 of the reference: quiet at tolerance 0.10, disturbed at 0.05.
    for tol, quiet in ((0.10, True), (0.05, False)):
        guard = fake_guard([4.0e12, 3.72e12] + [3.72e12] * 4,
                           QuietCheck(tolerance=tol, max_retries=1, wait_s=0.0))
        _, outcome = measure_quietly(counting([1.0, 1.0])[0], guard, lambda s: None)
        assert outcome.quiet is quiet


@pytest.mark.parametrize("field,value", [("tolerance", 0.0), ("tolerance", 0.9),
                                         ("max_retries", -1), ("max_retries", 1.5),
                                         ("wait_s", -1.0), ("wait_s", float("nan")),
                                         ("give_up_after", -1), ("give_up_after", 2.5)])
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        QuietCheck(**{field: value})


def test_timing_result_carries_the_outcome_into_measurement_fields():
    r = TimingResult(median_us=1.0, p10_us=1.0, p90_us=1.0, mean_us=1.0, std_us=0.0, samples=10,
                     noise_met=True, rel_stderr=0.0, timer_used="events",
                     timer_requested="events", cold_l2=True, stop_reason="noise",
                     quiet_ratio=0.97, interference_retries=2)
    extra = r.measurement_fields()["extra"]
    assert extra["quiet_ratio"] == 0.97 and extra["interference_retries"] == 2
    assert QuietOutcome().to_dict()["interference_retries"] == 0


def test_the_latency_probe_kernel_follows_the_chain():
    # Under the interpreter: every chain ends where a numpy walk of next[] ends.
    import numpy as np
    import torch

    from kvtune.harness.latency_probe import chase_permutation, follow_chain

    gen = torch.Generator().manual_seed(3)
    nxt, order = chase_permutation(257, gen)
    # one cycle through every slot
    seen, i = set(), 0
    for _ in range(257):
        seen.add(i)
        i = int(nxt[i])
    assert len(seen) == 257 and i == 0
    starts = order[torch.tensor([0, 64, 128, 192])].contiguous()
    ends = follow_chain(nxt, starts, 37)
    walk = nxt.numpy()
    for s, e in zip(starts.tolist(), ends.tolist()):
        for _ in range(37):
            s = int(walk[s])
        assert s == e
    with pytest.raises(ValueError, match="steps"):
        follow_chain(nxt, starts, 0)
    with pytest.raises(ValueError, match="num_slots"):
        chase_permutation(1)
    assert np.all(np.sort(order.numpy()) == np.arange(257))


def test_the_latency_probe_queues_its_chain_behind_a_gpu_sleep(monkeypatch):
    """The chain is enqueued while the GPU sleeps, so the event pair cannot time the host's
    launch: the sleep comes before each start event, and is longer than the launch may take."""
    import contextlib

    import torch

    from kvtune.harness import latency_probe, timers_cuda

    calls = []

    class Event:
        def __init__(self, **kw):
            pass

        def record(self):
            calls.append("record")

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 0.25

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "_sleep", lambda c: calls.append(("sleep", c)),
                        raising=False)
    monkeypatch.setattr(latency_probe, "follow_chain", lambda *a: calls.append("chain"))
    probe = object.__new__(latency_probe.LatencyProbe)
    probe.device, probe.next, probe.starts, probe.steps, probe.runs = "cuda", None, None, 256, 2
    assert probe.hops_per_s() == pytest.approx(256 / 0.25e-3)
    assert calls[0] == "chain"  # compiled and resident, untimed
    timed = calls[1:]
    assert [c if isinstance(c, str) else c[0] for c in timed] == \
        ["sleep", "record", "chain", "record"] * 2
    cycles = timed[0][1]
    assert cycles / timers_cuda.SLEEP_CYCLES_PER_US >= latency_probe.PROBE_HOST_US


def test_wait_until_quiet_needs_a_streak_and_gives_up_at_the_timeout():
    from kvtune.harness.interference import wait_until_quiet

    now = [0.0]

    def sleep(s):
        now[0] += s

    # two quiet readings set the bar; then slow, quiet, slow, then three quiet in a row
    guard = fake_guard([4.0, 4.0, 2.0, 4.0, 2.0, 3.9, 4.0, 3.8, 9.9])
    guard.probe()
    guard.probe()
    quiet, waited = wait_until_quiet(guard, consecutive=3, period_s=0.5, timeout_s=60,
                                     sleep=sleep, clock=lambda: now[0])
    assert quiet and waited == 2.5  # 6 probes, 5 pauses of 0.5 s
    slow = fake_guard([4.0, 4.0] + [1.0] * 100)
    slow.probe()
    slow.probe()
    now[0] = 0.0
    quiet, waited = wait_until_quiet(slow, consecutive=3, period_s=1.0, timeout_s=5,
                                     sleep=sleep, clock=lambda: now[0])
    assert not quiet and waited == 5.0
    with pytest.raises(ValueError, match="consecutive"):
        wait_until_quiet(slow, consecutive=0)


def test_the_stopping_rule_sets_the_default_guards_retries():
    """`--stopping quiet_retries=N` reaches the guard measure_callable runs; a caller's own
    QuietCheck or None (no guard) is kept as given."""
    from kvtune.harness.backends.select import parse_stopping
    from kvtune.harness.stopping import StoppingRule
    from kvtune.harness.timing import DEFAULT_QUIET, guard_settings

    rule = parse_stopping("quiet_retries=1")
    assert rule.quiet_retries == 1
    assert guard_settings(DEFAULT_QUIET, rule).max_retries == 1
    assert guard_settings(DEFAULT_QUIET, StoppingRule()).max_retries == 5
    own = QuietCheck(max_retries=7)
    assert guard_settings(own, rule) is own and guard_settings(None, rule) is None
    with pytest.raises(ValueError, match="quiet_retries"):
        StoppingRule(quiet_retries=21)
    with pytest.raises(ValueError, match="quiet_retries"):
        parse_stopping("quiet_retries=-1")


def test_a_machine_disturbed_for_long_stops_the_retries_until_a_quiet_bracket():
    # give_up_after=2: two measurements in a row that used their retries without a quiet
    # bracket, then single attempts with no wait (still bracketed); one quiet bracket brings the
    # retries back.
    check = QuietCheck(max_retries=1, give_up_after=2)
    quiet, slow = 100.0, 70.0
    # 5 calibration readings, then brackets: m1 (2 attempts slow), m2 (2 slow), m3 (1 slow,
    # gave up), m4 (1 quiet), m5 (slow, then quiet on its retry).
    speeds = [quiet] * 5 + [slow] * 4 + [slow] * 4 + [slow] * 2 + [quiet] * 2 \
        + [slow] * 2 + [quiet] * 2
    guard = fake_guard(speeds, check)
    for _ in range(5):
        guard.probe()
    sleeps = []
    measure, seen = counting(range(100))
    outcomes = [measure_quietly(measure, guard, sleeps.append)[1] for _ in range(5)]
    assert [o.retries for o in outcomes] == [1, 1, 0, 0, 1]
    assert [o.quiet for o in outcomes] == [False, False, False, True, True]
    assert len(seen) == 2 + 2 + 1 + 1 + 2
    assert sleeps == [1.0, 1.0, 1.0]  # m1, m2 and m5's retries; none while it had given up
    assert guard.disturbed_streak == 0 and not guard.gave_up


def test_give_up_after_zero_always_retries():
    check = QuietCheck(max_retries=1, give_up_after=0)
    guard = fake_guard([100.0] * 5 + [70.0] * 40, check)
    for _ in range(5):
        guard.probe()
    measure, _ = counting(range(100))
    outcomes = [measure_quietly(measure, guard, lambda s: None)[1] for _ in range(10)]
    assert all(o.retries == 1 for o in outcomes) and not guard.gave_up

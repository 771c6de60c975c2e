"""The correctness gate: wrong output is never timed, exceptions become one-line failures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvtune.harness.backends import Measurement, Verification
from kvtune.harness.gate import gate_and_measure, one_line, verification_failure
from kvtune.kernels.plan import DeviceSpec
from kvtune.workloads.batch import DecodeBatch

BATCH = DecodeBatch(np.array([100, 2000]))
PLAN = object()  # the gate passes the plan through untouched


class FakeBackend:
    """Records every call; verify/measure behaviour is scripted."""

    name = "fake"
    device = DeviceSpec("fake", sm_count=132, l2_bytes=50 << 20, hbm_bytes_per_s=3e12)

    def __init__(self, verification=None, measurements=None, unsupported=None,
                 verify_error=None, measure_error=None, unsupported_error=None):
        self.verification = verification or Verification(ok=True, checked=True, rel_error=1e-3, bound=1e-2)
        self.measurements = list(measurements or [Measurement(status="ok", latency_us=12.0, timer="cupti")])
        self.unsupported = unsupported
        self.verify_error = verify_error
        self.measure_error = measure_error
        self.unsupported_error = unsupported_error
        self.calls: list[str] = []

    def unsupported_reason(self, plan):
        self.calls.append("unsupported_reason")
        if self.unsupported_error:
            raise self.unsupported_error
        return self.unsupported

    def verify(self, batch, plan):
        self.calls.append("verify")
        if self.verify_error:
            raise self.verify_error
        return self.verification

    def measure(self, batch, plan):
        self.calls.append("measure")
        if self.measure_error:
            raise self.measure_error
        return self.measurements.pop(0)

    def close(self):
        pass


def test_correct_output_is_measured_and_marked_checked():
    backend = FakeBackend()
    m = gate_and_measure(backend, BATCH, PLAN)
    assert backend.calls == ["unsupported_reason", "verify", "measure"]
    assert m.status == "ok" and m.latency_us == 12.0 and m.checked and m.rel_error == 1e-3


def test_wrong_output_fails_and_is_never_timed():
    backend = FakeBackend(verification=Verification(ok=False, checked=True, rel_error=0.4, bound=1e-2))
    m = gate_and_measure(backend, BATCH, PLAN)
    assert "measure" not in backend.calls
    assert m.status == "failed" and m.rel_error == 0.4 and m.checked
    assert math.isnan(m.latency_us) and m.samples == 0
    assert m.message == "output wrong: rel_error 0.4 above bound 0.01"


def test_backend_message_is_kept_for_unwritten_output():
    v = Verification(ok=False, checked=True, rel_error=float("nan"), bound=1e-2,
                     message="output wrong: 512 elements unwritten")
    backend = FakeBackend(verification=v)
    m = gate_and_measure(backend, BATCH, PLAN)
    assert m.status == "failed" and m.message == "output wrong: 512 elements unwritten"
    assert "measure" not in backend.calls


@pytest.mark.parametrize("rel_error, expected", [(float("nan"), "NaN"), (0.5, "above bound")])
def test_gate_does_not_trust_ok_over_the_numbers(rel_error, expected):
    v = Verification(ok=True, checked=True, rel_error=rel_error, bound=1e-2)
    backend = FakeBackend(verification=v)
    m = gate_and_measure(backend, BATCH, PLAN)
    assert m.status == "failed" and expected in m.message and "measure" not in backend.calls


def test_unchecked_backend_is_measured_but_not_marked_checked():
    backend = FakeBackend(verification=Verification(ok=True, checked=False))
    m = gate_and_measure(backend, BATCH, PLAN)
    assert m.status == "ok" and not m.checked and "measure" in backend.calls


def test_verify_exception_is_a_one_line_failure():
    backend = FakeBackend(verify_error=RuntimeError("CUDA error: an illegal memory access\nsecond line\nthird"))
    m = gate_and_measure(backend, BATCH, PLAN)
    assert m.status == "failed" and "measure" not in backend.calls
    assert m.message == "verify raised RuntimeError: CUDA error: an illegal memory access"
    assert "\n" not in m.message


def test_measure_exception_is_a_failure_with_the_verified_error():
    backend = FakeBackend(measure_error=MemoryError())
    m = gate_and_measure(backend, BATCH, PLAN)
    assert m.status == "failed" and m.message == "measure raised MemoryError"
    assert m.rel_error == 1e-3 and m.checked


def test_unsupported_plan_is_neither_verified_nor_timed():
    backend = FakeBackend(unsupported="persistent schedules need the persistent kernel")
    m = gate_and_measure(backend, BATCH, PLAN)
    assert m.status == "unsupported" and backend.calls == ["unsupported_reason"]
    assert m.message == "persistent schedules need the persistent kernel"


def test_unsupported_reason_exception_is_a_failure():
    backend = FakeBackend(unsupported_error=KeyError("schedule"))
    m = gate_and_measure(backend, BATCH, PLAN)
    assert m.status == "failed" and m.message.startswith("unsupported_reason raised KeyError")


def test_throttled_measurement_is_repeated_once_after_a_pause():
    flagged = Measurement(status="ok", latency_us=20.0, telemetry={"flagged": True})
    clean = Measurement(status="ok", latency_us=12.0, telemetry={"flagged": False})
    backend = FakeBackend(measurements=[flagged, clean])
    sleeps = []
    m = gate_and_measure(backend, BATCH, PLAN, throttle_pause_s=1.5, sleep=sleeps.append)
    assert backend.calls.count("measure") == 2 and sleeps == [1.5]
    assert m.latency_us == 12.0 and m.telemetry == {"flagged": False, "remeasured": True}


def test_unflagged_measurement_is_not_repeated():
    backend = FakeBackend(measurements=[Measurement(status="ok", telemetry={"flagged": False})])
    m = gate_and_measure(backend, BATCH, PLAN, sleep=lambda s: pytest.fail("slept"))
    assert backend.calls.count("measure") == 1 and m.telemetry["remeasured"] is False


def test_one_line_truncates_long_messages():
    line = one_line("measure", ValueError("x" * 1000))
    assert len(line) == 300 and line.endswith("...")


def test_verification_failure_accepts_good_output():
    assert verification_failure(Verification(ok=True, checked=True, rel_error=1e-3, bound=1e-2)) is None
    assert verification_failure(Verification(ok=True, checked=True, rel_error=1e-3)) is None

"""The correctness gate: no configuration is timed before its output is checked.

`gate_and_measure` asks the backend whether it can run the plan, verifies the plan's output
against the float64 reference, and only then times it. A wrong output (error above the dtype's
bound, NaN, unwritten elements: whatever the backend's verify reports as not ok) becomes a failed
measurement carrying its error and is never timed, so in a study it is a failed trial and no
wrong configuration can win. An exception from the backend becomes a failed measurement with a
one-line message; the run goes on with the next configuration. A measurement flagged as throttled
by its telemetry is repeated once after a pause (harness.telemetry.remeasure_if_flagged).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from kvtune.harness.backends import Measurement, Verification
from kvtune.harness.telemetry import remeasure_if_flagged

MAX_MESSAGE_CHARS = 300
THROTTLE_PAUSE_S = 2.0


def one_line(stage: str, exc: BaseException) -> str:
    """'<stage> raised <Type>: <first line of the message>', at most MAX_MESSAGE_CHARS long."""
    text = str(exc).strip().splitlines()
    first = text[0].strip() if text else ""
    line = f"{stage} raised {type(exc).__name__}" + (f": {first}" if first else "")
    return line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 3] + "..."


def verification_failure(v: Verification) -> str | None:
    """Why a verification result must stop timing, or None when the output may be timed.

    Fails on `ok` False, and independently of `ok` on a checked error that is NaN or above a
    known bound (a backend that forgot to compare must not let a wrong output through).
    """
    err, bound = v.rel_error, v.bound
    if not v.ok:
        if v.message:
            return v.message
        if v.checked and not math.isnan(err) and not math.isnan(bound):
            return f"output wrong: rel_error {err:.3g} above bound {bound:.3g}"
        return "output wrong" + (f": rel_error {err:.3g}" if v.checked and not math.isnan(err) else "")
    if v.checked and math.isnan(err):
        return "output wrong: rel_error is NaN"
    if v.checked and not math.isnan(bound) and err > bound:
        return f"output wrong: rel_error {err:.3g} above bound {bound:.3g}"
    return None


def gate_and_measure(
    backend,
    batch,
    plan,
    *,
    throttle_pause_s: float = THROTTLE_PAUSE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Measurement:
    """Verify, then time, one (batch, plan) on `backend`; never raises for a backend failure.

    Returns Measurement(status="unsupported") when backend.unsupported_reason(plan) gives a
    reason; status="failed" (untimed, with rel_error and a one-line message) for a wrong output
    or an exception in any backend call; else the backend's measurement, with `checked` and
    `rel_error` from the verification. A measurement whose telemetry is flagged is taken again
    once after `throttle_pause_s` seconds; the second one stands, with telemetry["remeasured"]
    True and its own flag.
    """
    try:
        reason = backend.unsupported_reason(plan)
    except Exception as exc:  # noqa: BLE001 - a backend bug fails this row, not the run
        return Measurement(status="failed", message=one_line("unsupported_reason", exc))
    if reason:
        return Measurement(status="unsupported", message=str(reason).strip().splitlines()[0])

    try:
        verification = backend.verify(batch, plan)
    except Exception as exc:  # noqa: BLE001
        return Measurement(status="failed", message=one_line("verify", exc))
    failure = verification_failure(verification)
    if failure is not None:
        return Measurement(
            status="failed",
            checked=verification.checked,
            rel_error=verification.rel_error,
            message=failure.strip().splitlines()[0] if failure.strip() else "output wrong",
            extra={"error_bound": verification.bound},
        )

    def measure_once() -> Measurement:
        return backend.measure(batch, plan)

    def flagged(m: Measurement) -> bool:
        return bool((m.telemetry or {}).get("flagged"))

    try:
        measurement, attempts = remeasure_if_flagged(
            measure_once, flagged, pause_s=throttle_pause_s, sleep=sleep
        )
    except Exception as exc:  # noqa: BLE001
        return Measurement(
            status="failed",
            checked=verification.checked,
            rel_error=verification.rel_error,
            message=one_line("measure", exc),
        )
    measurement.checked = verification.checked
    measurement.rel_error = verification.rel_error
    if measurement.telemetry or attempts > 1:
        measurement.telemetry = {**(measurement.telemetry or {}), "remeasured": attempts > 1}
    return measurement

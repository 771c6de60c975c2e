"""GPU telemetry around a measurement through NVML (package nvidia-ml-py, module `pynvml`).

Before, during (once per batch of timed iterations, while the GPU is busy) and after each
measurement: SM and memory clocks, the maximum SM clock, power, temperature and the clock-event
(throttle) reasons. A measurement is flagged when, in any reading, the SM clock was under 75% of
its maximum (except while the GPU reports itself idle, when a low clock is not a throttle) or a
thermal or power-cap reason was active. `remeasure_if_flagged` repeats a flagged measurement once
after a pause; the second result stands and carries its own flag.

Without NVML (no library, no GPU, a driver that refuses a query) every field is None and nothing
fails: telemetry describes a measurement, it never stops one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

SM_CLOCK_FLOOR = 0.75  # a reading under this fraction of the max SM clock is throttled

# NVML's clock-event reason bits (nvmlClocksEventReason*; older name: ClocksThrottleReason*)
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
# reasons that mean the clock was held down by power or heat, so the timing is not the chip's
THROTTLE_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
     "hw_power_brake_slowdown"}
)


def decode_clock_event_reasons(mask: int | None) -> tuple[str, ...]:
    """Names of the bits set in an NVML clock-event reason mask, lowest bit first.

    Unknown bits come out as "unknown_0x...". None (not read) gives ().
    """
    if mask is None:
        return ()
    mask = int(mask)
    if mask < 0:
        raise ValueError(f"mask: {mask} must be >= 0")
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(CLOCK_EVENT_REASONS.get(bit, f"unknown_{bit:#x}"))
        bit <<= 1
    return tuple(names)


@dataclass(frozen=True)
class TelemetrySample:
    """One NVML reading; a field is None when NVML could not give it.

    Clocks in MHz, power in watts, temperature in degrees Celsius.
    """

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    clock_event_mask: int | None = None

    @property
    def clock_event_reasons(self) -> tuple[str, ...]:
        return decode_clock_event_reasons(self.clock_event_mask)


def throttle_flags(samples: list[TelemetrySample], floor: float = SM_CLOCK_FLOOR) -> tuple[str, ...]:
    """Why the readings say a measurement was throttled; () when they do not (or say nothing)."""
    flags: list[str] = []
    for s in samples:
        reasons = s.clock_event_reasons
        if (
            s.sm_clock_mhz is not None
            and s.max_sm_clock_mhz
            and s.sm_clock_mhz < floor * s.max_sm_clock_mhz
            and "gpu_idle" not in reasons
        ):
            flags.append(
                f"sm_clock {s.sm_clock_mhz:.0f} MHz under {floor:.0%} of max {s.max_sm_clock_mhz:.0f} MHz"
            )
        flags.extend(f"clock event {name}" for name in reasons if name in THROTTLE_REASONS)
    return tuple(dict.fromkeys(flags))


class NvmlReader:
    """Reads one GPU through NVML. `read()` returns None when NVML is unavailable.

    device_index: the CUDA device index (torch's). NVML numbers devices by PCI order, which can
    differ from CUDA's; `pci_bus_id` (as torch reports it) picks the right one when given.
    """

    _nvml = None  # the pynvml module once nvmlInit succeeded, shared by every reader
    _init_error: str | None = None

    def __init__(self, device_index: int = 0, pci_bus_id: str | None = None) -> None:
        self.device_index = int(device_index)
        self.pci_bus_id = pci_bus_id
        self._handle = None
        self.unavailable_reason: str | None = None

    @classmethod
    def _module(cls):
        if cls._nvml is None and cls._init_error is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                cls._nvml = pynvml
            except Exception as exc:  # noqa: BLE001 - any failure means "no telemetry"
                cls._init_error = f"NVML unavailable ({type(exc).__name__}: {exc})"
        return cls._nvml

    def _device(self):
        if self._handle is not None:
            return self._handle
        nvml = self._module()
        if nvml is None:
            self.unavailable_reason = self._init_error
            return None
        if self.pci_bus_id:
            try:
                self._handle = nvml.nvmlDeviceGetHandleByPciBusId(self.pci_bus_id)
                return self._handle
            except Exception:  # noqa: BLE001 - a bus id NVML does not know: fall back to the index
                pass
        try:
            self._handle = nvml.nvmlDeviceGetHandleByIndex(self.device_index)
        except Exception as exc:  # noqa: BLE001
            self.unavailable_reason = f"NVML has no device {self.pci_bus_id or self.device_index} ({exc})"
            return None
        return self._handle

    def read(self) -> TelemetrySample | None:
        handle = self._device()
        if handle is None:
            return None
        nvml = self._nvml

        def query(fn: Callable, *args, scale: float = 1.0):
            try:
                return float(fn(handle, *args)) * scale
            except Exception:  # noqa: BLE001 - a field the driver does not report stays None
                return None

        mask_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        mask = query(mask_fn) if mask_fn else None
        return TelemetrySample(
            sm_clock_mhz=query(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM),
            mem_clock_mhz=query(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM),
            max_sm_clock_mhz=query(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM),
            power_w=query(nvml.nvmlDeviceGetPowerUsage, scale=1e-3),
            temperature_c=query(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
            clock_event_mask=int(mask) if mask is not None else None,
        )


@dataclass(frozen=True)
class TelemetryRecord:
    """Telemetry of one measurement: the first and last reading, extremes of all, the flag."""

    available: bool
    readings: int = 0
    before: TelemetrySample = field(default_factory=TelemetrySample)
    after: TelemetrySample = field(default_factory=TelemetrySample)
    sm_clock_mhz_min: float | None = None
    power_w_max: float | None = None
    temperature_c_max: float | None = None
    clock_event_reasons: tuple[str, ...] = ()
    flagged: bool = False
    flag_reasons: tuple[str, ...] = ()
    unavailable_reason: str = ""

    def to_dict(self) -> dict:
        """Flat scalars (for a Measurement's telemetry dict and a Parquet row)."""
        return {
            "available": self.available,
            "readings": self.readings,
            "sm_clock_mhz_before": self.before.sm_clock_mhz,
            "sm_clock_mhz_after": self.after.sm_clock_mhz,
            "sm_clock_mhz_min": self.sm_clock_mhz_min,
            "max_sm_clock_mhz": self.before.max_sm_clock_mhz or self.after.max_sm_clock_mhz,
            "mem_clock_mhz_before": self.before.mem_clock_mhz,
            "mem_clock_mhz_after": self.after.mem_clock_mhz,
            "power_w_before": self.before.power_w,
            "power_w_after": self.after.power_w,
            "power_w_max": self.power_w_max,
            "temperature_c_before": self.before.temperature_c,
            "temperature_c_after": self.after.temperature_c,
            "temperature_c_max": self.temperature_c_max,
            "clock_event_reasons": ",".join(self.clock_event_reasons),
            "flagged": self.flagged,
            "flag_reasons": "; ".join(self.flag_reasons),
        }


class TelemetryMonitor:
    """Collects readings around one measurement: start(), sample() per batch, stop(), record().

    reader: anything with `read() -> TelemetrySample | None` (an NvmlReader by default).
    """

    def __init__(self, device_index: int = 0, reader=None, pci_bus_id: str | None = None) -> None:
        self.reader = reader if reader is not None else NvmlReader(device_index, pci_bus_id)
        self._samples: list[TelemetrySample] = []

    def _read(self) -> None:
        try:
            sample = self.reader.read()
        except Exception:  # noqa: BLE001 - telemetry never breaks a measurement
            sample = None
        if sample is not None:
            self._samples.append(sample)

    def start(self) -> None:
        self._samples = []
        self._read()

    def sample(self) -> None:
        self._read()

    def stop(self) -> None:
        self._read()

    def record(self) -> TelemetryRecord:
        samples = self._samples
        if not samples:
            reason = getattr(self.reader, "unavailable_reason", None) or "no NVML reading"
            return TelemetryRecord(available=False, unavailable_reason=str(reason))
        flags = throttle_flags(samples)
        reasons = tuple(dict.fromkeys(r for s in samples for r in s.clock_event_reasons))
        return TelemetryRecord(
            available=True,
            readings=len(samples),
            before=samples[0],
            after=samples[-1],
            sm_clock_mhz_min=_min(s.sm_clock_mhz for s in samples),
            power_w_max=_max(s.power_w for s in samples),
            temperature_c_max=_max(s.temperature_c for s in samples),
            clock_event_reasons=reasons,
            flagged=bool(flags),
            flag_reasons=flags,
        )


def empty_telemetry() -> dict:
    """The telemetry dict of a measurement taken without NVML: every field None or empty."""
    return TelemetryRecord(available=False).to_dict()


T = TypeVar("T")


def remeasure_if_flagged(
    measure: Callable[[], T],
    is_flagged: Callable[[T], bool],
    *,
    pause_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """Run `measure`; if its result is flagged as throttled, pause and run it once more.

    Returns (the result that stands, attempts made: 1 or 2). The second result stands whether or
    not it is flagged again, so a still-throttled GPU shows up as a flagged row rather than an
    endless loop. pause_s: seconds to let clocks and temperature recover, >= 0.
    """
    if pause_s < 0:
        raise ValueError(f"pause_s: {pause_s} must be >= 0")
    first = measure()
    if not is_flagged(first):
        return first, 1
    sleep(pause_s)
    return measure(), 2


def _min(values):
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def _max(values):
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None

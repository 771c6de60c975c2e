"""Telemetry: decoding NVML clock-event reasons, the throttle flag, NVML absent, re-measuring."""

from __future__ import annotations

import sys
import types

import pytest

from kvtune.harness import telemetry
from kvtune.harness.telemetry import (
    NvmlReader,
    TelemetryMonitor,
    TelemetrySample,
    decode_clock_event_reasons,
    empty_telemetry,
    remeasure_if_flagged,
    throttle_flags,
)

BUSY = TelemetrySample(sm_clock_mhz=1980, mem_clock_mhz=2619, max_sm_clock_mhz=1980,
                       power_w=420.0, temperature_c=55.0, clock_event_mask=0)


@pytest.fixture
def fresh_nvml(monkeypatch):
    monkeypatch.setattr(NvmlReader, "_nvml", None)
    monkeypatch.setattr(NvmlReader, "_init_error", None)


def test_decode_reasons():
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(None) == ()
    assert decode_clock_event_reasons(0x44) == ("sw_power_cap", "hw_thermal_slowdown")
    assert decode_clock_event_reasons(0x1 | 0x1000) == ("gpu_idle", "unknown_0x1000")
    with pytest.raises(ValueError, match="mask"):
        decode_clock_event_reasons(-1)


def test_busy_full_clock_is_not_flagged():
    assert throttle_flags([BUSY, BUSY]) == ()


def test_low_sm_clock_is_flagged_unless_idle():
    low = TelemetrySample(sm_clock_mhz=1200, max_sm_clock_mhz=1980, clock_event_mask=0)
    (flag,) = throttle_flags([BUSY, low])
    assert "1200 MHz under 75% of max 1980 MHz" in flag
    idle = TelemetrySample(sm_clock_mhz=345, max_sm_clock_mhz=1980, clock_event_mask=0x1)
    assert throttle_flags([idle, BUSY]) == ()
    at_floor = TelemetrySample(sm_clock_mhz=1485, max_sm_clock_mhz=1980, clock_event_mask=0)
    assert throttle_flags([at_floor]) == ()  # exactly 75% is not under it


@pytest.mark.parametrize("mask, name", [(0x4, "sw_power_cap"), (0x20, "sw_thermal_slowdown"),
                                        (0x40, "hw_thermal_slowdown"), (0x8, "hw_slowdown"),
                                        (0x80, "hw_power_brake_slowdown")])
def test_thermal_and_power_reasons_flag(mask, name):
    hot = TelemetrySample(sm_clock_mhz=1900, max_sm_clock_mhz=1980, clock_event_mask=mask)
    assert throttle_flags([BUSY, hot]) == (f"clock event {name}",)


def test_benign_reasons_do_not_flag():
    sample = TelemetrySample(sm_clock_mhz=1900, max_sm_clock_mhz=1980, clock_event_mask=0x1 | 0x10 | 0x100)
    assert throttle_flags([sample]) == ()


class ScriptedReader:
    def __init__(self, samples):
        self.samples = list(samples)

    def read(self):
        return self.samples.pop(0) if self.samples else None


def test_monitor_records_before_after_extremes_and_flag():
    during = TelemetrySample(sm_clock_mhz=1000, max_sm_clock_mhz=1980, power_w=700.0,
                             temperature_c=83.0, clock_event_mask=0x20)
    after = TelemetrySample(sm_clock_mhz=1700, max_sm_clock_mhz=1980, power_w=300.0,
                            temperature_c=80.0, clock_event_mask=0x0)
    monitor = TelemetryMonitor(reader=ScriptedReader([BUSY, during, after]))
    monitor.start()
    monitor.sample()
    monitor.stop()
    record = monitor.record()
    assert record.available and record.readings == 3 and record.flagged
    assert record.sm_clock_mhz_min == 1000 and record.power_w_max == 700.0
    assert record.temperature_c_max == 83.0
    assert "sw_thermal_slowdown" in record.clock_event_reasons
    row = record.to_dict()
    assert row["sm_clock_mhz_before"] == 1980 and row["sm_clock_mhz_after"] == 1700
    assert row["max_sm_clock_mhz"] == 1980 and row["flagged"] is True
    assert "clock event sw_thermal_slowdown" in row["flag_reasons"]
    assert all(not isinstance(v, (list, tuple, dict)) for v in row.values())  # flat for Parquet


def test_monitor_without_nvml_is_empty_and_silent(monkeypatch, fresh_nvml):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    monitor = TelemetryMonitor(device_index=0)
    monitor.start()
    monitor.sample()
    monitor.stop()
    record = monitor.record()
    assert not record.available and not record.flagged
    assert "NVML unavailable" in record.unavailable_reason
    row = record.to_dict()
    assert row.keys() == empty_telemetry().keys()
    assert {k: v for k, v in row.items() if k not in ("available", "readings", "flagged",
                                                      "clock_event_reasons", "flag_reasons")} == {
        k: None for k in row if k not in ("available", "readings", "flagged",
                                          "clock_event_reasons", "flag_reasons")
    }


def test_reader_that_raises_never_breaks_a_measurement():
    class Broken:
        def read(self):
            raise RuntimeError("driver went away")

    monitor = TelemetryMonitor(reader=Broken())
    monitor.start()
    monitor.stop()
    assert not monitor.record().available


def fake_pynvml(fail_power=False, init_error=None):
    mod = types.ModuleType("pynvml")
    mod.NVML_CLOCK_SM, mod.NVML_CLOCK_MEM, mod.NVML_TEMPERATURE_GPU = 1, 2, 0
    mod.opened = []

    def init():
        if init_error:
            raise init_error

    mod.nvmlInit = init
    mod.nvmlDeviceGetHandleByIndex = lambda i: mod.opened.append(("index", i)) or f"h{i}"
    mod.nvmlDeviceGetHandleByPciBusId = lambda bus: mod.opened.append(("bus", bus)) or "hbus"
    mod.nvmlDeviceGetClockInfo = lambda h, kind: {1: 1755, 2: 2619}[kind]
    mod.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    mod.nvmlDeviceGetTemperature = lambda h, kind: 61

    def power(h):
        if fail_power:
            raise RuntimeError("not supported")
        return 512_000  # milliwatts

    mod.nvmlDeviceGetPowerUsage = power
    mod.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    return mod


def test_nvml_reader_maps_units_and_reasons(monkeypatch, fresh_nvml):
    mod = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    sample = NvmlReader(device_index=3).read()
    assert sample == TelemetrySample(sm_clock_mhz=1755, mem_clock_mhz=2619, max_sm_clock_mhz=1980,
                                     power_w=512.0, temperature_c=61, clock_event_mask=0x4)
    assert sample.clock_event_reasons == ("sw_power_cap",)
    assert mod.opened == [("index", 3)]
    NvmlReader(pci_bus_id="00000000:19:00.0").read()
    assert mod.opened[-1] == ("bus", "00000000:19:00.0")


def test_nvml_field_that_fails_is_none(monkeypatch, fresh_nvml):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_power=True))
    sample = NvmlReader().read()
    assert sample.power_w is None and sample.sm_clock_mhz == 1755


def test_nvml_init_failure_means_no_readings(monkeypatch, fresh_nvml):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=RuntimeError("no driver")))
    reader = NvmlReader()
    assert reader.read() is None
    assert "no driver" in reader.unavailable_reason


def test_real_nvml_without_gpu_reads_nothing(fresh_nvml):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    # nvidia-ml-py may be installed without a driver: no reading, no exception
    reader = NvmlReader()
    assert reader.read() is None and reader.unavailable_reason
    assert telemetry.NvmlReader._nvml is None


def test_remeasure_only_when_flagged():
    results = iter([{"flagged": False}])
    sleeps = []
    out, attempts = remeasure_if_flagged(lambda: next(results), lambda r: r["flagged"],
                                         pause_s=3.0, sleep=sleeps.append)
    assert attempts == 1 and sleeps == [] and out == {"flagged": False}


def test_flagged_measurement_is_taken_again_after_a_pause():
    results = iter([{"id": 1, "flagged": True}, {"id": 2, "flagged": False}])
    sleeps = []
    out, attempts = remeasure_if_flagged(lambda: next(results), lambda r: r["flagged"],
                                         pause_s=3.0, sleep=sleeps.append)
    assert attempts == 2 and sleeps == [3.0] and out["id"] == 2


def test_still_throttled_is_flagged_again_and_not_retried_forever():
    calls = []

    def measure():
        calls.append(1)
        return {"flagged": True}

    out, attempts = remeasure_if_flagged(measure, lambda r: r["flagged"], pause_s=0.0, sleep=lambda s: None)
    assert attempts == 2 and len(calls) == 2 and out["flagged"]
    with pytest.raises(ValueError, match="pause_s"):
        remeasure_if_flagged(measure, lambda r: True, pause_s=-1)

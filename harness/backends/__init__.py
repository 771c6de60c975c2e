"""Backends run (or model) a Plan on a DecodeBatch. One protocol, chosen by name.

`simulator` models SM scheduling on the CPU; `triton` and `flashinfer` run on a CUDA GPU.
A backend never knows whether it is inside a study: it gets a batch and a plan, returns plain data.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from typing import Protocol

from kvtune.kernels.plan import DeviceSpec, Plan
from kvtune.workloads.batch import DecodeBatch


@dataclass(frozen=True)
class Verification:
    """Result of checking a plan's output against the float64 reference.

    checked: False where there is no output to check (the simulator). rel_error: ||out - ref|| /
    ||ref|| (NaN when not checked). bound: the dtype's allowed error.
    """

    ok: bool
    checked: bool
    rel_error: float = float("nan")
    bound: float = float("nan")
    message: str = ""


@dataclass
class Measurement:
    """One timed (or modelled) configuration. Times in microseconds.

    status: "ok", "failed" (verification or run error: never timed), or "unsupported" (the
    backend cannot express the plan). rel_spread: (p90 - p10) / median. noise_met: the stopping
    rule's noise target was reached. bytes_moved: the batch's minimal bytes (the efficiency
    numerator). timer: what timed it ("simulated" for the model).
    """

    status: str
    latency_us: float = float("nan")
    p10_us: float = float("nan")
    p90_us: float = float("nan")
    mean_us: float = float("nan")
    std_us: float = float("nan")
    samples: int = 0
    rel_spread: float = float("nan")
    noise_met: bool = False
    timer: str = ""
    cold_l2: bool = True
    bytes_moved: int = 0
    achieved_bytes_per_s: float = float("nan")
    checked: bool = False
    rel_error: float = float("nan")
    message: str = ""
    telemetry: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def to_row(self) -> dict:
        row = asdict(self)
        tel = row.pop("telemetry")
        extra = row.pop("extra")
        row.update({f"telemetry_{k}": v for k, v in tel.items()})
        row.update(extra)
        return row


class Backend(Protocol):
    """What the runner needs of a backend."""

    name: str
    device: DeviceSpec

    def unsupported_reason(self, plan: Plan) -> str | None:
        """Why this backend cannot run `plan` as planned, or None when it can."""

    def verify(self, batch: DecodeBatch, plan: Plan) -> Verification: ...

    def measure(self, batch: DecodeBatch, plan: Plan) -> Measurement: ...

    def close(self) -> None: ...


BACKEND_MODULES = {
    "simulator": "kvtune.harness.backends.simulator",
    "triton": "kvtune.harness.backends.triton",
    "flashinfer": "kvtune.harness.backends.flashinfer",
}
GPU_BACKENDS = ("triton", "flashinfer")


class BackendUnavailable(RuntimeError):
    """The backend exists but cannot run here (no GPU, package missing); message is one line."""


def backend_class(name: str):
    """The Backend class registered as `name`; ValueError names the allowed backends."""
    if name not in BACKEND_MODULES:
        raise ValueError(f"backend: {name!r} unknown; allowed: auto, {', '.join(BACKEND_MODULES)}")
    try:
        module = importlib.import_module(BACKEND_MODULES[name])
    except ModuleNotFoundError as exc:
        raise BackendUnavailable(f"backend {name}: not available ({exc})") from exc
    return module.BACKEND

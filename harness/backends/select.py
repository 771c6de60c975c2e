"""Choosing and opening a backend from command-line settings (`--backend`, `--device-model`).

`auto` takes a GPU backend when a CUDA GPU and the backend are present, else the simulator, and
says which. A GPU backend plans for the live GPU with the copy bandwidth measured at the start as
its ceiling; the simulator plans for a datasheet model and divides by its datasheet bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtune.harness.backends import GPU_BACKENDS, Backend, BackendUnavailable, backend_class
from kvtune.harness.device import (
    check_sim_kernel,
    cuda_available,
    live_device,
    model_for_gpu_name,
    sim_model,
)
from kvtune.kernels.plan import DeviceSpec, check_launch_order

DEFAULT_DEVICE_MODEL = "h100"
TIMERS = ("auto", "cupti", "events", "graph")


@dataclass
class OpenedBackend:
    """A ready backend with the device its plans are made for.

    ceiling_bytes_per_s: what efficiency columns divide by. notice: one line for the user
    ("simulated (h200)" or "triton on NVIDIA H200, copy bandwidth 4.28 TB/s").
    """

    backend: Backend
    device: DeviceSpec
    ceiling_bytes_per_s: float
    ceiling_kind: str
    notice: str
    environment: dict


def check_choices(backend: str, device_model_name: str | None, timer: str,
                  stopping: str | None = None, sim_kernel: str | None = None) -> None:
    """Validate the settings before anything is opened or written."""
    if backend != "auto":
        backend_class_name_ok(backend)
    check_sim_kernel(sim_kernel)
    if device_model_name is not None:
        sim_model(device_model_name, sim_kernel)
    if timer not in TIMERS:
        raise ValueError(f"timer: {timer!r} unknown; allowed: {', '.join(TIMERS)}")
    parse_stopping(stopping)


def parse_stopping(text: str | None):
    """'min_time_ms=10,timeout_s=1' -> a StoppingRule with those fields (None for None)."""
    if text is None:
        return None
    from dataclasses import fields

    from kvtune.harness.stopping import StoppingRule
    from kvtune.kernels.specs import parse_assignments

    given = parse_assignments([t for t in str(text).split(",") if t.strip()], "stopping")
    allowed = [f.name for f in fields(StoppingRule)]
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(f"stopping: {unknown[0]!r} unknown; allowed: {', '.join(allowed)}")
    return StoppingRule(**given)


def backend_class_name_ok(name: str) -> None:
    from kvtune.harness.backends import BACKEND_MODULES

    if name not in BACKEND_MODULES:
        raise ValueError(f"backend: {name!r} unknown; allowed: auto, {', '.join(BACKEND_MODULES)}")


def resolve_backend_name(name: str) -> tuple[str, str]:
    """(backend name, why) for `auto`; the name itself otherwise."""
    if name != "auto":
        return name, "asked for"
    if not cuda_available():
        return "simulator", "no CUDA GPU found"
    try:
        backend_class("triton")
    except BackendUnavailable as exc:
        return "simulator", str(exc)
    return "triton", "CUDA GPU found"


def open_backend(
    name: str = "auto",
    *,
    device_model_name: str | None = None,
    timer: str = "auto",
    cold_l2: bool = True,
    stopping: str | None = None,
    kernel: str | None = None,
    cuda_graph: bool = False,
    launch_order: str | None = None,
) -> OpenedBackend:
    """Open the backend `name` (auto, simulator, triton, flashinfer).

    device_model_name: the simulator's model, a preset name or a calibration file (default: the
    preset matching the GPU present, else h100). kernel: the kernel the simulator stands in for
    (triton, flashinfer-tensor-core, flashinfer-cuda-core; default triton, or a calibration
    file's own). timer/cold_l2: for GPU backends. cuda_graph: the flashinfer backend makes its
    wrappers with use_cuda_graph=True (padded grid, split-KV always on; ValueError for another
    backend). launch_order: the triton backend's stage-1 launch order (kernels.plan.
    LAUNCH_ORDERS; None: the product's; ValueError for another backend, whose kernel hands out
    its work itself). Raises BackendUnavailable with one line when a GPU backend cannot run here.
    """
    from kvtune.harness.environment import environment_record, measure_copy_bandwidth

    check_choices(name, device_model_name, timer, stopping, kernel)
    if launch_order is not None:
        check_launch_order(launch_order)
    chosen, why = resolve_backend_name(name)
    if launch_order is not None and chosen != "triton":
        raise ValueError(f"launch-order: a setting of kvtune's Triton kernel; backend {chosen!r} "
                         "hands out its work in its own order (use --backend triton)")
    if cuda_graph and chosen != "flashinfer":
        raise ValueError(f"cuda-graph: a FlashInfer backend setting; backend {chosen!r} has no "
                         "CUDA-graph mode (use --backend flashinfer, or the policies' "
                         "enable_cuda_graph parameter to model it)")
    cls = backend_class(chosen)
    if chosen in GPU_BACKENDS:
        if not cuda_available():
            raise BackendUnavailable(
                f"backend {chosen}: no CUDA GPU (torch.cuda.is_available() is False); "
                "use --backend simulator"
            )
        bandwidth = measure_copy_bandwidth()
        device = live_device(hbm_bytes_per_s=bandwidth)
        rule = parse_stopping(stopping)
        extra = {} if rule is None else {"stopping": rule}
        if cuda_graph:
            extra["cuda_graph"] = True
        if launch_order is not None:
            extra["launch_order"] = launch_order
        backend = cls(device=device, timer=timer, cold_l2=cold_l2, **extra)
        from kvtune.harness.timing import resolve_timer

        choice = resolve_timer(timer)  # the manifest names the timer that runs, not "auto"
        env = environment_record(None, timer=choice.name, cold_l2=cold_l2,
                                 stopping=getattr(backend, "stopping", None),
                                 copy_bandwidth_bytes_per_s=bandwidth)
        env["timer_requested"] = timer
        env["timer_fallback_reason"] = choice.fallback_reason
        notice = (f"{chosen} on {device.name} ({why}); ceiling = measured copy bandwidth "
                  f"{bandwidth / 1e12:.2f} TB/s")
        env["device_spec"] = device.to_dict()  # what the policies planned for
        return OpenedBackend(backend, device, bandwidth, "measured copy bandwidth", notice, env)
    if device_model_name is None and cuda_available():
        import torch

        preset = model_for_gpu_name(torch.cuda.get_device_properties(0).name)
        device_model_name = preset.name if preset else DEFAULT_DEVICE_MODEL
    model = sim_model(device_model_name or DEFAULT_DEVICE_MODEL, kernel)
    device = model.device
    backend = cls(device, model.constants, kernel=model.kernel, calibrated=model.calibrated)
    env = environment_record(None, timer="simulated", cold_l2=None)
    env["sim_model"] = {"label": model.label, "kernel": model.kernel,
                        "calibrated": model.calibrated, "constants": model.constants.to_dict(),
                        "source": model.source}
    notice = (f"simulated ({device.name}): {model.label}; {why}; "
              "numbers are a model, not a measurement")
    ceiling_kind = "calibrated copy bandwidth" if model.calibrated else "datasheet bandwidth"
    return OpenedBackend(backend, device, device.hbm_bytes_per_s, ceiling_kind, notice, env)


def check_cases_fit(backend, cases) -> None:
    """Refuse, before anything is measured, a case whose batch cannot fit in the GPU memory the
    backend could use: ValueError, one line naming the case, the GB needed and the GB free
    (backends without a `check_fits`, such as the simulator, take any case)."""
    check = getattr(backend, "check_fits", None)
    if check is None:
        return
    for case in cases:
        check(case.batch, f"case {case.case_id}")

"""Device descriptions: datasheet presets and fitted calibrations for the simulator, and the live
GPU when there is one.

A simulator model is a (device, kernel) pair: the DeviceSpec the policies plan for and the
SimConstants the model predicts with. `--device-model` takes a preset name (h200) or the path of
a calibration file written by `kvtune calibrate`. A preset uses the calibration shipped for it
and the kernel asked for (harness/calibrations/<preset>-<kernel>.json) when there is one; else
its datasheet figures with the hand-set default constants, and says "uncalibrated".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from kvtune.harness.sim_model import DEFAULT_CONSTANTS, SimConstants
from kvtune.kernels.plan import DeviceSpec

# The kernels a simulator model stands in for (one set of constants each).
SIM_KERNELS = ("triton", "flashinfer-tensor-core", "flashinfer-cuda-core")
DEFAULT_SIM_KERNEL = "triton"
CALIBRATION_FORMAT = "kvtune-calibration/1"
CALIBRATIONS_DIR = Path(__file__).resolve().parent / "calibrations"

_MB = 1 << 20

# Vendor datasheet figures (SM count, L2, HBM bandwidth). The simulator uses them as its model;
# a live GPU replaces the bandwidth with the copy bandwidth measured at the start of a run.
DEVICE_MODELS: dict[str, DeviceSpec] = {
    "h100": DeviceSpec("h100", sm_count=132, l2_bytes=50 * _MB, hbm_bytes_per_s=3.35e12),
    "h200": DeviceSpec("h200", sm_count=132, l2_bytes=60 * _MB, hbm_bytes_per_s=4.8e12),
    "a100": DeviceSpec("a100", sm_count=108, l2_bytes=40 * _MB, hbm_bytes_per_s=2.0e12),
    "h20": DeviceSpec("h20", sm_count=78, l2_bytes=60 * _MB, hbm_bytes_per_s=4.0e12),
    "b200": DeviceSpec("b200", sm_count=148, l2_bytes=126 * _MB, hbm_bytes_per_s=8.0e12),
    "l40s": DeviceSpec("l40s", sm_count=142, l2_bytes=96 * _MB, hbm_bytes_per_s=0.864e12),
}


@dataclass(frozen=True)
class SimModel:
    """What the simulator needs to stand in for one kernel on one GPU.

    device: the DeviceSpec policies plan for (a calibration's holds the measured copy bandwidth
        and the kernel's occupancy as max_ctas_per_sm). constants: the model's constants.
    kernel: one of SIM_KERNELS. calibrated: True for constants fitted to GPU rows.
    label: one line for notices ("triton model, calibrated 2026-11-26 on NVIDIA H200 (f.json)").
    source: the calibration file's provenance (command, date, runs, fit), {} for a preset.
    """

    device: DeviceSpec
    constants: SimConstants
    kernel: str = DEFAULT_SIM_KERNEL
    calibrated: bool = False
    label: str = ""
    source: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The calibration file's content (format CALIBRATION_FORMAT)."""
        return {"format": CALIBRATION_FORMAT, "kernel": self.kernel, "calibrated": self.calibrated,
                "device": self.device.to_dict(), "constants": self.constants.to_dict(),
                "source": self.source}


def check_sim_kernel(kernel: str | None) -> str:
    """`kernel`, or the default for None; ValueError names the allowed ones."""
    if kernel is None:
        return DEFAULT_SIM_KERNEL
    if kernel not in SIM_KERNELS:
        raise ValueError(f"sim-kernel: {kernel!r} unknown; allowed: {', '.join(SIM_KERNELS)}")
    return kernel


def is_calibration_path(name: str) -> bool:
    """True when `name` looks like a file rather than a preset name (a .json name or a path)."""
    text = str(name)
    return text.lower().endswith(".json") or os.sep in text or "/" in text


def load_calibration(path: str | os.PathLike) -> SimModel:
    """A calibration file written by `kvtune calibrate` (or shipped). ValueError with one line
    when it is missing, unreadable or not a calibration."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"device-model: calibration file {str(p)!r} not found") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"device-model: calibration file {str(p)!r} unreadable: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise ValueError(f"device-model: {str(p)!r} is not a kvtune calibration "
                         f"(format {CALIBRATION_FORMAT!r} expected)")
    try:
        dev = dict(data["device"])
        dev["live"] = False
        device = DeviceSpec(**dev)
        constants = SimConstants.from_dict(data["constants"])
        kernel = check_sim_kernel(data["kernel"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"device-model: {str(p)!r} lacks or mangles field {exc}") from None
    source = data.get("source") or {}
    calibrated = bool(data.get("calibrated", False))
    when = source.get("date", "")
    gpu = source.get("gpu", "")
    label = (f"{kernel} model, " + (f"calibrated {when} on {gpu}".strip()
             if calibrated else "uncalibrated") + f" ({p.name})")
    return SimModel(device, constants, kernel, calibrated, label, source)


def write_calibration(model: SimModel, path: str | os.PathLike) -> None:
    """Write `model` as a calibration file (NaN numbers become null)."""
    import math

    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if hasattr(value, "item"):  # numpy scalars
            return clean(value.item())
        return value

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(clean(model.to_dict()), indent=2) + "\n")


def shipped_calibration(preset: str, kernel: str) -> Path | None:
    """The calibration file shipped for (preset, kernel), if there is one."""
    path = CALIBRATIONS_DIR / f"{preset.lower()}-{kernel}.json"
    return path if path.is_file() else None


def sim_model(name: str | None, kernel: str | None = None) -> SimModel:
    """The simulator model for a preset name or a calibration file path, standing in for
    `kernel` (default triton; a calibration file's own kernel when a file is given and no
    kernel is asked for). ValueError names the allowed presets and kernels."""
    if name is not None and is_calibration_path(name):
        model = load_calibration(name)
        if kernel is not None and check_sim_kernel(kernel) != model.kernel:
            raise ValueError(f"sim-kernel: {kernel!r} asked for, but {name!r} calibrates "
                             f"{model.kernel!r}; drop --sim-kernel or pick a matching file")
        return model
    kernel = check_sim_kernel(kernel)
    key = str(name).lower()
    if key not in DEVICE_MODELS:
        raise ValueError(f"device-model: {name!r} unknown; allowed: {', '.join(DEVICE_MODELS)} "
                         "or the path of a calibration file (.json)")
    shipped = shipped_calibration(key, kernel)
    if shipped is not None:
        return load_calibration(shipped)
    return SimModel(DEVICE_MODELS[key], DEFAULT_CONSTANTS, kernel, False,
                    f"{kernel} model, uncalibrated (datasheet figures, hand-set constants)")


def device_model(name: str) -> DeviceSpec:
    """The device of a preset (case-insensitive) or of a calibration file; ValueError names the
    allowed presets."""
    return sim_model(name).device


def model_for_gpu_name(gpu_name: str) -> DeviceSpec | None:
    """The preset whose name appears in a CUDA device name ("NVIDIA H200" -> h200), if any."""
    low = gpu_name.lower().replace(" ", "")
    for key in ("h200", "h100", "h20", "a100", "b200", "l40s"):
        if key in low:
            return DEVICE_MODELS[key]
    return None


def cuda_available() -> bool:
    """True when torch sees a CUDA GPU. Never raises (a CPU build of torch says False)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken driver install is "no GPU" for our purposes
        return False


def live_device(hbm_bytes_per_s: float | None = None, index: int = 0) -> DeviceSpec:
    """The GPU torch sees at `index`, as a DeviceSpec with live=True.

    hbm_bytes_per_s: the measured copy bandwidth; without it the datasheet figure of the matching
    preset is used (or 1 TB/s for an unknown card, marked in the name).
    """
    import torch

    props = torch.cuda.get_device_properties(index)
    preset = model_for_gpu_name(props.name)
    bw = hbm_bytes_per_s or (preset.hbm_bytes_per_s if preset else 1e12)
    l2 = int(getattr(props, "L2_cache_size", 0) or (preset.l2_bytes if preset else 0))
    return DeviceSpec(
        name=props.name,
        sm_count=int(props.multi_processor_count),
        l2_bytes=l2,
        hbm_bytes_per_s=float(bw),
        max_ctas_per_sm=preset.max_ctas_per_sm if preset else 8,
        live=True,
    )

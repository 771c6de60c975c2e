"""Device descriptions: datasheet presets for the simulator, and the live GPU when there is one."""

from __future__ import annotations

from kvtune.kernels.plan import DeviceSpec

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


def device_model(name: str) -> DeviceSpec:
    """The datasheet preset called `name` (case-insensitive); ValueError names the allowed ones."""
    key = str(name).lower()
    if key not in DEVICE_MODELS:
        raise ValueError(f"device-model: {name!r} unknown; allowed: {', '.join(DEVICE_MODELS)}")
    return DEVICE_MODELS[key]


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

"""What a run's manifest says about where and how it was measured, and the copy-bandwidth ceiling.

`environment_record` gathers the GPU (name, SM count, L2 size, memory), the driver and CUDA
versions, the versions of the packages that shape a number (torch, triton, cupti-python,
nvidia-ml-py, kvtune), the git commit, Python and the platform, plus the measurement settings
(timer, cold or hot L2, stopping rule) and the measured copy bandwidth. It never fails: what
cannot be read is None (every GPU field on a machine without one).

`measure_copy_bandwidth` times a device-to-device copy of a large buffer of random non-zero data
and counts bytes read plus bytes written: the ceiling the efficiency columns divide by.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import subprocess
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path

from kvtune.kernels.fingerprint import decode_kernel_sha256

PACKAGES = {
    "torch": "torch",
    "triton": "triton",
    "cupti_python": "cupti-python",
    "nvidia_ml_py": "nvidia-ml-py",
    "flashinfer": "flashinfer-python",
    "numpy": "numpy",
    "kvtune": "kvtune",
}
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_COPY_BYTES = 1 << 30
MIN_COPY_BYTES = 1 << 20


def package_version(distribution: str) -> str | None:
    """The installed version of a distribution (importlib.metadata), or None when absent."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a broken install is "unknown", not a crash
        return None


def git_state(path: Path = REPO_ROOT) -> tuple[str | None, bool | None]:
    """(commit hash, working tree has uncommitted changes) of the checkout whose root is `path`.

    (None, None) outside a git checkout, without git, or when `path` is not the root of its git
    checkout (a copy of the project without .git inside another repository, or an install in a
    virtual environment that lives in one: that repository's commit says nothing about this
    code; source_sha256 identifies it then); never raises.
    """
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    try:
        same_root = top is not None and Path(top.strip()).resolve() == Path(path).resolve()
    except OSError:
        same_root = False
    if not same_root:
        return None, None
    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit.strip() or None, (bool(status.strip()) if status is not None else None)


SOURCE_FOLDERS = ("kvtune", "kernels", "workloads", "harness", "studies", "dashboard")


def source_hash(root: Path = REPO_ROOT) -> str | None:
    """sha256 over the project's Python sources and package data under `root` (relative path and
    bytes of every file, in path order): identifies the code that ran when there is no git
    commit to name. None when nothing is found; never raises."""
    import hashlib

    digest = hashlib.sha256()
    files = []
    try:
        root = Path(root)
        files = [p for p in root.glob("*.py") if p.is_file()]
        for folder in SOURCE_FOLDERS:
            base = root / folder
            if base.is_dir():
                files.extend(p for p in base.rglob("*") if p.is_file() and p.suffix in
                             (".py", ".json", ".toml") and "__pycache__" not in p.parts)
        for p in sorted(set(files)):
            digest.update(p.relative_to(root).as_posix().encode() + b"\0")
            digest.update(p.read_bytes())
    except OSError:
        return None
    return digest.hexdigest() if files else None


def gpu_fields(device=None) -> dict:
    """GPU name, SM count, L2 and memory bytes, compute capability, driver and CUDA versions.

    Every value None without a GPU (or when a query fails).
    """
    fields = {
        "gpu_name": None,
        "sm_count": None,
        "l2_bytes": None,
        "gpu_memory_bytes": None,
        "compute_capability": None,
        "driver_version": None,
        "cuda_driver_version": None,
        "cuda_runtime_version": None,
    }
    try:
        import torch

        fields["cuda_runtime_version"] = torch.version.cuda
        if not torch.cuda.is_available():
            return fields
        index = torch.device("cuda" if device is None else device).index
        index = torch.cuda.current_device() if index is None else index
        props = torch.cuda.get_device_properties(index)
        fields.update(
            gpu_name=props.name,
            sm_count=int(props.multi_processor_count),
            l2_bytes=int(getattr(props, "L2_cache_size", 0)) or None,
            gpu_memory_bytes=int(props.total_memory),
            compute_capability=f"{props.major}.{props.minor}",
        )
    except Exception:  # noqa: BLE001 - a broken driver leaves the fields None
        return fields
    fields.update(_nvml_versions())
    return fields


def _nvml_versions() -> dict:
    from kvtune.harness.telemetry import NvmlReader

    nvml = NvmlReader._module()
    out = {}
    if nvml is None:
        return out
    try:
        driver = nvml.nvmlSystemGetDriverVersion()
        out["driver_version"] = driver.decode() if isinstance(driver, bytes) else str(driver)
    except Exception:  # noqa: BLE001
        pass
    get_cuda = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
        nvml, "nvmlSystemGetCudaDriverVersion", None
    )
    try:
        version = int(get_cuda())
        out["cuda_driver_version"] = f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001
        pass
    return out


def environment_record(
    device=None,
    *,
    timer: str | None = None,
    cold_l2: bool | None = None,
    stopping=None,
    copy_bandwidth_bytes_per_s: float | None = None,
) -> dict:
    """The environment part of a run manifest, as a JSON-ready dict (see the module docstring).

    timer: the timer actually used. cold_l2: True for flushed L2, False for --warm-l2.
    stopping: a StoppingRule (or its dict). copy_bandwidth_bytes_per_s: from
    measure_copy_bandwidth at the start of the run (None when not measured).
    """
    commit, dirty = git_state()
    if is_dataclass(stopping):
        stopping = asdict(stopping)
    record = {
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **gpu_fields(device),
        **{f"{key}_version": package_version(dist) for key, dist in PACKAGES.items()},
        "git_commit": commit,
        "git_dirty": dirty,
        "source_sha256": source_hash(),
        "decode_kernel_sha256": decode_kernel_sha256(),
        "python_version": platform.python_version(),
        "python_implementation": sys.implementation.name,
        "platform": platform.platform(),
        "timer": timer,
        "cold_l2": cold_l2,
        "stopping": dict(stopping) if stopping is not None else None,
        "copy_bandwidth_bytes_per_s": copy_bandwidth_bytes_per_s,
    }
    return record


def measure_copy_bandwidth(
    nbytes: int = DEFAULT_COPY_BYTES,
    device=None,
    *,
    runs: int = 10,
    warmup_runs: int = 3,
    seed: int = 0,
) -> float | None:
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written over the median time).

    nbytes: size of the copied buffer, 1 MiB..(a quarter of GPU memory), rounded down to 4 bytes;
    make it much larger than L2 (the default is 1 GiB). runs: timed copies, 3..1000 (median
    taken). The buffer holds random non-zero int32 drawn with `seed`. Returns None without a GPU.
    """
    if not isinstance(runs, int) or not 3 <= runs <= 1000:
        raise ValueError(f"runs: {runs!r} out of range; allowed: 3..1000")
    if not isinstance(warmup_runs, int) or not 0 <= warmup_runs <= 100:
        raise ValueError(f"warmup_runs: {warmup_runs!r} out of range; allowed: 0..100")
    if not isinstance(nbytes, int) or nbytes < MIN_COPY_BYTES:
        raise ValueError(f"nbytes: {nbytes!r} out of range; allowed: an integer >= {MIN_COPY_BYTES}")
    import torch

    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda" if device is None else device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.get_device_properties(dev).total_memory
    if nbytes > total // 4:
        raise ValueError(f"nbytes: {nbytes} out of range; allowed: {MIN_COPY_BYTES}..{total // 4}")
    count = nbytes // 4
    with torch.cuda.device(dev):
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        # non-zero: zeros can take a faster path than real data
        src = torch.randint(1, 2**31 - 1, (count,), dtype=torch.int32, device=dev, generator=gen)
        dst = torch.empty_like(src)
        for _ in range(warmup_runs):
            dst.copy_(src)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        for start, end in zip(starts, ends):
            start.record()
            dst.copy_(src)
            end.record()
        torch.cuda.synchronize(dev)
        if not torch.equal(dst, src):
            raise RuntimeError("copy bandwidth: the copied buffer differs from its source")
        times_ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
        del src, dst
        torch.cuda.empty_cache()  # the allocator would keep the 2 GB reserved for the whole run
    median_s = times_ms[len(times_ms) // 2] / 1000.0
    return 2.0 * count * 4 / median_s

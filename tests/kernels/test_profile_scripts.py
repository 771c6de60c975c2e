"""The GPU-only scripts of this session load on a CPU machine and refuse to run there in one
line (exit 2) instead of failing halfway; the ncu driver is valid bash."""

import subprocess
from pathlib import Path

import pytest

from tests.benchmark_scripts import BENCHMARKS, load_benchmark


@pytest.mark.parametrize("name,argv", [
    ("profile_decode", ["--shape", "llama3-8b", "--kv-dtype", "fp8_e4m3", "--configs",
                        "bn128-w4-s3-pa,bn64-w4-s3-pa-ws4"]),
    ("interference_probe", ["--duration-s", "1"]),
])
def test_gpu_scripts_refuse_without_a_gpu(name, argv, capsys):
    module = load_benchmark(name)
    assert module.main(argv) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_profile_driver_is_valid_bash_and_its_cases_parse():
    subprocess.run(["bash", "-n", str(BENCHMARKS / "profile_gpu.sh")], check=True)
    module = load_benchmark("profile_decode")
    for cases in ("profile_cases.txt", "sweep_cases.txt"):
        for line in Path(BENCHMARKS / cases).read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            args = line.split()[1:] if cases == "profile_cases.txt" else line.split()
            parsed = module.build_parser().parse_args(args)
            for label in (parsed.configs or parsed.config or "").split(","):
                if label:
                    from kvtune.kernels.decode_config import KernelConfig

                    assert KernelConfig.from_label(label).label() == label

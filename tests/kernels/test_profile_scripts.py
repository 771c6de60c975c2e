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


def test_split_cost_times_stage_one_the_merge_and_the_other_merges(monkeypatch):
    """profile_decode --split-cost on the interpreter with a counting timer: stage 1 alone, the
    product's merge, MERGE_VARIANTS and the chunked merge, each checked against the product's
    merge (which the row then keeps in `out`)."""
    import torch
    from kvtune.kernels.decode import prepare_decode, run_decode
    from kvtune.kernels.paged import PagedKVCache, make_queries
    from kvtune.kernels.plan import AttentionShape, build_plan

    module = load_benchmark("profile_decode")
    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4,
                           dtype="fp16")
    kv = [40, 9, 70]
    cache = PagedKVCache.from_lengths(kv, shape, device="cpu", seed=0)
    q = make_queries(len(kv), shape, device="cpu", seed=0)
    plan = build_plan(kv, 16, num_kv_heads=2, page_size=4)
    launch = prepare_decode(plan, cache, merge="blocks")
    out = torch.empty_like(q)
    run_decode(launch, q, cache, out=out)
    product = out.clone()
    calls = []

    def timer(fn):
        fn()
        calls.append(fn)
        return {"median_us": 10.0 + len(calls)}
    row = module.split_cost(launch, q, cache, out, timer, nbytes=1000, ceiling=1e12)
    assert row["split_requests"] == 2 and row["stage1_us"] == 11.0 and row["merge_us"] == 12.0
    assert len(calls) == 4 + len(module.MERGE_VARIANTS)
    for name in [f"merge_s{b}_w{w}" for b, w in module.MERGE_VARIANTS] + [
            "merge_chunked", "merge_chunked_levels"]:
        assert row[name]["vs_product"] < 1e-3, name
    assert row["merge_chunked"]["launches"] == row["merge_chunked_levels"]["launches"] == 1
    assert torch.equal(out, product)

    # A launch prepared with the chunked merge: its stage 1 alone runs no merge either.
    import kvtune.kernels.decode as decode_module

    chunked_calls = []
    real = decode_module.launch_chunked_merge
    monkeypatch.setattr(decode_module, "launch_chunked_merge",
                        lambda *a, **k: chunked_calls.append(1) or real(*a, **k))
    launch = prepare_decode(plan, cache, merge="chunked")
    run_decode(launch, q, cache, out=out)
    assert chunked_calls == [1]
    module.split_cost(launch, q, cache, out, timer, nbytes=1000, ceiling=1e12)
    assert chunked_calls == [1]
    args = module.build_parser().parse_args([])
    assert (args.merge, args.merge_pdl) == ("chunked", "on")
    assert module.build_parser().parse_args(["--merge", "blocks"]).merge == "blocks"
    args = module.build_parser().parse_args(["--merge", "tail", "--versus", "chunked",
                                             "--rounds", "3"])
    assert (args.merge, args.versus, args.rounds) == ("tail", "chunked", 3)
    assert module.main(["--rounds", "0"]) == 2  # refused before anything needs a GPU

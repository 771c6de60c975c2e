"""kernels/prefill_wgmma.py, the Gluon prefill tile: it runs only on an sm_90 GPU (Gluon has no
interpreter), so here it is compiled for sm_90 without a GPU (in a subprocess: the compiler needs
a process where Triton was not imported in interpreter mode) and its schedule is checked in the
PTX; its numerics are checked on the GPU against the float64 reference
(benchmarks/prefill_wgmma_check.py, docs/PERFORMANCE.md). On this machine the hybrid kernel must
never choose it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

COMPILE = r"""
import json, re, sys
import compile_survey as cs  # sets TRITON_INTERPRET=0 before triton is imported
import triton
from triton.experimental.gluon._runtime import GluonASTSource
from kvtune.kernels import prefill_wgmma as m

rows = []
for head_dim, block_m, block_n, stages, role in json.loads(sys.argv[1]):
    fn = m.prefill_wgmma_kernel
    ptrs = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "out_ptr": "*bf16",
            "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "page_indptr_ptr": "*i32",
            "page_indices_ptr": "*i32", "tasks_ptr": "*i32", "counter_ptr": "*i32"}
    ints = ("num_tasks", "dynamic_programs")
    sig = {n: ptrs.get(n, "fp32" if n in ("qk_scale_log2", "v_scale")
                       else "i32" if n.startswith("stride") or n in ints else "constexpr")
           for n in fn.arg_names}
    warps = m.num_warps_for(block_m)
    consts = {"NUM_QO_HEADS": 32, "G": 4, "HEAD_DIM": head_dim, "PAGE_SIZE": 16,
              "BLOCK_M": block_m, "BLOCK_N": block_n, "STAGES": stages, "num_warps": warps}
    if role is not None:  # the persistent grid (role 1, with the trigger) or the tail (role 2)
        consts.update({"PERSISTENT": True, "NUM_SMS": 132, "CTR_PAD": 256,
                       "GDC_TRIGGER": role == 1, "ORDERED_ROLE": role})
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in sig
             if n.endswith("_ptr") or n.startswith("stride")}
    k = triton.compile(GluonASTSource(fn, sig, constexprs=consts, attrs=attrs), target=cs.TARGET,
                       options={"num_warps": warps})
    ptx = k.asm["ptx"]
    regs, spills, _ = cs.ptxas_usage(ptx)
    waits = sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)))
    rows.append({"regs": regs, "spills": spills, "smem": k.metadata.shared,
                 "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)), "waits": waits,
                 "cp_async": len(re.findall(r"cp\.async\.cg\.shared\.global", ptx)),
                 "trigger": ptx.count("griddepcontrol.launch_dependents"),
                 "atomics": len(re.findall(r"atom\.global", ptx))})
print(json.dumps(rows))
"""


def test_the_gluon_prefill_tile_compiles_for_sm90_with_a_product_left_in_flight():
    # One program per task at 128 and 64 rows; the colocated schedule's persistent grid (role
    # 1) and tail (role 2) at 64 rows, 64 keys, 2 buffers.
    cases = [[128, 128, 128, 3, None], [64, 64, 64, 3, None], [128, 64, 64, 2, 1],
             [128, 64, 64, 2, 2]]
    env = {**os.environ, "PYTHONPATH": str(BENCH)}
    env.pop("TRITON_INTERPRET", None)
    res = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(cases)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    for (head_dim, block_m, block_n, stages, role), row in zip(cases, rows):
        assert row["spills"] == 0 and 0 < row["regs"] <= 255, row
        # Q plus STAGES K and V buffers, all 16-bit, within one SM's 227 KB per block.
        assert row["smem"] >= 2 * (block_m + 2 * stages * block_n) * head_dim
        assert row["smem"] <= 227 * 1024
        assert row["wgmma"] > 0 and row["cp_async"] > 0
        # The overlap itself: a wait that leaves one product (P.V) in flight during the softmax.
        assert "1" in row["waits"] and "0" in row["waits"], row
        # The persistent grid signals its dependents once resident; only it does. Its programs
        # take tasks from the counter and count out; the tail also waits for them and resets.
        assert row["trigger"] == (1 if role == 1 else 0), row
        assert row["atomics"] >= {None: 0, 1: 2, 2: 4}[role], row
        if role is None:
            assert row["atomics"] == 0, row


def test_the_interpreter_never_chooses_the_gluon_tile():
    from kvtune.kernels import policies
    from kvtune.kernels.hybrid import hybrid_config, prefill_wgmma_ok
    from kvtune.kernels.paged import PagedKVCache
    from kvtune.kernels.plan import AttentionShape, DeviceSpec

    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=128, page_size=16)
    q_lens, kv_lens = np.array([300, 1]), np.array([400, 20])
    spec = DeviceSpec("h100", sm_count=132, l2_bytes=50 * 2**20, hbm_bytes_per_s=3.35e12)
    plan = policies.get("hybrid-serial").plan_hybrid(q_lens, kv_lens, shape, spec)
    cache = PagedKVCache.from_lengths(kv_lens, shape, device="cpu", seed=0)
    assert plan.prefill_block_m == 128
    assert not prefill_wgmma_ok(plan, cache, "cpu")
    assert not hybrid_config(plan, cache).prefill_wgmma


def test_forcing_the_gluon_tile_without_a_gpu_is_refused_by_name():
    import dataclasses

    import pytest
    import torch

    from kvtune.kernels import policies
    from kvtune.kernels.hybrid import make_hybrid_queries, prepare_hybrid, run_hybrid
    from kvtune.kernels.paged import PagedKVCache
    from kvtune.kernels.plan import AttentionShape, DeviceSpec

    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=16,
                           dtype="fp16")
    q_lens, kv_lens = np.array([40, 1]), np.array([50, 9])
    spec = DeviceSpec("interpreter", sm_count=4, l2_bytes=0, hbm_bytes_per_s=1e11)
    plan = policies.get("hybrid-serial").plan_hybrid(q_lens, kv_lens, shape, spec)
    cache = PagedKVCache.from_lengths(kv_lens, shape, device="cpu", dtype=torch.float16, seed=0)
    launch = prepare_hybrid(plan, cache, q_lens)
    forced = dataclasses.replace(launch, config=dataclasses.replace(launch.config,
                                                                    prefill_wgmma=True))
    q = make_hybrid_queries(q_lens, shape, dtype=torch.float16, seed=0)
    with pytest.raises(ValueError, match="prefill_wgmma"):
        run_hybrid(forced, q, cache)


def test_forcing_the_gluon_colocated_grid_without_a_gpu_is_refused_by_name():
    """HybridConfig.colocated_wgmma routes the colocated schedule's persistent prefill grid
    through the Gluon kernel; hybrid_config never turns it on, and on the interpreter a forced
    one is refused by name (before any launch) rather than silently run as the Triton grid."""
    import dataclasses

    import pytest
    import torch

    from kvtune.kernels import policies
    from kvtune.kernels.hybrid import make_hybrid_queries, prepare_hybrid, run_hybrid
    from kvtune.kernels.paged import PagedKVCache
    from kvtune.kernels.plan import AttentionShape, DeviceSpec

    shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=16,
                           dtype="fp16")
    q_lens, kv_lens = np.array([40, 1, 1]), np.array([50, 9, 30])
    spec = DeviceSpec("interpreter", sm_count=4, l2_bytes=0, hbm_bytes_per_s=1e11)
    plan = policies.get("hybrid-colocated").plan_hybrid(q_lens, kv_lens, shape, spec)
    cache = PagedKVCache.from_lengths(kv_lens, shape, device="cpu", dtype=torch.float16, seed=0)
    launch = prepare_hybrid(plan, cache, q_lens)
    assert plan.schedule == "colocated" and launch.config.persistent_prefill_programs > 0
    assert not launch.config.colocated_wgmma
    forced = dataclasses.replace(launch, config=dataclasses.replace(launch.config,
                                                                    colocated_wgmma=True))
    q = make_hybrid_queries(q_lens, shape, dtype=torch.float16, seed=0)
    with pytest.raises(ValueError, match="prefill_wgmma.*colocated_wgmma=False"):
        run_hybrid(forced, q, cache)

"""benchmarks/fit_hybrid_sim.py recovers a known prefill efficiency from bench_hybrid-shaped
results whose "GPU" times the simulator made with that efficiency."""

from __future__ import annotations

import json

import pytest
from kvtune.harness.sim_hybrid import HybridSimConstants, simulate_hybrid
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape, DeviceSpec
from kvtune.workloads.hybrid import HybridCase

from tests.benchmark_scripts import load_benchmark


def test_fit_recovers_the_prefill_efficiency(tmp_path):
    mod = load_benchmark("fit_hybrid_sim")
    shape = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=128, page_size=16)
    device = DeviceSpec(name="h200", sm_count=132, l2_bytes=60 << 20, hbm_bytes_per_s=4.8e12,
                        max_ctas_per_sm=8)
    truth = HybridSimConstants(prefill_efficiency=0.31)
    cases = []
    for chunk, b in ((512, 8), (1024, 32)):
        case = HybridCase({"context_tokens": 2048, "chunk_tokens": chunk}, b, shape)
        batch = case.batch()
        variants = {}
        for name in ("serial", "prefill-alone", "decode-alone"):
            sub = mod.variant_batch(batch, name)
            plan = policies.get("hybrid-serial").plan_hybrid(sub.q_lens, sub.kv_lens, shape,
                                                              device)
            t = simulate_hybrid(plan, shape, device, hybrid=truth).time_us
            variants[name] = {"ok": True, "median_us": t}
        cases.append({"case_id": case.case_id, "variants": variants})
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"shape": shape.to_dict(), "device": device.to_dict(),
                                "cases": cases}))
    out = tmp_path / "fit.json"
    assert mod.main([str(path), "--json", str(out)]) == 0
    fitted = json.loads(out.read_text())
    assert fitted["prefill_efficiency"] == pytest.approx(0.31, abs=0.011)
    assert max(abs(e) for e in fitted["after"]["serial"]) < 0.02

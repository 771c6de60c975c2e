"""benchmarks/fit_hybrid_sim.py recovers known constants (prefill efficiency, the hybrid decode
program's cap, one-launch decode efficiency) from bench_hybrid-shaped results whose "GPU" times
the simulator made with them."""

from __future__ import annotations

import json

import pytest
from kvtune.harness.sim_hybrid import HybridSimConstants, simulate_hybrid
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape, DeviceSpec
from kvtune.workloads.hybrid import HybridCase

from tests.benchmark_scripts import load_benchmark


SHAPE = AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=128, page_size=16)
DEVICE = DeviceSpec(name="h200", sm_count=132, l2_bytes=60 << 20, hbm_bytes_per_s=4.8e12,
                    max_ctas_per_sm=8)


SWEEP = (({"context_tokens": 2048, "chunk_tokens": 512}, 8),
         ({"context_tokens": 2048, "chunk_tokens": 1024}, 32))


def _results(tmp_path, mod, truth, names, hybrid_cases=SWEEP):
    cases = []
    for params, b in hybrid_cases:
        case = HybridCase(params, b, SHAPE)
        batch = case.batch()
        variants = {}
        for name in names:
            pol, kw = mod.VARIANT_POLICIES[name]
            sub = mod.variant_batch(batch, name)
            plan = policies.get(pol, **kw).plan_hybrid(sub.q_lens, sub.kv_lens, SHAPE, DEVICE)
            # As the runs the fit was made for ran them: every decode as the hybrid kernel's
            # items (rows without a decode_kernel field).
            t = simulate_hybrid(plan, SHAPE, DEVICE, hybrid=truth, decode_kernel=False).time_us
            variants[name] = {"ok": True, "median_us": t}
        cases.append({"case_id": case.case_id, "variants": variants})
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"shape": SHAPE.to_dict(), "device": DEVICE.to_dict(),
                                "cases": cases}))
    return path


def test_fit_recovers_the_prefill_efficiency(tmp_path, capsys):
    mod = load_benchmark("fit_hybrid_sim")
    truth = HybridSimConstants(prefill_efficiency=0.31)
    path = _results(tmp_path, mod, truth, ("serial", "prefill-alone", "decode-alone"))
    out = tmp_path / "fit.json"
    assert mod.main([str(path), "--json", str(out)]) == 0
    fitted = json.loads(out.read_text())
    assert fitted["prefill_efficiency"] == pytest.approx(0.31, abs=0.011)
    assert max(abs(e) for e in fitted["after"]["serial"]) < 0.02
    # No fused rows: the one-launch constant keeps its default, and says so; no
    # continuous-batching rows: nor does the decode cap.
    defaults = HybridSimConstants()
    assert fitted["one_launch_decode_efficiency"] == defaults.one_launch_decode_efficiency
    assert fitted["decode_cta_rate_cap_bytes_per_s"] == defaults.decode_cta_rate_cap_bytes_per_s
    out = capsys.readouterr().out
    assert "not fitted: no fused rows" in out
    assert "not fitted: no continuous-batching two-launch rows" in out


def test_fit_recovers_the_decode_cap_on_continuous_two_launch_rows(tmp_path, capsys):
    # A continuous-batching step (its longest decodes bind the step) beside a sweep case; the
    # cap is fitted on the continuous case's serial and decode-alone rows only.
    mod = load_benchmark("fit_hybrid_sim")
    truth = HybridSimConstants(decode_cta_rate_cap_bytes_per_s=10e9)
    cases = (SWEEP[0], ({"source": "continuous"}, 64))
    path = _results(tmp_path, mod, truth, ("serial", "prefill-alone", "decode-alone"), cases)
    out = tmp_path / "fit.json"
    assert mod.main([str(path), "--json", str(out), "--held-out", str(path)]) == 0
    fitted = json.loads(out.read_text())
    assert fitted["decode_cta_rate_cap_bytes_per_s"] == pytest.approx(10e9, abs=0.51e9)
    assert max(abs(e) for e in fitted["after"]["decode-alone"]) < 0.02
    assert max(abs(e) for e in fitted["before"]["decode-alone"]) > 0.05
    assert fitted["held_out"][str(path)]["after"] == fitted["after"]
    assert "fitted on 2 continuous-batching serial/streams/decode-alone rows" \
        in capsys.readouterr().out


def test_fit_recovers_the_one_launch_decode_efficiency_on_fused_rows_only(tmp_path):
    mod = load_benchmark("fit_hybrid_sim")
    truth = HybridSimConstants(prefill_efficiency=0.31, one_launch_decode_efficiency=0.7)
    path = _results(tmp_path, mod, truth, ("serial", "fused", "pod", "prefill-alone"))
    out = tmp_path / "fit.json"
    assert mod.main([str(path), "--json", str(out), "--start", "prefill_efficiency=0.31",
                     "--start", "one_launch_decode_efficiency=1"]) == 0
    fitted = json.loads(out.read_text())
    assert fitted["one_launch_decode_efficiency"] == pytest.approx(0.7, abs=0.021)
    # Held out: pod (sm-aware) moves with it; serial (prefill_efficiency started at its truth)
    # is the same before and after.
    assert max(abs(e) for e in fitted["after"]["pod"]) < 0.03
    assert max(abs(e) for e in fitted["before"]["pod"]) > 0.03
    assert fitted["after"]["serial"] == fitted["before"]["serial"]


def test_fit_start_refuses_an_unknown_field():
    mod = load_benchmark("fit_hybrid_sim")
    with pytest.raises(ValueError, match="--start: 'nope' unknown"):
        mod.start_constants(["nope=1"])
    with pytest.raises(ValueError, match=r"one_launch_decode_efficiency: .*allowed: \(0, 1\]"):
        mod.start_constants(["one_launch_decode_efficiency=2"])


def test_fit_bad_start_exits_2_in_one_line(tmp_path, capsys):
    mod = load_benchmark("fit_hybrid_sim")
    with pytest.raises(SystemExit) as exc:
        mod.main([str(tmp_path / "absent.json"), "--start", "one_launch_decode_efficiency=0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("one_launch_decode_efficiency: 0.0 out of range; allowed: (0, 1]")


def test_fp8_fit_recovers_the_fp8_terms(tmp_path, capsys):
    """--fp8: bench_hybrid_fp8.py-shaped rows (llama3-8b, as that script builds them) whose GPU
    times the simulator made with known fp8 terms; the fit on the serial rows recovers both,
    the colocated rows (held out) then match too, and the bf16 rows are left where they were."""
    mod = load_benchmark("fit_hybrid_sim")
    truth = HybridSimConstants(fp8_decode_efficiency=0.62, fp8_tile_prefill_efficiency=0.81)
    rows = []
    for ctx, chunk, b in ((4096, 512, 64), (8192, 1024, 16), (4096, 1024, 128)):
        for variant in ("bf16", "fp8", "fp8-tile"):
            shape = AttentionShape(dtype="bf16",
                                   kv_dtype="bf16" if variant == "bf16" else "fp8_e4m3")
            batch = HybridCase({"context_tokens": ctx, "chunk_tokens": chunk}, b, shape).batch()
            for pol in ("hybrid-serial", "hybrid-colocated"):
                plan = policies.get(pol).plan_hybrid(batch.q_lens, batch.kv_lens, shape, DEVICE)
                t = simulate_hybrid(plan, shape, DEVICE, hybrid=truth,
                                    widen_prefill=False if variant == "fp8-tile" else None,
                                    decode_kernel=False)
                rows.append({"context": ctx, "chunk": chunk, "decodes": b, "policy": pol,
                             "variant": variant, "ok": True, "median_us": t.time_us})
    path = tmp_path / "fp8.json"
    path.write_text(json.dumps({"device": DEVICE.to_dict(), "rows": rows}))
    out = tmp_path / "fit.json"
    args = [str(path), "--fp8", "--json", str(out), "--start", "fp8_decode_efficiency=1",
            "--start", "fp8_tile_prefill_efficiency=1"]
    assert mod.main(args) == 0
    fitted = json.loads(out.read_text())
    assert fitted["fp8_decode_efficiency"] == pytest.approx(0.62, abs=0.011)
    assert fitted["fp8_tile_prefill_efficiency"] == pytest.approx(0.81, abs=0.011)
    for name in ("colocated fp8", "colocated fp8-tile", "serial fp8-tile"):
        assert max(abs(e) for e in fitted["after"][name]) < 0.02, name
        assert max(abs(e) for e in fitted["before"][name]) > 0.05, name  # the terms mattered
    assert fitted["before"]["serial bf16"] == fitted["after"]["serial bf16"]
    assert "fp8_decode_efficiency: 1.0 -> 0.62" in capsys.readouterr().out


def test_rows_whose_decodes_ran_the_decode_kernel_do_not_fit_the_item_terms():
    """The decode cap and fp8_decode_efficiency belong to the hybrid kernel's decode items: rows
    recorded with decode_kernel true (single-token decodes through kernels/decode.py) are left
    out of their fits."""
    mod = load_benchmark("fit_hybrid_sim")
    row = {"continuous": True, "variant": "serial", "decode_kernel": True}
    assert mod.cap_rows([row]) == []
    assert mod.cap_rows([{**row, "decode_kernel": False}]) != []
    with pytest.raises(ValueError, match="no 'serial fp8' rows"):
        mod.fit_fp8([{"variant": "serial fp8", "decode_kernel": True}], HybridSimConstants())

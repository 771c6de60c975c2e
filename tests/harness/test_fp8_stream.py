"""The simulator's fp8 terms (SimConstants.fp8_stream_efficiency and fp8_head_dim_knee): they
slow only fp8 KV shapes' first launch, leave every 16-bit prediction bit for bit, load as the
bytes-only model from calibrations written before them, refuse values out of range, and
benchmarks/fit_fp8_sim.py recovers them from rows."""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from kvtune.harness.calibration import identifiable
from kvtune.harness.device import load_calibration, sim_model
from kvtune.harness.sim_model import DEFAULT_CONSTANTS, SimConstants, simulate
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape

ROOT = Path(__file__).resolve().parents[2]
BF16 = AttentionShape()  # 32 q / 8 KV heads, head_dim 128, page 16
FP16 = AttentionShape(dtype="fp16")
FP8 = replace(BF16, kv_dtype="fp8_e4m3")
ONE_HEAD_FP8 = AttentionShape(num_qo_heads=8, num_kv_heads=1, kv_dtype="fp8_e4m3")
SHIPPED = sim_model("h200", "triton")  # harness/calibrations/h200-triton.json

# (policy, params, kv_lens): static, split, persistent, one-CTA-per-SM and unsplit plans.
PLANS = [
    ("fixed-split", {"chunk_tokens": 2048}, np.full(64, 4096)),
    ("fixed-split", {"chunk_tokens": 512}, np.r_[209_715, np.full(63, 832)]),
    ("fa3", {}, np.r_[209_715, np.full(63, 832)]),
    ("no-split", {}, np.full(8, 32_768)),
    ("flashinfer-tensor-core", {}, np.array([100, 5000, 70_000])),
]


def _bytes_only(constants: SimConstants) -> SimConstants:
    """The constants without either fp8 term (fp8 streams like 16-bit KV at 1 byte/element)."""
    return replace(constants, fp8_stream_efficiency=1.0, fp8_head_dim_knee=0.0)


def _share(constants: SimConstants, head_dim: int) -> float:
    """The fp8 stream share the terms give a head_dim."""
    return constants.fp8_stream_efficiency / (1 + constants.fp8_head_dim_knee / head_dim)


def _plan(i, shape, device=SHIPPED.device):
    name, params, kv = PLANS[i]
    return policies.get(name, **params).plan(np.asarray(kv, dtype=np.int64), shape, device)


def _same_result(a, b) -> bool:
    return (a.time_us == b.time_us and a.stage1_us == b.stage1_us and a.merge_us == b.merge_us
            and np.array_equal(a.end_us, b.end_us) and np.array_equal(a.start_us, b.start_us))


@pytest.mark.parametrize("i", range(len(PLANS)))
@pytest.mark.parametrize("shape", [BF16, FP16], ids=["bf16", "fp16"])
def test_16bit_predictions_do_not_read_the_fp8_term(i, shape):
    # Any value of the term gives the 16-bit prediction bit for bit, with the shipped
    # calibration and with the hand-set defaults.
    for base in (SHIPPED.constants, DEFAULT_CONSTANTS):
        plan = _plan(i, shape)
        ref = simulate(plan, shape, SHIPPED.device, replace(base, fp8_stream_efficiency=1.0))
        for value, knee in ((0.2, 0.0), (0.5, 14.0), (0.89, 64.0)):
            other = simulate(plan, shape, SHIPPED.device,
                             replace(base, fp8_stream_efficiency=value, fp8_head_dim_knee=knee))
            assert _same_result(ref, other), (PLANS[i][0], value)


@pytest.mark.parametrize("i", range(len(PLANS)))
def test_fp8_at_one_is_the_model_without_the_field(i):
    # The default keeps fp8 predictions as they were: constants without the field (an older
    # calibration) predict exactly what 1.0 predicts.
    plan = _plan(i, FP8)
    bytes_only = _bytes_only(SHIPPED.constants)
    without = SimConstants.from_dict({k: v for k, v in SHIPPED.constants.to_dict().items()
                                      if k not in ("fp8_stream_efficiency", "fp8_head_dim_knee")})
    assert DEFAULT_CONSTANTS.fp8_stream_efficiency == 1.0
    assert DEFAULT_CONSTANTS.fp8_head_dim_knee == 0.0
    assert _same_result(simulate(plan, FP8, SHIPPED.device, bytes_only),
                        simulate(plan, FP8, SHIPPED.device, without))


def test_shipped_calibration_slows_fp8_in_the_fitted_direction():
    # The fits on fp8 rows found the bytes-only model too fast: a share below 1 at head_dim 128
    # (since the thirty-first session through the knee), and full-GPU fp8 plans predicted slower
    # with it. Bytes and the merge launch are untouched.
    assert 0.5 < _share(SHIPPED.constants, 128) < 1.0
    bytes_only = _bytes_only(SHIPPED.constants)
    for i in range(len(PLANS)):
        plan = _plan(i, FP8)
        slow = simulate(plan, FP8, SHIPPED.device, SHIPPED.constants)
        fast = simulate(plan, FP8, SHIPPED.device, bytes_only)
        assert slow.time_us >= fast.time_us
        assert slow.hbm_bytes == fast.hbm_bytes and slow.merge_us == fast.merge_us
    full = _plan(0, FP8)  # 64 x 4096 tokens, 2048-token chunks: 1024 tasks, bandwidth-bound
    slow = simulate(full, FP8, SHIPPED.device, SHIPPED.constants).stage1_us
    fast = simulate(full, FP8, SHIPPED.device, bytes_only).stage1_us
    assert slow > 1.05 * fast
    # Lower shares are monotonically slower.
    times = [simulate(full, FP8, SHIPPED.device,
                      replace(SHIPPED.constants, fp8_stream_efficiency=v)).time_us
             for v in (1.0, 0.9, 0.7, 0.5)]
    assert times == sorted(times) and times[0] < times[-1]


def test_one_program_per_sm_fp8_plans_barely_move():
    # One KV head, one task per SM: each program is held by its own rate cap, not by the shared
    # bandwidth, so the term (a bandwidth share) changes it far less than a full-GPU plan.
    plan = policies.get("fixed-split", chunk_tokens=2048).plan(np.full(64, 4096), ONE_HEAD_FP8,
                                                               SHIPPED.device)
    assert plan.num_tasks == 128
    bytes_only = _bytes_only(SHIPPED.constants)
    lone = (simulate(plan, ONE_HEAD_FP8, SHIPPED.device, SHIPPED.constants).time_us
            / simulate(plan, ONE_HEAD_FP8, SHIPPED.device, bytes_only).time_us)
    full = (simulate(_plan(0, FP8), FP8, SHIPPED.device, SHIPPED.constants).time_us
            / simulate(_plan(0, FP8), FP8, SHIPPED.device, bytes_only).time_us)
    assert 1.0 <= lone < full


def test_old_calibrations_without_the_field_load_as_bytes_only(tmp_path):
    c = SimConstants.from_dict({"hbm_efficiency": 0.9, "cta_rate_cap_bytes_per_s": 30e9})
    assert c.fp8_stream_efficiency == 1.0
    # The shipped file as it was before the fp8 fit: the same file without the field.
    data = json.loads((ROOT / "harness/calibrations/h200-triton.json").read_text())
    assert "fp8_stream_efficiency" in data["constants"]
    del data["constants"]["fp8_stream_efficiency"]
    del data["constants"]["fp8_head_dim_knee"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    model = load_calibration(old)
    assert model.constants == _bytes_only(SHIPPED.constants)
    plan = _plan(0, FP8)
    assert simulate(plan, FP8, model.device, model.constants).time_us < \
        simulate(plan, FP8, SHIPPED.device, SHIPPED.constants).time_us
    # A shipped calibration has an fp8 term only with the fit's provenance (source.fp8_fit:
    # rows, method, held-out errors); the others keep the bytes-only model.
    fitted = set()
    for other in sorted((ROOT / "harness/calibrations").glob("*.json")):
        source = json.loads(other.read_text())["source"]
        constants = load_calibration(other).constants
        value, factor = _share(constants, 128), constants.fp8_cta_rate_factor
        # A knee only with the knee fit's provenance.
        assert (constants.fp8_head_dim_knee > 0) == ("fp8_knee_fit" in source), other.name
        if "fp8_fit" in source:
            fitted.add(other.name)
            assert value < 1.0 and {"train_rows", "held_out_rows", "held_out"} <= \
                set(source["fp8_fit"]), other.name
            # A per-CTA factor only where the fit says it fitted one.
            assert (factor < 1.0) == ("fp8_cta_rate_factor" in source["fp8_fit"]["fitted"])
        else:
            assert value == 1.0 and factor == 1.0, other.name
    assert {"h200-triton.json", "h100-triton.json", "h100-flashinfer-tensor-core.json",
            "h200-flashinfer-tensor-core.json"} <= fitted
    # And the field round-trips.
    assert SimConstants.from_dict(SHIPPED.constants.to_dict()) == SHIPPED.constants


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.01, 2, math.nan, math.inf, True, "0.9", None])
def test_out_of_range_values_are_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"fp8_stream_efficiency: .* allowed: \(0, 1\]"):
        SimConstants(fp8_stream_efficiency=bad)


@pytest.mark.parametrize("good", [1e-3, 0.5, 1, 1.0])
def test_values_in_range_are_kept(good):
    assert SimConstants(fp8_stream_efficiency=good).fp8_stream_efficiency == good


def test_calibrate_fits_the_term_only_with_fp8_and_16bit_rows():
    def rep(*shapes):
        return SimpleNamespace(plans=[], shapes=list(shapes))

    device = SHIPPED.device
    assert "fp8_stream_efficiency" in identifiable(rep(BF16, FP8), None, device)
    assert "fp8_stream_efficiency" not in identifiable(rep(BF16, FP16), None, device)
    # fp8 rows alone cannot tell it from hbm_efficiency.
    assert "fp8_stream_efficiency" not in identifiable(rep(FP8, FP8), None, device)


# ---------------------------------------------------------------- benchmarks/fit_fp8_sim.py

CSV_COLUMNS = ["variant", "shape", "dtype", "kv_dtype", "page_size", "dist", "batch", "plan",
               "chunk_tokens", "num_tasks", "triton_us", "triton_status", "triton_config"]


def _fit_script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import fit_fp8_sim
    finally:
        sys.path.pop(0)
    return fit_fp8_sim


def _write_rows(path, script, cases, value, config="bn128-w4-s3-pa-vp", factor=1.0, knee=0.0,
                variant=("llama3-8b", "bf16", "fp8_e4m3", 16), exponent=None):
    """A shapes.csv whose Triton times are the shipped model's at fp8_stream_efficiency=value
    (fp8_cta_rate_factor=factor, fp8_head_dim_knee=knee, inflight_exponent=exponent or the
    shipped one), for one matrix variant; config None: the configuration the product launches
    each plan with."""
    constants = replace(SHIPPED.constants, fp8_stream_efficiency=value,
                        fp8_cta_rate_factor=factor, fp8_head_dim_knee=knee)
    if exponent is not None:
        constants = replace(constants, inflight_exponent=exponent)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, CSV_COLUMNS)
        w.writeheader()
        for dist, batch, plan_name in cases:
            # The matrix's own builders: bench_kernels, which the fit script imports.
            bench = sys.modules["bench_kernels"]
            shape = bench.variant_shape(variant)
            b = bench.matrix_batch(dist, batch, shape, bench.TOTAL_TOKENS)
            plan, chunk = bench.matrix_plan(plan_name, b.kv_lens, shape, SHIPPED.device)
            us = simulate(plan, shape, SHIPPED.device, constants).time_us
            w.writerow({"variant": "x", "shape": variant[0], "dtype": variant[1],
                        "kv_dtype": variant[2], "page_size": variant[3], "dist": dist,
                        "batch": batch, "plan": plan_name, "chunk_tokens": chunk,
                        "num_tasks": plan.num_tasks, "triton_us": us, "triton_status": "ok",
                        "triton_config": config or script.product_config(
                            shape, plan, SHIPPED.device, None)})


def test_fit_script_recovers_a_known_share(tmp_path, capsys):
    script = _fit_script()
    train, held, other = tmp_path / "train.csv", tmp_path / "held.csv", tmp_path / "other.csv"
    _write_rows(train, script, [("uniform", 64, "fixed-2048"), ("uniform", 256, "fixed-2048"),
                                ("skew80", 64, "fixed-2048")], 0.7)
    _write_rows(held, script, [("uniform", 8, "balanced-2x"), ("skew80", 256, "fixed-2048")], 0.7)
    # Rows of another configuration than the table's are dropped, whatever their times say.
    _write_rows(other, script, [("uniform", 8, "fixed-2048")], 0.3, config="bn64-w4-s4-pa-vp")
    out = tmp_path / "fit.json"
    assert script.main(["--train-shapes", str(train), "--train-shapes", str(other),
                        "--held-out", str(held), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["fp8_stream_efficiency"] == pytest.approx(0.7)
    assert result["train"]["all"]["after"]["median_abs_error"] < 1e-9
    assert result["held_out"]["all"]["after"]["median_abs_error"] < 1e-9
    assert result["held_out"]["all"]["before"]["median_error"] < -0.05  # bytes-only: too fast
    assert "1 other configurations dropped" in capsys.readouterr().out


def test_fit_script_recovers_a_known_share_and_cta_factor(tmp_path):
    script = _fit_script()
    train, held = tmp_path / "train.csv", tmp_path / "held.csv"
    # Bandwidth-bound cases (many programs) pin the share; few programs per SM pin the factor.
    _write_rows(train, script, [("uniform", 64, "fixed-2048"), ("uniform", 256, "fixed-2048"),
                                ("uniform", 8, "balanced-2x"), ("skew80", 8, "balanced-2x"),
                                ("skew80", 64, "balanced-2x")], 0.7, factor=0.5)
    _write_rows(held, script, [("skew80", 256, "fixed-2048"), ("uniform", 64, "balanced-2x")],
                0.7, factor=0.5)
    out = tmp_path / "fit.json"
    assert script.main(["--train-shapes", str(train), "--held-out", str(held),
                        "--fit-cta-factor", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["fp8_stream_efficiency"] == pytest.approx(0.7)
    assert result["fp8_cta_rate_factor"] == pytest.approx(0.5)
    assert result["held_out"]["all"]["after"]["median_abs_error"] < 1e-9


def test_fit_script_recovers_a_known_share_and_knee_on_the_products_launches(tmp_path, capsys):
    script = _fit_script()
    cases = [("uniform", 64, "fixed-2048"), ("uniform", 8, "balanced-2x")]
    train, held, other = (tmp_path / n for n in ("train.csv", "held.csv", "other.csv"))
    for name, variant in (("hd64", ("hd64", "bf16", "fp8_e4m3", 16)),
                          ("hd256", ("hd256", "bf16", "fp8_e4m3", 16))):
        _write_rows(tmp_path / f"{name}.csv", script, cases, 0.9, config=None, knee=14.0,
                    variant=variant)
    _write_rows(held, script, [("skew80", 64, "fixed-2048")], 0.9, config=None, knee=14.0)
    # A row of a configuration the product does not launch for its plan is dropped.
    _write_rows(other, script, [("uniform", 8, "fixed-2048")], 0.3, config="bn64-w4-s4-pa-vp")
    out = tmp_path / "fit.json"
    assert script.main(["--rows", "product", "--fit-knee", "--train-shapes",
                        str(tmp_path / "hd64.csv"), "--train-shapes", str(tmp_path / "hd256.csv"),
                        "--train-shapes", str(other), "--held-out", str(held),
                        "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["fp8_stream_efficiency"] == pytest.approx(0.9)
    assert result["fp8_head_dim_knee"] == pytest.approx(14.0)
    assert result["held_out"]["all"]["after"]["median_abs_error"] < 1e-9
    assert "1 other configurations dropped" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        script.main(["--fit-knee", "--fit-cta-factor", "--train-shapes", str(train),
                     "--held-out", str(held)])


def test_fit_script_chooses_the_inflight_exponent_the_rows_were_made_with(tmp_path, capsys):
    # Rows made at exponent 0.5: head_dim 64 and 256 (128 and 512 KV bytes per token and head)
    # with few programs per SM, where the per-CTA cap decides, and full plans, where the share
    # does. Of the three exponents offered the fit keeps 0.5 and then reproduces every row.
    script = _fit_script()
    cases = [("uniform", 64, "fixed-2048"), ("uniform", 8, "balanced-2x"),
             ("skew80", 8, "balanced-2x")]
    for name in ("hd64", "hd256"):
        _write_rows(tmp_path / f"{name}.csv", script, cases, 0.9, config=None, knee=14.0,
                    variant=(name, "bf16", "fp8_e4m3", 16), exponent=0.5)
    held = tmp_path / "held.csv"
    _write_rows(held, script, [("skew80", 64, "balanced-2x")], 0.9, config=None, knee=14.0,
                exponent=0.5)
    out = tmp_path / "fit.json"
    assert script.main(["--rows", "product", "--fit-knee", "--inflight-exponents", "0,0.5,1",
                        "--train-shapes", str(tmp_path / "hd64.csv"), "--train-shapes",
                        str(tmp_path / "hd256.csv"), "--held-out", str(held),
                        "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["inflight_exponent"] == 0.5
    assert result["fp8_head_dim_knee"] == pytest.approx(14.0)
    assert result["held_out"]["all"]["after"]["median_abs_error"] < 1e-9
    printed = capsys.readouterr().out
    assert "inflight_exponent 1: training loss" in printed
    assert "chosen inflight_exponent = 0.5" in printed


@pytest.mark.parametrize("bad", ["x", "5", "0,,1"])
def test_bad_inflight_exponents_are_refused(bad, tmp_path, capsys):
    script = _fit_script()
    with pytest.raises(SystemExit) as exc:
        script.main(["--inflight-exponents", bad, "--train-shapes", str(tmp_path / "t.csv"),
                     "--held-out", str(tmp_path / "h.csv")])
    assert exc.value.code == 2
    assert "--inflight-exponents:" in capsys.readouterr().err


def test_the_knee_slows_narrow_head_dims_more():
    # A per-key cost in head_dim columns: the share falls with the knee, more at head_dim 64
    # than at 256, and 0 is the single share.
    base = replace(SHIPPED.constants, fp8_stream_efficiency=1.0, fp8_head_dim_knee=0.0)
    kv = np.full(64, 4096)
    ratios = {}
    for head_dim in (64, 256):
        shape = AttentionShape(num_qo_heads=16, num_kv_heads=8, head_dim=head_dim,
                               kv_dtype="fp8_e4m3")
        plan = policies.get("fixed-split", chunk_tokens=2048).plan(kv, shape, SHIPPED.device)
        t0 = simulate(plan, shape, SHIPPED.device, base).stage1_us
        t1 = simulate(plan, shape, SHIPPED.device,
                      replace(base, fp8_head_dim_knee=32.0)).stage1_us
        ratios[head_dim] = t1 / t0
    assert ratios[64] > ratios[256] > 1.0


@pytest.mark.parametrize("bad", [-1, -0.5, 1025, math.nan, math.inf, True, "14", None])
def test_out_of_range_knees_are_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"fp8_head_dim_knee: .* allowed: 0\.\.1024"):
        SimConstants(fp8_head_dim_knee=bad)


def test_a_gpu_row_replays_with_its_kv_cache_type():
    """harness/fidelity.py row_shape: an fp8 row replays as fp8 (so calibrate and fidelity apply
    the fp8 term); a row from before fp8 KV (no kv_dtype, or NaN from a mixed frame) as 16-bit."""
    import pandas as pd
    from kvtune.harness.fidelity import row_shape

    base = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "page_size": 16, "dtype": "bf16"}
    assert row_shape({**base, "kv_dtype": "fp8_e4m3"}) == FP8
    assert row_shape(base) == BF16
    assert row_shape(pd.Series({**base, "kv_dtype": float("nan")})) == BF16
    assert row_shape(pd.Series({**base, "kv_dtype": "fp8_e4m3"})).kv_is_fp8


def test_the_per_cta_fp8_factor_caps_only_fp8_ctas():
    # SimConstants.fp8_cta_rate_factor (FlashInfer's fitted files: 0.4) lowers the per-CTA cap of
    # fp8 shapes only: a lone program per SM (one KV head, unsplit) gets slower with it, 16-bit
    # predictions stay bit for bit, and 1.0 is the model without it.
    from kvtune.harness.sim_model import cta_rate_cap_bytes_per_s

    fi = sim_model("h200", "flashinfer-tensor-core")
    assert fi.constants.fp8_cta_rate_factor < 1.0
    base = replace(fi.constants, fp8_cta_rate_factor=1.0)
    for shape in (BF16, FP16):
        for i in range(len(PLANS)):
            plan = _plan(i, shape)
            assert _same_result(simulate(plan, shape, fi.device, base),
                                simulate(plan, shape, fi.device, fi.constants))
    plan = _plan(3, ONE_HEAD_FP8, fi.device)
    full = cta_rate_cap_bytes_per_s(plan, ONE_HEAD_FP8, fi.device, base)
    assert math.isclose(cta_rate_cap_bytes_per_s(plan, ONE_HEAD_FP8, fi.device, fi.constants),
                        full * fi.constants.fp8_cta_rate_factor)
    assert simulate(plan, ONE_HEAD_FP8, fi.device, fi.constants).time_us > \
        simulate(plan, ONE_HEAD_FP8, fi.device, base).time_us
    assert DEFAULT_CONSTANTS.fp8_cta_rate_factor == 1.0
    assert SimConstants.from_dict(fi.constants.to_dict()) == fi.constants


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, math.nan, math.inf, True, "0.4", None])
def test_out_of_range_cta_factors_are_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"fp8_cta_rate_factor: .* allowed: \(0, 1\]"):
        SimConstants(fp8_cta_rate_factor=bad)

"""Tests of the simulator's calibration (harness/calibration.py), its fidelity report
(harness/fidelity.py), calibration files as device models (harness/device.py) and the
`kvtune calibrate` / `kvtune fidelity` commands.

The fit is tested on rows the simulator itself made with known constants (a "GPU" whose truth is
known): the fit must recover them from the default starting point. GPU fixtures come later.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kvtune.harness.calibration import calibrate, split_cases
from kvtune.harness.device import (
    SimModel,
    device_model,
    load_calibration,
    sim_model,
    write_calibration,
)
from kvtune.harness.fidelity import compare, fidelity, load_rows
from kvtune.harness.sim_model import SimConstants, simulate
from kvtune.kernels.plan import AttentionShape, build_plan

from kvtune.cli import main

# The Triton kernel's structure as calibrate assumes it (KERNEL_START: 2 CTAs per SM of the
# multi-CTA variant, one of the one-CTA-per-SM variant, 64- and 128-token loop steps, one program
# per planned task), a soft roofline and a merge with a per-row cost.
TRUE = SimConstants(hbm_efficiency=0.8, cta_rate_cap_bytes_per_s=60e9, cta_start_us=2.5,
                    launch_us=5.0, merge_launch_us=4.0, merge_fixed_us=0.0,
                    persistent_task_us=0.8, empty_cta_us=0.3, residency_exponent=0.5,
                    kernel_ctas_per_sm=2, single_cta_variant=True, saturation_sharpness=3.0,
                    merge_row_us=0.3, one_program_per_task=True, block_tokens=64,
                    single_cta_block_tokens=128)
POLICIES = ("no-split,no-split:ctas_per_sm=1,fixed-split:chunk_tokens=512,"
            "fixed-split:chunk_tokens=512:schedule=persistent-heavy-first:ctas_per_sm=1,trtllm")


def _bench(tmp: Path, model: Path, distribution: str, sizes: str, params: tuple, seeds: str = "0"):
    args = ["bench", "--backend", "simulator", "--device-model", str(model), "--distribution",
            distribution, "--batch-sizes", sizes, "--seeds", seeds, "--policies", POLICIES,
            "--out", str(tmp), "--no-progress"]
    for p in params:
        args += ["--param", p]
    assert main(args) == 0
    (run,) = tmp.iterdir()  # one run per folder
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two simulated 'GPU' runs with the TRUE constants: one to fit, one held out."""
    tmp = tmp_path_factory.mktemp("cal")
    truth = tmp / "truth.json"
    write_calibration(SimModel(device_model("h200"), TRUE, "triton", False), truth)
    fit_run = _bench(tmp / "fit1", truth, "uniform", "1,4,16,32", ("total_tokens=16384",))
    skew_run = _bench(tmp / "fit2", truth, "skew80", "4,16,64", ("total_tokens=32768",))
    held = _bench(tmp / "held", truth, "uniform-range", "8,24", ("lo=64", "hi=4096"), "3,4")
    return {"truth": truth, "fit": [fit_run, skew_run], "held": [held]}


def test_fit_recovers_known_constants(runs):
    rows = load_rows(runs["fit"])
    held = load_rows(runs["held"])
    result = calibrate(rows, "triton", holdout_share=0.0, held_out=held, max_evaluations=40)
    c = result.model.constants
    assert {"hbm_efficiency", "cta_rate_cap_bytes_per_s", "cta_start_us", "launch_us",
            "merge_launch_us", "persistent_task_us", "residency_exponent"} <= set(result.fitted)
    assert "inflight_exponent" in result.not_identified  # one shape only
    # trtllm's plans name a larger grid than their tasks, but kvtune's Triton kernel launches one
    # program per task: there is no empty program to fit a cost to.
    assert "empty_cta_us" in result.not_identified
    assert {"saturation_sharpness", "merge_row_us"} <= set(result.fitted)
    # The kernel's structure, not fitted.
    assert (c.kernel_ctas_per_sm, c.single_cta_variant, c.one_program_per_task) == (2, True, True)
    assert (c.block_tokens, c.single_cta_block_tokens) == (64, 128)
    for name in ("hbm_efficiency", "cta_rate_cap_bytes_per_s", "cta_start_us", "launch_us",
                 "residency_exponent", "saturation_sharpness"):
        assert getattr(c, name) == pytest.approx(getattr(TRUE, name), rel=0.05), name
    # The merge's launch, per-row and per-split costs trade off against each other on these few
    # batches; what they add up to is pinned (10%: a merge is a few us of a 30-400 us batch), on
    # merges of 1 to 32 split requests.
    dev = result.model.device
    for batch in (1, 4, 32):
        plan = build_plan(np.full(batch, 2_048), 512, num_kv_heads=8, page_size=16, ctas_per_sm=2)
        fitted_us = simulate(plan, AttentionShape(), dev, c).merge_us
        true_us = simulate(plan, AttentionShape(), device_model("h200"), TRUE).merge_us
        assert fitted_us == pytest.approx(true_us, rel=0.10), batch
    assert result.fit_summary["median_abs_error"] < 0.01
    assert result.held_out_summary["median_spearman"] >= 0.99
    assert result.model.calibrated and result.model.source["runs"]


def test_split_cases_holds_out_whole_batches(runs):
    frame = load_rows(runs["fit"]).frame
    fit, held = split_cases(frame, 0.25, seed=1)
    assert len(fit) + len(held) == len(frame) and len(held) > 0
    assert not set(fit["case_id"]) & set(held["case_id"])
    with pytest.raises(ValueError, match="holdout_share"):
        split_cases(frame, 1.0)


def test_load_rows_drops_failed_rows_and_ignores_extra_columns(runs, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(runs["fit"][0], run)
    frame = pd.read_parquet(run / "measurements.parquet")
    frame.loc[0, "status"] = "failed"
    frame.loc[1, "latency_us"] = float("nan")
    frame["telemetry_sm_clock_mhz"] = 1980.0
    frame.to_parquet(run / "measurements.parquet", index=False)
    rows = load_rows([run])
    assert len(rows.frame) == len(frame) - 2
    assert rows.dropped == {"status not ok": 1, "no latency": 1}
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a run folder"):
        load_rows([tmp_path / "empty"])
    # A results folder stands for the runs inside it.
    assert len(load_rows([tmp_path]).frame) == len(rows.frame)


def test_compare_scores_a_reversed_ranking():
    frame = pd.DataFrame({"case_id": ["a"] * 3 + ["b"] * 3, "batch_size": [8] * 3 + [64] * 3,
                          "policy": list("xyz") * 2,
                          "latency_us": [10.0, 20.0, 30.0, 10.0, 20.0, 30.0],
                          "sim_us": [10.0, 20.0, 30.0, 33.0, 22.0, 11.0]})
    report = compare(frame)
    cases = report.per_case.set_index("case_id")
    assert cases.loc["a", "spearman"] == pytest.approx(1.0) and cases.loc["a", "top1"]
    assert cases.loc["b", "spearman"] == pytest.approx(-1.0) and not cases.loc["b", "top1"]
    assert cases.loc["b", "regret"] == pytest.approx(2.0)  # picked z (30) over x (10)
    s = report.summary
    assert s["regret_worst"] == pytest.approx(2.0)
    assert s["regret_geomean"] == pytest.approx(np.sqrt(3.0) - 1.0)
    assert s["top1_share"] == 0.5 and not s["targets_met"]["regret_worst<=10%"]
    by = report.by_batch.set_index("batch_size")
    assert by.loc[8, "median_abs_error"] == 0.0
    assert by.loc[64, "median_abs_error"] == pytest.approx(1 - 11 / 30)  # |33/10-1|, |22/20-1|, |11/30-1|


def test_calibration_file_is_a_device_model(runs, tmp_path):
    model = load_calibration(runs["truth"])
    assert model.constants == TRUE and model.kernel == "triton"
    assert device_model(str(runs["truth"])).sm_count == 132
    rows = load_rows(runs["held"])
    report, _ = fidelity(rows, "triton", model)
    assert report.summary["median_abs_error"] == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="sim-kernel"):
        sim_model(str(runs["truth"]), "flashinfer-cuda-core")
    with pytest.raises(ValueError, match="not found"):
        sim_model(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a kvtune calibration"):
        sim_model(str(bad))


def test_presets_without_a_calibration_say_uncalibrated():
    model = sim_model("b200", "flashinfer-cuda-core")
    assert not model.calibrated and "uncalibrated" in model.label
    with pytest.raises(ValueError, match="sim-kernel"):
        sim_model("h200", "cutlass")


def test_open_backend_takes_the_kernel():
    from kvtune.harness.backends.select import open_backend

    opened = open_backend("simulator", device_model_name="a100", kernel="flashinfer-tensor-core")
    assert opened.backend.kernel == "flashinfer-tensor-core"
    assert "uncalibrated" in opened.notice


def test_cli_calibrate_and_fidelity(runs, tmp_path, capsys):
    out = tmp_path / "fit.json"
    args = ["calibrate", "--kernel", "triton", "-o", str(out), "--max-evaluations", "15",
            "--holdout-share", "0.3"]
    for r in runs["fit"]:
        args += ["--from", str(r)]
    args += ["--held-out", str(runs["held"][0])]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "held out:" in text and "median Spearman" in text and f"wrote {out}" in text
    data = json.loads(out.read_text())
    assert data["calibrated"] is True and data["source"]["command"].startswith("kvtune calibrate")
    assert main(["fidelity", "--gpu", str(runs["held"][0]), "--device-model", str(out)]) == 0
    text = capsys.readouterr().out
    assert "median Spearman" in text and "| batch size |" in text
    assert main(["bench", "--suite", "smoke", "--backend", "simulator", "--device-model", str(out),
                 "--out", str(tmp_path / "res"), "--no-progress"]) == 0
    assert "calibrated" in capsys.readouterr().err
    # Bad input: one line, exit 2.
    assert main(["calibrate", "--from", str(runs["fit"][0]), "--kernel", "cutlass",
                 "-o", str(tmp_path / "x.json")]) == 2
    assert main(["fidelity", "--gpu", str(runs["held"][0]), "--sim-kernel",
                 "flashinfer-cuda-core"]) == 2
    err = capsys.readouterr().err
    assert err.count("kvtune: error:") == 2 and "Traceback" not in err


def test_cuda_graph_is_a_flashinfer_setting(tmp_path, capsys):
    from kvtune.cli import build_parser
    from kvtune.cli.common import backend_settings

    args = build_parser().parse_args(["bench", "--backend", "flashinfer", "--cuda-graph",
                                      "--sim-kernel", "triton"])
    settings = backend_settings(args)
    assert settings.cuda_graph is True and settings.sim_kernel == "triton"
    assert main(["bench", "--suite", "smoke", "--backend", "simulator", "--cuda-graph",
                 "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvtune: error: cuda-graph:") and err.count("\n") == 1


def test_fidelity_replays_hybrid_rows_through_the_hybrid_simulator(runs, tmp_path):
    """Rows of hybrid batches (prefill chunks beside decodes, a prefill-only batch, a decode-only
    one, speculative decodes) are planned with plan_hybrid and simulated by harness/sim_hybrid.py:
    a simulated run replays to itself, error 0. Before, they went through the decode model with
    q_len 1 (prefill-only rows read 94% too fast on the H200 rows of the ninth session)."""
    truth = runs["truth"]
    assert main(["bench", "--backend", "simulator", "--device-model", str(truth),
                 "--distribution", "hybrid", "--batch-sizes", "4,16", "--param",
                 "chunk_tokens=256", "--param", "context_tokens=2048", "--q-len", "2",
                 "--policies", "hybrid-serial,hybrid-colocated,pod", "--out", str(tmp_path / "h"),
                 "--no-progress"]) == 0
    assert main(["bench", "--backend", "simulator", "--device-model", str(truth),
                 "--distribution", "hybrid", "--batch-sizes", "1", "--param", "decodes=0",
                 "--param", "chunk_tokens=512", "--policies", "hybrid-serial",
                 "--out", str(tmp_path / "h"), "--no-progress"]) == 0
    rows = load_rows(sorted((tmp_path / "h").iterdir()))
    report, frame = fidelity(rows, "triton", load_calibration(truth))
    assert len(frame) == 7 and frame["sim_us"].notna().all()
    assert report.summary["median_abs_error"] == pytest.approx(0.0, abs=1e-9)
    assert (frame["latency_us"] - frame["sim_us"]).abs().max() < 1e-6


def test_fidelity_drops_rows_whose_policy_now_plans_another_launch(runs, tmp_path, capsys):
    """A row of `hybrid-tuned:path=FILE` is replayed from what FILE holds today. After FILE is
    re-written under the same name with other decode knobs, the rows of the batch whose cut
    changed are not compared (their simulated latency would be another launch's), counted as
    stale in the summary and named in the printed report; the others still are."""
    from kvtune.kernels.hybrid_policies import HYBRID_SCHEMA

    def write(min_tokens_per_cta: int) -> Path:
        knobs = {"schedule": "serial", "ctas_per_sm": 2, "sm_policy": "50:50",
                 "prefill_split_cap_waves": 1, "prefill_block_m": 128,
                 "min_tokens_per_cta": min_tokens_per_cta, "max_waves": 4, "max_splits": 32,
                 "decode_schedule": "static"}
        doc = {"schema": HYBRID_SCHEMA, "shape": AttentionShape().to_dict(),
               "buckets": [{"min_decodes": 1, "max_decodes": 64, "min_prefill_tokens": 1,
                            "max_prefill_tokens": 4096, "params": knobs}],
               "deferred_buckets": []}
        path = tmp_path / "hybrid_heuristic.json"
        path.write_text(json.dumps(doc))
        return path

    path = write(256)
    truth = runs["truth"]
    assert main(["bench", "--backend", "simulator", "--device-model", str(truth),
                 "--distribution", "hybrid", "--batch-sizes", "4,16", "--param",
                 "chunk_tokens=256", "--param", "context_tokens=8192", "--policies",
                 f"hybrid-serial,hybrid-tuned:path={path}", "--out", str(tmp_path / "h"),
                 "--no-progress"]) == 0
    rows = load_rows(sorted((tmp_path / "h").iterdir()))
    report, frame = fidelity(rows, "triton", load_calibration(truth))
    assert report.summary["stale_rows"] == 0 and frame["sim_us"].notna().all()
    write(8192)  # the same name, decodes no longer split: another launch
    report, frame = fidelity(rows, "triton", load_calibration(truth))
    tuned = frame["policy"] == "hybrid-tuned"
    assert report.summary["stale_rows"] == int(tuned.sum()) == 2
    assert frame.loc[tuned, "sim_us"].isna().all() and frame.loc[~tuned, "sim_us"].notna().all()
    capsys.readouterr()
    assert main(["fidelity", "--gpu", *map(str, sorted((tmp_path / "h").iterdir())),
                 "--device-model", str(truth)]) == 0
    assert "not compared: 2 rows whose policy now plans another launch" in capsys.readouterr().out

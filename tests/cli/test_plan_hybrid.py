"""`kvtune plan --q-lens`: the hybrid plan of a hybrid policy, and its bad inputs (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtune.cli import main

from tests.cli.test_bad_inputs import one_line

KV = "6144,8192,8192"
TUNED = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_calls" / "s11_hybrid_heuristic.json"


def test_plan_prints_a_hybrid_plan_with_its_tiles_and_decode_splits(capsys):
    assert main(["plan", "--policy", "pod", "--kv-lens", KV, "--q-lens", "2048,1,1",
                 "--device-model", "h200", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    plan = doc["plan"]
    assert doc["policy"] == "pod" and plan["schedule"] == "sm-aware"
    assert plan["q_lens"] == [2048, 1, 1] and plan["prefill_tasks"] > 0 and plan["decode_tasks"] > 0
    assert len(plan["splits_per_request"]) == 3 and plan["waves"] > 0
    assert isinstance(plan["notes"]["prefill_model_us"], float)  # numpy scalars made plain


def test_plan_a_hybrid_batch_with_the_gpu_tuned_file(capsys):
    # 1 prefill chunk of 2048 beside 24 decodes: the file's 17-64 / 1025-4096 bucket ships the
    # colocated schedule; a batch of decodes only is in no bucket (serial).
    kv = ",".join(["8192"] + ["10240"] * 24)
    q = ",".join(["2048"] + ["1"] * 24)
    assert main(["plan", "--policy", f"hybrid-tuned:path={TUNED}", "--kv-lens", kv, "--q-lens", q,
                 "--device-model", "h200"]) == 0
    out = capsys.readouterr().out
    assert "schedule: colocated" in out and "ctas_per_sm: 4" in out


@pytest.mark.parametrize("extra, words", [
    (["--policy", "fa3", "--q-lens", "2048,1,1"], ["policy:", "decode batches only"]),
    (["--policy", "pod", "--q-lens", "2048,1"], ["q_lens:", "one each"]),
    (["--policy", "pod", "--q-lens", "9000,1,1"], ["q_lens:", "1..kv_len"]),
    (["--policy", "pod", "--q-lens", "0,1,1"], ["q-lens:", "1..1048576"]),
])
def test_bad_hybrid_plan_input_is_one_line(capsys, extra, words):
    one_line(capsys, ["plan", "--kv-lens", KV, "--device-model", "h200", *extra], *words)


def test_a_decode_heuristic_cannot_plan_a_hybrid_batch(capsys, tmp_path):
    tuned = tmp_path / "tuned.json"
    assert main(["tune", "--study", "d", "--distribution", "skew80", "--batch-sizes", "4",
                 "--param", "total_tokens=32768", "--backend", "simulator", "--device-model",
                 "h200", "--trials", "2", "--sampler", "random", "--finalists", "1",
                 "--finalist-rounds", "1", "--no-progress", "--out", str(tmp_path / "r")]) == 0
    assert main(["export", "--study", "d", "--storage", f"sqlite:///{tmp_path / 'r' / 'optuna.db'}",
                 "-o", str(tuned), "--allow-regression"]) == 0
    capsys.readouterr()
    one_line(capsys, ["plan", "--heuristic", tuned, "--kv-lens", KV, "--q-lens", "2048,1,1"],
             "q-lens:", "hybrid-tuned:path=FILE")

"""harness/summary.other_card_notes: a heuristic tuned on another card is named once per series,
and `kvtune bench` prints it."""

import json
from pathlib import Path

from kvtune.harness.summary import other_card_notes

ROOT = Path(__file__).resolve().parents[2]


def test_one_note_per_series_planned_for_another_card():
    other = json.dumps({"tuned_on": "NVIDIA H200 (planning for h100)"})
    rows = [{"series": "tuned:a", "plan_notes": other},
            {"series": "tuned:a", "plan_notes": other},
            {"series": "tuned:b", "plan_notes": json.dumps({"tuned_on": "NVIDIA H100"})},
            {"series": "flashinfer-tensor-core", "plan_notes": "{}"},
            {"series": "x", "plan_notes": "not json"}, {"series": "y"}]
    notes = other_card_notes(rows)
    assert len(notes) == 1
    assert notes[0].startswith("tuned:a was tuned on NVIDIA H200, planned here for h100:")
    assert other_card_notes(rows[2:]) == []


def test_bench_prints_the_note_only_for_another_card(tmp_path, capsys):
    from kvtune.cli import main

    path = ROOT / "benchmarks/gpu_calls/s12_fp8_heuristic.json"
    args = ["bench", "--distribution", "arxiv", "--batch-sizes", "48", "--kv-dtype", "fp8_e4m3",
            "--backend", "simulator", "--policies", "flashinfer-tensor-core", "--heuristic",
            str(path), "--no-progress", "--out", str(tmp_path)]
    assert main(args + ["--device-model", "h100"]) == 0
    err = capsys.readouterr().err
    assert "note: tuned:s12_fp8_heuristic was tuned on NVIDIA H200, planned here for h100" in err
    assert main(args + ["--device-model", "h200"]) == 0
    assert "was tuned on" not in capsys.readouterr().err

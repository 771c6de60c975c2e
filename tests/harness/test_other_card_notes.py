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


def test_other_kernel_notes_name_files_tuned_with_another_kernel_or_backend():
    from kvtune.harness.summary import other_kernel_notes

    def row(series, tuned, backend="triton"):
        return {"series": series, "backend": backend,
                "plan_notes": json.dumps({"tuned_kernel": tuned})}

    rows = [row("tuned:same", "triton:k2abc"), row("tuned:old", "triton:k2def"),
            row("tuned:old", "triton:k2def"), row("tuned:early", "triton:unrecorded"),
            row("tuned:fi", "flashinfer:unrecorded"),
            row("tuned:sim", "triton:k2def", backend="simulator"),
            row("tuned:v1", "triton:9cb10793ab634300"),
            {"series": "flashinfer-tensor-core", "backend": "triton", "plan_notes": "{}"}]
    notes = other_kernel_notes(rows, "k2abc")
    assert len(notes) == 4
    assert notes[0].startswith("tuned:old was tuned with another Triton decode kernel (k2def; "
                               "this one k2abc)")
    assert notes[1].startswith("tuned:early was tuned before kvtune recorded")
    assert notes[2].startswith("tuned:fi was tuned on the flashinfer backend")
    assert notes[3].startswith("tuned:v1 records its decode kernel in an older hash format "
                               "(9cb10793ab634300")
    assert other_kernel_notes(rows[:1], "k2abc") == []


def test_a_tuned_file_names_its_run_s_kernel_in_its_plan_notes():
    from kvtune.harness.device import device_model
    from kvtune.studies.export import load_heuristic, tuned_kernel
    from kvtune.workloads.shapes import get_shape

    path = ROOT / "benchmarks/gpu_calls/s12_fp8_heuristic.json"
    policy = load_heuristic(str(path))
    shape = get_shape("llama3-8b", kv_dtype="fp8_e4m3")
    doc = json.loads(path.read_text())
    assert tuned_kernel(doc) == "triton:unrecorded"  # tuned before the hash was recorded
    doc["provenance"]["run"]["decode_kernel_sha256"] = "0123456789abcdef"
    assert tuned_kernel(doc) == "triton:0123456789abcdef"
    assert tuned_kernel({}) == "unknown:unrecorded"
    plan = policy.plan([4096, 100, 2000], shape, device_model("h200"))
    assert plan.notes["tuned_kernel"] == "triton:unrecorded"

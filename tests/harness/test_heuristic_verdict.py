"""harness/heuristic_verdict.py: a tuned series against each baseline, identical launches apart."""

from __future__ import annotations

import json
import math

from kvtune.cli import main
from kvtune.harness.heuristic_verdict import heuristic_verdicts, verdict_line


def _row(series, case, us, splits, chunk=None, policy=None, status="ok"):
    return {"series": series, "policy": policy or series, "case_id": case, "status": status,
            "latency_us": us, "splits": splits, "schedule": "static", "grid_size": len(splits),
            "plan_notes": json.dumps({"chunk_tokens": chunk, "split_kv": chunk is not None}),
            "kernel_config": "bn128-w4-s3",
            "heuristic_path": "f.json" if policy == "tuned" else None}


def test_identical_launches_give_the_noise_band_and_the_others_the_verdict():
    t, fi = "tuned:f", "flashinfer-tensor-core"
    rows = [
        _row(t, "a", 100.0, [1, 1], policy="tuned"), _row(fi, "a", 97.0, [1, 1]),
        _row(t, "b", 100.0, [1, 1], policy="tuned"), _row(fi, "b", 101.0, [1, 1]),
        _row(t, "c", 100.0, [4, 1], 2048, policy="tuned"), _row(fi, "c", 150.0, [1, 1]),
        _row(t, "d", 100.0, [2, 1], 2048, policy="tuned"), _row(fi, "d", 80.0, [2, 1], 4096),
        _row(t, "e", 100.0, [1, 1], policy="tuned"),  # no baseline row: not counted
        _row(fi, "f", 100.0, [1, 1], status="error"), _row(t, "f", 90.0, [1, 1], policy="tuned"),
        {**_row(t, "g", 50.0, [1, 1], policy="tuned"), "prefill_tokens": 512},
        {**_row(fi, "g", 500.0, [1, 1]), "prefill_tokens": 512},
        # A tune's own finalist (no heuristic file) and the oracle: neither pairs up.
        {**_row("finalist:2", "a", 10.0, [1, 1], policy="tuned"), "heuristic_path": None},
        _row("oracle-splits", "a", 10.0, [5, 1], 512),
    ]
    (v,) = heuristic_verdicts(rows)
    assert (v.series, v.baseline, v.cases, v.same_launch, v.differing) == (t, fi, 4, 2, 2)
    assert math.isclose(v.same_min, 0.97) and math.isclose(v.same_max, 1.01)
    assert math.isclose(v.geomean_differing, math.sqrt(1.5 * 0.8))
    assert math.isclose(v.worst_differing, 0.8) and math.isclose(v.worst_all, 0.8)
    line = verdict_line(v)
    assert v.slower == 1  # case d, below the identical launches' band
    assert line.startswith(f"{t} against {fi}: 4 cases; 2 with another launch: x1.095 geomean, "
                           f"worst x0.800, SLOWER than {fi} beyond the noise on 1; 2 the same "
                           "launch (x0.970..x1.010")
    # Without identical launches the floor is the tune's regression limit: 0.985 is noise.
    (v,) = heuristic_verdicts([_row(t, "a", 100.0, [2], 512, policy="tuned"),
                               _row(fi, "a", 98.5, [1]),
                               _row(t, "b", 100.0, [2], 512, policy="tuned"),
                               _row(fi, "b", 97.0, [1])])
    assert (v.same_launch, v.differing, v.slower) == (0, 2, 1)
    # Only baselines and tuned series of policy "tuned" pair up; nothing common, nothing said.
    assert heuristic_verdicts([_row(fi, "a", 1.0, [1])]) == []
    assert heuristic_verdicts([_row(t, "a", 1.0, [1], policy="tuned"),
                               _row(fi, "b", 1.0, [1])]) == []


def test_bench_prints_the_verdict_of_a_heuristic(tmp_path, capsys):
    path = "benchmarks/gpu_calls/s26_fp8_heuristic.json"
    assert main(["bench", "--distribution", "mooncake", "--batch-sizes", "4,24", "--backend",
                 "simulator", "--device-model", "h200", "--kv-dtype", "fp8_e4m3",
                 "--policies", "flashinfer-tensor-core", "--heuristic", path, "--no-progress",
                 "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines()
                if x.startswith("kvtune: tuned:s26_fp8_heuristic against flashinfer-tensor-core"))
    # B=4 falls in the file's deferred bucket: the engine's own launch, the same on the simulator.
    assert ": 2 cases;" in line and "1 the same launch (x1.000..x1.000" in line
    assert "1 with another launch" in line

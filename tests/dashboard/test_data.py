"""Loading (dashboard/data.py) and re-simulation (dashboard/replay.py): read-only, cached by file
state, errors as messages; a replayed timeline reproduces the stored simulated latency."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pandas as pd
import pytest
from kvtune.dashboard import data, frames, storage
from kvtune.dashboard.launch import ENV_RESULTS, ENV_STORAGE
from kvtune.dashboard.replay import (
    device_from_manifest,
    policy_from_row,
    replay_row,
    row_constants,
    shape_from_row,
)
from kvtune.harness.sim_model import resident_ctas_per_sm
from kvtune.harness.store import load_manifest


def test_config_reads_the_environment_and_finds_the_default_storage(tmp_path):
    cfg = data.config_from_env({ENV_RESULTS: str(tmp_path)})
    assert cfg.results_dir == tmp_path.resolve() and cfg.storage is None
    (tmp_path / "optuna.db").write_bytes(b"")
    cfg = data.config_from_env({ENV_RESULTS: str(tmp_path)})
    assert cfg.storage == f"sqlite:///{tmp_path.resolve() / 'optuna.db'}"
    cfg = data.config_from_env(
        {ENV_RESULTS: str(tmp_path), ENV_STORAGE: "postgresql://u:pw@host/db"}
    )
    assert cfg.storage == "postgresql://u:pw@host/db"
    assert storage.redact_url(cfg.storage) == "postgresql://***@host/db"


def test_runs_and_measurements_of_the_fixture(results_dir, bench_run):
    runs = data.runs(results_dir)
    by_id = {r["run_id"]: r for r in runs}
    assert by_id[bench_run.name]["has_measurements"] and not by_id[bench_run.name]["has_tuning"]
    assert sum(r["has_tuning"] for r in runs) == 2  # the oracle run and the multi-objective one
    assert not any(r["problems"] for r in runs)
    loaded = data.measurements(bench_run)
    assert loaded.ok and len(loaded.value) == 24
    assert (
        "kv_lens" not in loaded.value and "latency_us" in loaded.value
    )  # per-request arrays left out
    case = data.case_rows(bench_run, "skew80:B48:seed0")
    assert case.ok and len(case.value) == 4 and len(case.value[0]["kv_lens"]) == 48


def test_corrupt_parquet_and_tuning_json_are_problems_of_the_run(messy_results):
    by_id = {r["run_id"]: r for r in data.runs(messy_results)}
    corrupt = by_id["20260101-000000-bench-c0c0"]
    assert corrupt["status"] == "complete" and len(corrupt["problems"]) == 1
    assert corrupt["problems"][0].startswith("measurements.parquet cannot be read")
    bad_tuning = by_id["20260101-000004-tune-t0t0"]
    assert not bad_tuning["has_tuning"]
    assert any("tuning.json is not a valid tuning result" in p for p in bad_tuning["problems"])
    assert not by_id["20260101-000001-bench-r0r0"]["problems"]


def test_a_changed_file_is_read_again_and_a_corrupt_one_is_a_message(tmp_path, bench_run):
    run = tmp_path / bench_run.name
    shutil.copytree(bench_run, run)
    assert len(data.measurements(run).value) == 24
    frame = pd.read_parquet(run / "measurements.parquet").head(3)
    frame.to_parquet(run / "measurements.parquet", index=False)
    assert len(data.measurements(run).value) == 3  # the cache follows the file's mtime and size
    (run / "measurements.parquet").write_bytes(b"garbage")
    loaded = data.measurements(run)
    assert not loaded.ok and "could not be read" in loaded.error and "\n" not in loaded.error
    assert not data.case_rows(run, "x").ok
    (run / "measurements.parquet").unlink()
    assert data.measurements(run).value.empty


def test_tuning_result_present_missing_and_invalid(tmp_path, tune_run, bench_run):
    assert data.tuning_result(tune_run).value.study == "dash"
    assert "no tuning.json" in data.tuning_result(bench_run).error
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tuning.json").write_text(json.dumps({"study": "x"}))
    assert "not a valid tuning result" in data.tuning_result(broken).error


def test_replayed_timelines_reproduce_the_stored_simulated_latency(bench_run):
    manifest = load_manifest(bench_run)
    device = device_from_manifest(manifest)
    rows = []
    for case_id in ("skew80:B4:seed0", "skew80:B33:seed0", "skew80:B64:seed0"):
        rows += data.case_rows(bench_run, case_id).value
    assert len(rows) == 12
    for row in rows:
        replay = replay_row(row, device)
        assert replay.time_us == pytest.approx(row["latency_us"], rel=1e-9), (
            row["case_id"],
            row["policy"],
        )
        assert (
            replay.plan["num_tasks"] == row["num_tasks"]
            and len(replay.timeline) == row["num_tasks"]
        )
        # The slots are the kernel's occupancy when the row's model fixes one, else the plan's.
        counted = SimpleNamespace(ctas_per_sm=row["ctas_per_sm"])
        resident = resident_ctas_per_sm(counted, device, row_constants(row))
        assert replay.num_slots == device.sm_count * resident
        if not row_constants(row).kernel_ctas_per_sm:
            assert resident == min(row["ctas_per_sm"], device.max_ctas_per_sm)


def test_replay_of_the_tuned_winner_of_a_tuning_run(tune_run):
    device = device_from_manifest(load_manifest(tune_run))
    result = data.tuning_result(tune_run).value
    raw = data.case_rows(tune_run, "skew80:B48:seed0").value
    marked = frames.mark_tuned(pd.DataFrame(raw), result)
    tuned = marked[marked["policy"] == "tuned"].to_dict("records")
    assert tuned
    replay = replay_row(tuned[0], device)
    assert replay.time_us == pytest.approx(tuned[0]["latency_us"], rel=1e-9)
    assert replay.policy == "tuned"


def test_replay_rejects_rows_it_cannot_rebuild(bench_run):
    row = data.case_rows(bench_run, "skew80:B4:seed0").value[0]
    device = device_from_manifest(load_manifest(bench_run))
    with pytest.raises(ValueError, match="kv_lens"):
        replay_row({**row, "kv_lens": None}, device)
    with pytest.raises(ValueError, match="policy_params"):
        policy_from_row({**row, "policy_params": "{not json"})
    with pytest.raises(ValueError, match="shape"):
        shape_from_row({**row, "head_dim": None})
    # The KV type is read when the row has it (rows from before fp8 have none: the query type).
    assert shape_from_row({**row, "kv_dtype": "fp8_e4m3"}).kv_dtype == "fp8_e4m3"
    assert shape_from_row({k: v for k, v in row.items() if k != "kv_dtype"}).kv_dtype == row["dtype"]
    with pytest.raises(ValueError, match="device"):
        device_from_manifest({"device": "h200"})
    # The cached wrapper turns the same failure into a message.
    result, error = data.replay({**row, "kv_lens": None}, device.to_dict())
    assert result is None and "kv_lens" in error

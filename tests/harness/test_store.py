"""The results store: run folders, atomic writes, listing with corrupt entries."""

from __future__ import annotations

import json

import pytest

from kvtune.harness import store


def test_run_lifecycle(tmp_path):
    w = store.RunWriter.create(tmp_path, {"command": "x"})
    assert store.load_manifest(w.root)["status"] == "running"
    w.write_rows([{"a": 1}, {"a": 2}])
    w.finish("complete", rows=2)
    man = store.load_manifest(w.root)
    assert man["status"] == "complete" and man["rows"] == 2 and man["ended_at"]
    assert list(store.load_measurements(w.root)["a"]) == [1, 2]
    assert not [p for p in w.root.iterdir() if p.name.startswith(".")]  # no temp files left


def test_finish_rejects_unknown_status(tmp_path):
    w = store.RunWriter.create(tmp_path, {})
    with pytest.raises(ValueError, match="status"):
        w.finish("done")


def test_list_runs_reports_corrupt_manifests(tmp_path):
    good = store.RunWriter.create(tmp_path, {"k": 1})
    bad = tmp_path / "20200101-000000-bench-dead"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    runs = {r["run_id"]: r for r in store.list_runs(tmp_path)}
    assert runs[good.run_id]["status"] == "running"
    assert runs[bad.name]["status"] == "corrupt"
    assert store.list_runs(tmp_path / "missing") == []


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "m.json"
    store.atomic_write_json(path, {"v": 1})
    with pytest.raises(TypeError):
        store.atomic_write_json(path, {"v": object()})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_run_ids_are_unique(tmp_path):
    ids = {store.RunWriter.create(tmp_path, {}).run_id for _ in range(20)}
    assert len(ids) == 20

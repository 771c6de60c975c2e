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


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_run_whose_process_is_gone_is_marked_killed_with_its_parts_merged(tmp_path):
    import pandas as pd

    writer = store.RunWriter.create(tmp_path, {"kind": "tune"}, kind="tune")
    assert writer.manifest["process"]["pid"] == __import__("os").getpid()
    store.write_parquet_atomic(writer.root / "measurements.part-w000-1-000001.parquet",
                               pd.DataFrame([{"trial": 0, "status": "ok"}]))
    store.write_parquet_atomic(writer.root / "measurements.part-w001-2-000001.parquet",
                               pd.DataFrame([{"trial": 1, "status": "ok"}]))
    (writer.root / ".measurements.parquet.abc.tmp").write_bytes(b"half")
    assert store.list_runs(tmp_path)[0]["status"] == "running"  # this process is alive
    writer.manifest["process"]["pid"] = _dead_pid()
    store.atomic_write_json(writer.root / store.MANIFEST, writer.manifest)
    (run,) = store.list_runs(tmp_path)
    assert run["status"] == "killed" and "is gone" in run["error"] and run["rows"] == 2
    assert sorted(store.load_measurements(writer.root)["trial"]) == [0, 1]
    assert not list(writer.root.glob("measurements.part-*")) and not list(writer.root.glob(".*.tmp"))
    assert store.mark_killed_runs(tmp_path) == []  # marked once


def test_a_reused_pid_or_another_host_is_not_taken_for_the_run(tmp_path):
    import os

    alive = {"status": "running", "process": {"pid": os.getpid(), "host": __import__("socket").gethostname(),
                                              "start": store.process_start(os.getpid())}}
    assert not store.run_process_gone(alive)
    if alive["process"]["start"] is not None:  # Linux: the same pid started at another time
        assert store.run_process_gone({**alive, "process": {**alive["process"], "start": 1}})
    assert not store.run_process_gone({**alive, "process": {**alive["process"], "host": "elsewhere",
                                                            "pid": _dead_pid()}})
    assert not store.run_process_gone({"status": "running"})  # an old manifest: left alone


def test_files_get_the_users_umask_not_0600(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        writer = store.RunWriter.create(tmp_path, {"kind": "bench"})
        writer.write_rows([{"a": 1}])
        for name in (store.MANIFEST, store.MEASUREMENTS):
            assert (writer.root / name).stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)


def test_output_folders_that_cannot_hold_results_are_refused(tmp_path):
    afile = tmp_path / "f"
    afile.write_text("x")
    for bad, words in ((afile, "is a file"), (afile / "sub", "is a file"), ("/proc/x", "/proc"),
                       ("/sys/kvtune", "/sys")):
        with pytest.raises(ValueError, match=words):
            store.check_output_dir(bad)
        with pytest.raises(ValueError, match="out:"):
            store.RunWriter.create(bad, {})
    assert store.check_output_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checking creates nothing

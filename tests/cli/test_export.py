"""`kvtune export` and `kvtune plan --heuristic` end to end, and their one-line refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvtune.cli import main
from kvtune.studies.result import save_tuning_result


# The export tests' sample run and malformed cases (one list, two doors).
from tests.studies import test_export as cases  # noqa: E402
REPO = Path(__file__).resolve().parents[2]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvtune: error: "), err
    assert "Traceback" not in err
    return err


def export_run(tmp_path, result=None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    save_tuning_result(run, result or cases.sample_result())
    return run


def test_export_from_a_run_then_plan_prints_the_bucket_and_the_splits(tmp_path, capsys):
    run = export_run(tmp_path)
    out = tmp_path / "tuned.json"
    assert main(["export", "--run", str(run), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "batch 1..10: min_tokens_per_cta=2048" in printed and f"wrote {out}" in printed
    assert "note: extended from min_batch 2 down to 1" in printed
    doc = json.loads(out.read_text())
    assert doc["provenance"]["exported_from"] == "run-dir" and doc["provenance"]["run_dir"] == str(run)

    assert main(["plan", "--heuristic", str(out), "--kv-lens", "131072,2048,2048", "--device-model", "h100"]) == 0
    printed = capsys.readouterr().out
    assert "splits_per_request: [32, 1, 1]" in printed
    assert "'bucket': 0, 'bucket_min_batch': 1, 'bucket_max_batch': 10" in printed
    assert main(["plan", "--heuristic", str(out), "--kv-lens", ",".join(["65536"] * 40)]) == 0
    printed = capsys.readouterr().out
    assert "'bucket_min_batch': 33, 'bucket_max_batch': 128" in printed
    assert "schedule: persistent-heavy-first" in printed


def test_export_from_a_study_in_sqlite_and_in_a_journal(tmp_path, capsys):
    import optuna
    from optuna.storages.journal import JournalFileBackend

    result = cases.sample_result(buckets=cases.STUDY_BUCKETS[:2])
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    cases._store_in_optuna(result, url)
    journal = tmp_path / "journal.log"
    cases._store_in_optuna(result, optuna.storages.JournalStorage(JournalFileBackend(str(journal))))
    for flags, shown in ((["--storage", url], url), (["--journal", str(journal)], f"journal:{journal}")):
        out = tmp_path / "tuned.json"
        assert main(["export", "--study", "demo", *flags, "-o", str(out)]) == 0
        assert f"from {shown}" in capsys.readouterr().out
        doc = json.loads(out.read_text())
        assert doc["provenance"]["storage"] == shown
        assert [b["max_batch"] for b in doc["buckets"]] == [10, 32]


@pytest.mark.parametrize("argv, field", [
    (["export", "--run", "{tmp}/missing", "-o", "{tmp}/t.json"], "run"),
    (["export", "--run", "{tmp}/run", "--storage", "sqlite:///x.db", "-o", "{tmp}/t.json"], "storage"),
    (["export", "--study", "demo", "--storage", "sqlite:///{tmp}/none.db", "-o", "{tmp}/t.json"], "storage"),
    (["export", "--study", "demo", "--storage", "sqlite:///a.db", "--journal", "j.log", "-o", "{tmp}/t.json"],
     "storage"),
    (["export", "--study", "demo", "--journal", "{tmp}/none.log", "-o", "{tmp}/t.json"], "journal"),
    (["export", "--run", "{tmp}/run", "-o", "{tmp}/nofolder/t.json"], "output"),
    (["export", "--run", "{tmp}/run", "-o", "{tmp}/t.json", "--max-kv-len", "0"], "max-kv-len"),
    (["export", "--run", "{tmp}/run"], "-o/--output"),
    (["export", "-o", "{tmp}/t.json"], "--study"),
    (["export", "--study", "demo", "--run", "{tmp}/run", "-o", "{tmp}/t.json"], "not allowed with"),
    (["plan", "--heuristic", "{tmp}/missing.json", "--kv-lens", "5"], "cannot read"),
    (["plan", "--heuristic", "{tmp}/t.json", "--kv-lens", "5", "--shape", "yi-6b"], "shape.num_kv_heads"),
    (["plan", "--heuristic", "{tmp}/t.json", "--kv-lens", "5", "--dtype", "fp16"], "shape.dtype"),
])
def test_bad_export_or_plan_input_exits_2_with_one_line(tmp_path, capsys, argv, field):
    export_run(tmp_path)
    (tmp_path / "t.json").write_text(json.dumps(cases.sample_doc()))
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    assert field in one_error_line(capsys)
    assert not (tmp_path / "nofolder").exists()


@pytest.mark.parametrize("case_id, field, mutation", cases.MALFORMED, ids=[m[0] for m in cases.MALFORMED])
def test_plan_with_a_malformed_heuristic_exits_2_with_one_line(tmp_path, capsys, case_id, field, mutation):
    path = cases.write_malformed(tmp_path, mutation)
    assert main(["plan", "--heuristic", str(path), "--kv-lens", "131072,2048,2048"]) == 2
    assert field in one_error_line(capsys)


def test_a_hybrid_file_given_as_a_decode_heuristic_names_the_policy_to_use(tmp_path, capsys):
    """`plan` and `bench --heuristic` with a `kvtune tune --suite hybrid` file: one line that
    says what it is and how to use it, exit 2; the suggested policy then plans the batch."""
    root = Path(__file__).resolve().parents[2]
    hybrid = root / "benchmarks" / "gpu_calls" / "s13_hybrid_heuristic_h100.json"
    for argv in (["plan", "--heuristic", str(hybrid), "--kv-lens", "9000,5000",
                  "--q-lens", "2048,1"],
                 ["bench", "--heuristic", str(hybrid), "--suite", "hybrid-quick", "--backend",
                  "simulator", "--out", str(tmp_path)]):
        assert main(argv) == 2
        line = one_error_line(capsys)
        assert "is a hybrid heuristic (kvtune-hybrid-heuristic/" in line
        assert f"--policy hybrid-tuned:path={hybrid}" in line
    assert main(["plan", "--policy", f"hybrid-tuned:path={hybrid}", "--kv-lens", "9000,5000",
                 "--q-lens", "2048,1", "--device-model", "h100"]) == 0


def test_a_50_mb_and_a_deeply_nested_file_through_the_real_command(tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.seek(50 * 1000 * 1000)
        fh.write(b"{}")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    for path, field in ((huge, "at most 1000000 bytes"), (deep, "nested deeper than 32")):
        done = subprocess.run([sys.executable, "-m", "kvtune", "plan", "--heuristic", str(path),
                               "--kv-lens", "5"], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and field in done.stderr, done.stderr


def test_export_from_a_real_tiny_tune_on_the_simulator(tmp_path, capsys):
    """A real `kvtune tune` (smoke suite, few trials), exported by --study and by --run."""
    pytest.importorskip("kvtune.cli.tune")
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    results = tmp_path / "results"
    argv = ["tune", "--suite", "smoke", "--backend", "simulator", "--device-model", "h200", "--trials", "4",
            "--study", "tiny", "--storage", url, "--seed", "0", "--out", str(results), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    run = next(p for p in results.iterdir() if (p / "tuning.json").is_file())
    from_study, from_run = tmp_path / "study.json", tmp_path / "run.json"
    assert main(["export", "--study", "tiny", "--storage", url, "-o", str(from_study)]) == 0
    assert main(["export", "--run", str(run), "-o", str(from_run)]) == 0
    a, b = json.loads(from_study.read_text()), json.loads(from_run.read_text())
    assert a["buckets"] == b["buckets"] and a["buckets"][0]["min_batch"] == 1
    assert a["device"]["simulated"] == "h200"
    from kvtune.studies import export
    from kvtune.harness.device import device_model
    from kvtune.kernels.parametric import ParametricPolicy
    from kvtune.studies.result import load_tuning_result

    tuned = load_tuning_result(run)
    policy = export.load_heuristic(from_study)
    import numpy as np

    rng = np.random.default_rng(0)
    device = device_model("h200")
    shape = policy.shape
    for bucket in tuned.buckets:
        for _ in range(20):
            kv = rng.integers(1, 200_000, int(rng.integers(bucket.min_batch, bucket.max_batch + 1)))
            if bucket.deferred:  # validation kept the engine's own planner for this bucket
                from kvtune.kernels.parametric import engine_default_policy

                expected = engine_default_policy().plan(kv, shape, device).splits
                assert np.array_equal(policy.plan(kv, shape, device).splits, expected)
                assert export.plan_splits(policy, kv, device.sm_count) is None
                continue
            expected = ParametricPolicy(bucket.params).plan(kv, shape, device).splits
            assert np.array_equal(policy.plan(kv, shape, device).splits, expected)
            assert np.array_equal(export.plan_splits(policy, kv, device.sm_count), expected)

"""Every bad input of issue 13 is one line `kvtune: error: ...` and exit 2: no traceback, no hang,
nothing written (each of these printed a traceback, hung or passed silently before)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from kvtune.cli import main
from tests.studies.test_export import sample_doc, sample_result

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
SIM = ["--backend", "simulator", "--device-model", "h200", "--no-progress"]
BENCH = ["bench", "--distribution", "skew80", "--batch-sizes", "4", "--param",
         "total_tokens=32768", "--policies", "fa3", *SIM]
TUNE = ["tune", "--distribution", "skew80", "--batch-sizes", "4", "--param", "total_tokens=32768",
        "--trials", "2", "--sampler", "random", "--finalists", "1", "--finalist-rounds", "1", *SIM]


def one_line(capsys, argv, *words):
    """Run `kvtune argv` (at most 20 s: a hang fails) and check it says one line with `words`."""
    def timeout(*_):
        raise TimeoutError(f"kvtune {' '.join(map(str, argv))} hung")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    try:
        code = main([str(a) for a in argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if not line.startswith("kvtune tune: simulated")]
    assert code == 2 and len(err) == 1 and err[0].startswith("kvtune: error:"), (code, err)
    for word in words:
        assert word in err[0], err[0]
    return err[0]


# --------------------------------------------------------------------------- output folders

@pytest.mark.parametrize("command", [BENCH, TUNE + ["--study", "o"]])
def test_out_naming_a_file_or_a_proc_path_is_refused(tmp_path, capsys, command):
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line(capsys, command + ["--out", afile], "out:", "is a file")
    one_line(capsys, command + ["--out", afile / "sub"], "out:", "is a file")
    one_line(capsys, command + ["--out", "/proc/kvtune-results"], "out:", "/proc")


@pytest.mark.skipif(IS_ROOT, reason="root writes into read-only folders")
def test_out_in_a_read_only_folder_is_refused(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        one_line(capsys, BENCH + ["--out", ro / "r"], "out:", "not writable")
    finally:
        ro.chmod(0o755)


def test_export_output_naming_a_folder_or_an_unwritable_place_is_refused(tmp_path, capsys):
    from kvtune.studies.result import save_tuning_result

    run = tmp_path / "run"
    run.mkdir()
    save_tuning_result(run, sample_result())
    one_line(capsys, ["export", "--run", run, "-o", tmp_path], "output:", "is a folder")
    one_line(capsys, ["export", "--run", run, "-o", "/proc/tuned.json"], "output:", "/proc")
    old = os.umask(0o022)
    try:
        assert main(["export", "--run", str(run), "-o", str(tmp_path / "ok.json")]) == 0
    finally:
        os.umask(old)
    # Readable by a serving container (the user's umask), not mkstemp's 0600.
    assert (tmp_path / "ok.json").stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- heuristic files

def test_heuristic_naming_a_folder_or_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_line(capsys, ["plan", "--kv-lens", "100", "--heuristic", tmp_path], "heuristic:", "folder")
    one_line(capsys, ["plan", "--kv-lens", "100", "--heuristic", fifo], "heuristic:", "not a regular file")


@pytest.mark.skipif(IS_ROOT, reason="root reads unreadable files")
def test_unreadable_heuristic_is_refused(tmp_path, capsys):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(sample_doc()))
    path.chmod(0)
    one_line(capsys, ["plan", "--kv-lens", "100", "--heuristic", path], "heuristic:", "cannot read")


def test_policy_and_heuristic_together_are_refused(tmp_path, capsys):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(sample_doc()))
    one_line(capsys, ["plan", "--kv-lens", "100", "--policy", "fa3", "--heuristic", path],
             "not both")


def test_a_5000_digit_integer_in_a_heuristic_names_its_field(tmp_path, capsys):
    text = json.dumps(sample_doc())
    text = text.replace('"max_waves": ', '"max_waves": ' + "9" * 5000 + ", \"_x\": ", 1)
    path = tmp_path / "tuned.json"
    path.write_text(text)
    one_line(capsys, ["plan", "--kv-lens", "100", "--heuristic", path], "max_waves", "5000 digits")


def test_a_fixed_chunk_heuristic_of_too_many_splits_is_refused(tmp_path, capsys):
    doc = sample_doc(rule="fixed-chunk")
    for b in doc["buckets"]:
        b["params"]["min_tokens_per_cta"] = 16
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(doc))
    one_line(capsys, ["plan", "--kv-lens", "65536", "--heuristic", path],
             "min_tokens_per_cta", "at most 1024")


# --------------------------------------------------------------------------- tuning.json

def _run_dir(tmp_path, text: str) -> Path:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "tuning.json").write_text(text)
    return run


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d["shape"].pop("dtype"), ["shape.dtype", "missing"]),
    (lambda d: d["buckets"][0].update(min_batch=9, max_batch=2), ["min_batch 9 > max_batch 2"]),
    (lambda d: (d.update(rule="fixed-chunk"),
                d["buckets"][0]["params"].update(min_tokens_per_cta=1)), ["8192 pieces", "1024"]),
])
def test_invalid_tuning_results_are_refused(tmp_path, capsys, mutate, words):
    d = sample_result().to_dict()
    mutate(d)
    run = _run_dir(tmp_path, json.dumps(d))
    one_line(capsys, ["export", "--run", run, "-o", tmp_path / "t.json"], *words)
    assert not (tmp_path / "t.json").exists()


def test_a_tuning_json_nested_100k_deep_is_refused(tmp_path, capsys):
    run = _run_dir(tmp_path, "[" * 100_000 + "]" * 100_000)
    one_line(capsys, ["export", "--run", run, "-o", tmp_path / "t.json"], "tuning.json")


@pytest.mark.skipif(IS_ROOT, reason="root reads unreadable files")
def test_an_unreadable_tuning_json_is_refused(tmp_path, capsys):
    run = _run_dir(tmp_path, json.dumps(sample_result().to_dict()))
    (run / "tuning.json").chmod(0)
    one_line(capsys, ["export", "--run", run, "-o", tmp_path / "t.json"], "cannot read")


# --------------------------------------------------------------------------- traces

def _trace_bench(path):
    return ["bench", "--distribution", "trace", "--param", f"path={path}", "--batch-sizes", "4",
            "--policies", "fa3", *SIM]


@pytest.mark.parametrize("name, content, words", [
    ("deep.jsonl", '{"input_length": ' + "[" * 100_000 + "\n", ["deep.jsonl", "nested"]),
    ("bool.jsonl", '{"input_length": true, "output_length": 5}\n', ["bool.jsonl", "input_length"]),
    ("big.jsonl", '{"input_length": 99999999999999999999999, "output_length": 5}\n', ["big.jsonl", "digits"]),
    ("big.csv", "context_tokens,output_tokens\n9223372036854775808,5\n", ["big.csv", "context_tokens"]),
    ("late.jsonl", '{"input_length": 5, "output_length": 5}\n{"input_length": '
     + "[" * 100_000 + "\n", ["late.jsonl", "line 2", "nested"]),
])
def test_bad_trace_values_are_one_line_naming_the_file(tmp_path, capsys, name, content, words):
    path = tmp_path / name
    path.write_text(content)
    one_line(capsys, _trace_bench(path), *words)


@pytest.mark.parametrize("name, data", [
    ("u16.csv", "context_tokens,output_tokens\n100,5\n".encode("utf-16")),
    ("binary.csv", bytes(range(256)) * 8),
])
def test_binary_and_utf16_traces_name_the_file(tmp_path, capsys, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    one_line(capsys, _trace_bench(path), name, "UTF-8")


@pytest.mark.skipif(IS_ROOT, reason="root reads unreadable files")
def test_an_unreadable_trace_is_refused(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("context_tokens,output_tokens\n100,5\n")
    path.chmod(0)
    one_line(capsys, _trace_bench(path), "cannot read")


# --------------------------------------------------------------------------- integers typed

@pytest.mark.parametrize("argv, words", [
    (["plan", "--policy", "fa3", "--kv-lens", "99999999999999999999999"], ["kv-lens"]),
    (BENCH[:4] + ["--batch-sizes", "99999999999999999999999"] + BENCH[5:], ["batch"]),
    (BENCH + ["--seeds", "99999999999999999999999"], ["seeds"]),
    (BENCH[:6] + ["total_tokens=99999999999999999999999"] + BENCH[7:], ["total_tokens", "digits"]),
    (TUNE + ["--study", "i", "--buckets", "1-99999999999999999999999"], ["buckets"]),
    (TUNE + ["--study", "i", "--space", "max_splits=1..99999999999999999999999"], ["max_splits"]),
])
def test_huge_integers_are_refused_on_every_path(tmp_path, capsys, argv, words):
    one_line(capsys, argv + (["--out", tmp_path / "r"] if argv[0] != "plan" else []), *words)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


# --------------------------------------------------------------------------- storages

def test_a_corrupt_journal_is_one_line_and_writes_no_run(tmp_path, capsys):
    journal = tmp_path / "j.log"
    journal.write_text("this is not an optuna journal\n")
    out = tmp_path / "r"
    one_line(capsys, TUNE + ["--study", "j", "--journal", journal, "--out", out], "journal:", "j.log")
    assert not out.exists() or not any(p.name != "optuna.db" for p in out.iterdir())


def test_a_failed_tune_leaves_no_new_empty_storage_file(tmp_path, capsys, monkeypatch):
    from kvtune.studies import tune

    def fail(config):
        raise ValueError("gpus: refused for the test")

    monkeypatch.setattr(tune, "_gpu_list", fail)
    out = tmp_path / "r"
    one_line(capsys, TUNE + ["--study", "f", "--out", out], "gpus")
    assert not (out / "optuna.db").exists()
    journal = tmp_path / "j.log"
    one_line(capsys, TUNE + ["--study", "f", "--out", out, "--journal", journal], "gpus")
    assert not journal.exists()


@pytest.mark.parametrize("families", ["fixed-chunk", "makespan,", "makespan,nonsense", ""])
def test_unknown_per_batch_families_are_refused(tmp_path, capsys, families):
    one_line(capsys, TUNE + ["--study", "f", "--out", tmp_path / "r", "--families", families],
             "families:", "makespan, adaptive")
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- launch order

@pytest.mark.parametrize("order, words", [
    ("fifo", ("launch_order: 'fifo' not allowed", "plan, longest-first")),
    # The simulator (and FlashInfer) hand out their work themselves: a triton-only setting.
    ("longest-first", ("launch-order", "backend 'simulator'", "--backend triton")),
])
def test_a_launch_order_the_backend_cannot_take_is_refused(tmp_path, capsys, order, words):
    one_line(capsys, BENCH + ["--launch-order", order, "--out", tmp_path / "o"], *words)
    assert not (tmp_path / "o").exists()

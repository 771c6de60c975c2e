"""`kvtune tune` on the command line: presets, one-line errors with exit 2 and nothing written."""

from __future__ import annotations

import pytest

from kvtune.cli import main
from kvtune.harness.store import list_runs
from kvtune.studies.config import TuneConfig, load_preset, merge, preset_names

TINY = ["tune", "--distribution", "skew80", "--batch-sizes", "4", "--param", "total_tokens=32768",
        "--backend", "simulator", "--device-model", "h200", "--trials", "3", "--sampler", "random",
        "--finalists", "2", "--finalist-rounds", "1", "--no-progress"]


def run_dirs(out):
    return [r for r in list_runs(out)] if out.exists() else []


def test_tune_runs_then_refuses_the_same_study_without_resume(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(TINY + ["--study", "demo", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "simulated (h200)" in captured.err
    assert "bucket 1-8" in captured.out and "Results:" in captured.out
    assert len(run_dirs(out)) == 1
    assert main(TINY + ["--study", "demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already exists" in err[0] and "--resume" in err[0]
    assert len(run_dirs(out)) == 1  # nothing new written
    # With --resume and a larger budget it continues.
    assert main(TINY + ["--study", "demo", "--out", str(out), "--resume", "--trials", "5"]) == 0
    assert len(run_dirs(out)) == 2


def test_resume_with_other_settings_is_refused(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(TINY + ["--study", "demo", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(TINY + ["--study", "demo", "--out", str(out), "--resume",
                        "--space", "schedule=static"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "resume:" in err[0] and "space" in err[0]


@pytest.mark.parametrize("extra, words", [
    (["--sampler", "anneal"], ["sampler", "allowed: tpe"]),
    (["--buckets", "1-8,4-32"], ["buckets", "overlap"]),
    (["--buckets", "16-32"], ["buckets", "no bucket"]),
    (["--objective", "worst"], ["objective", "mean,worst"]),
    (["--space", "max_waves=0..99"], ["space.max_waves"]),
    (["--space", "nonsense"], ["space", "KNOB=VALUES"]),
    (["--storage", "postgresql://al:s3cret@127.0.0.1:1/x"], ["storage:"]),
    (["--storage", "sqlite:///a.db", "--journal", "j.log"], ["not both"]),
    (["--baselines", "fa3,warp-drive"], ["policy", "warp-drive"]),
    (["--trials", "0"], ["trials"]),
    (["--preset", "nope"], ["preset", "quick"]),
])
def test_bad_input_is_one_line_exit_2_and_writes_no_run(tmp_path, capsys, extra, words):
    out = tmp_path / "r"
    assert main(TINY + ["--study", "bad", "--out", str(out)] + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvtune: error:"), err
    for word in words:
        assert word in err[0]
    assert "s3cret" not in err[0]
    assert run_dirs(out) == []


def test_bad_suite_and_missing_study_are_one_line(tmp_path, capsys):
    assert main(["tune", "--study", "x", "--suite", "nope", "--backend", "simulator",
                 "--out", str(tmp_path)]) == 2
    assert "suite: 'nope' unknown" in capsys.readouterr().err
    assert main(["tune", "--suite", "smoke", "--backend", "simulator", "--out", str(tmp_path)]) == 2
    assert "required: --study" in capsys.readouterr().err


def test_presets_load_and_the_command_line_overrides_them():
    assert {"quick", "prod-mix", "threshold", "grid-small", "pareto"} <= set(preset_names())
    for name in preset_names():
        merge({"study": "x"}, load_preset(name))  # every preset is a valid config
    quick = load_preset("quick")
    config = merge({"study": "x", "trials": 3, "space": {"max_waves": "1..2"}}, quick)
    assert config.suite == "smoke" and config.trials == 3 and config.backend == "simulator"
    grid = merge({"study": "x", "space": {"max_waves": "1"}}, load_preset("grid-small"))
    assert grid.sampler == "grid" and grid.space["max_waves"] == "1"
    assert grid.space["schedule"] == ["static", "persistent-heavy-first"]
    assert merge({"study": "x"}, load_preset("pareto")).sampler_name == "nsga2"


def test_grid_preset_runs_its_whole_grid(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["tune", "--study", "g", "--preset", "grid-small", "--out", str(out),
                 "--no-progress", "--finalists", "2", "--finalist-rounds", "1"]) == 0
    import optuna

    from kvtune.studies.space import params_from_trial
    from kvtune.studies.storage import open_storage

    study = optuna.load_study(study_name="g/1-8", storage=open_storage(f"sqlite:///{out}/optuna.db"))
    sampled = {tuple(sorted(t.params.items())) for t in study.trials}
    grid = study.user_attrs["kvtune_config"]["space"]
    assert len(study.trials) == 32 and len(sampled) == 32  # every point of the 2^5 grid, once
    assert {params_from_trial(dict(p)).schedule for p in sampled} == set(grid["schedules"])


def test_timeout_stops_the_search_early(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(TINY + ["--study", "tt", "--out", str(out), "--trials", "5000",
                        "--timeout-s", "1"]) == 0
    from kvtune.studies.result import load_tuning_result

    (run,) = list_runs(out)
    (bucket,) = load_tuning_result(run["path"]).buckets
    assert 1 <= bucket.n_trials < 5000  # a loaded 2-core CI machine may finish only a few in 1 s


def test_config_round_trips_for_workers():
    config = TuneConfig(study="s", param=("a=1",), space={"max_waves": "1..2"})
    assert TuneConfig.from_dict(config.to_dict()) == config


def test_shape_options_reach_the_study(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(TINY + ["--study", "sh", "--out", str(out), "--num-kv-heads", "4",
                        "--page-size", "32"]) == 0
    (run,) = list_runs(out)
    assert run["shape"]["num_kv_heads"] == 4 and run["shape"]["page_size"] == 32
    assert run["space"]["page_size"] == 32

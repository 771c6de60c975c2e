"""`kvtune bench` without --policies: the default series follows the cases (decode default, or
the hybrid policies when a case has q_len > 1); an explicit --policies is never replaced."""

from __future__ import annotations

import json

import pytest

from kvtune.cli import main
from kvtune.harness import store
from kvtune.harness.bench import DEFAULT_POLICIES, HYBRID_DEFAULT_POLICIES

DECODE = DEFAULT_POLICIES.split(",")
HYBRID = HYBRID_DEFAULT_POLICIES.split(",")
SIM = ["--backend", "simulator", "--device-model", "h100", "--no-progress"]
# One sweep batch: a 512-token chunk after a 4k prefix beside 8 decodes.
HYBRID_SMALL = ["--distribution", "hybrid", "--batch-sizes", "8", "--param", "chunk_tokens=512",
                "--param", "context_tokens=4096"]


def bench(tmp_path, argv):
    """Run `kvtune bench argv` into tmp_path; (manifest, rows) of its one run."""
    assert main(["bench", *argv, *SIM, "--out", str(tmp_path)]) == 0
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    return manifest, store.load_measurements(runs[0])


def series(manifest) -> list[str]:
    return [p["series"] for p in manifest["policies"]]


def test_hybrid_defaults_are_registered_hybrid_policies():
    from kvtune.kernels.policies import get

    assert HYBRID == ["hybrid-serial", "hybrid-streams", "hybrid-fused", "hybrid-colocated", "pod"]
    assert all(hasattr(get(name), "plan_hybrid") for name in HYBRID)
    assert not any(hasattr(get(name), "plan_hybrid") for name in DECODE)


@pytest.mark.parametrize("argv", [
    ["--suite", "smoke"],
    # chunk_tokens=0: an AttentionBatch of q_len-1 decodes only, which decode policies plan.
    ["--distribution", "hybrid", "--batch-sizes", "8", "--param", "chunk_tokens=0"],
])
def test_default_on_decode_cases_is_the_decode_default(tmp_path, argv):
    manifest, rows = bench(tmp_path, argv)
    assert series(manifest) == DECODE
    assert sorted(set(rows["series"])) == sorted(DECODE)
    assert (rows["status"] == "ok").all(), rows.loc[rows["status"] != "ok", "message"].tolist()


@pytest.mark.parametrize("argv", [
    HYBRID_SMALL,
    ["--suite", "smoke", "--q-len", "4"],  # speculative decodes: q_len 4 everywhere
])
def test_default_on_hybrid_cases_is_the_hybrid_policies_without_failed_rows(tmp_path, argv):
    manifest, rows = bench(tmp_path, argv)
    assert series(manifest) == HYBRID
    assert [p["name"] for p in manifest["policies"]] == HYBRID
    assert len(rows) == len(manifest["cases"]) * len(HYBRID) == manifest["rows"]
    assert (rows["status"] == "ok").all(), rows.loc[rows["status"] != "ok", "message"].tolist()
    assert manifest["failed_rows"] == 0


def test_explicit_decode_policies_on_hybrid_cases_are_kept_and_fail_in_one_line(tmp_path):
    manifest, rows = bench(tmp_path, HYBRID_SMALL + ["--policies", "fa3,no-split"])
    assert series(manifest) == ["fa3", "no-split"]
    assert (rows["status"] == "failed").all()
    for msg in rows["message"]:
        assert "\n" not in msg and "q_len up to 512" in msg
        assert "hybrid-serial, hybrid-streams, hybrid-fused, hybrid-colocated, pod" in msg


def test_explicit_policies_on_decode_cases_are_kept(tmp_path):
    manifest, rows = bench(tmp_path, ["--suite", "smoke", "--policies", "pod,fa3"])
    assert series(manifest) == ["pod", "fa3"]
    assert (rows["status"] == "ok").all()


def test_empty_policies_are_not_the_default(tmp_path, capsys):
    assert main(["bench", "--suite", "smoke", *SIM, "--policies", "", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "policies: empty" in err


def test_help_names_both_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert DEFAULT_POLICIES in text and HYBRID_DEFAULT_POLICIES in text
    assert "q_len > 1" in text


def test_hybrid_bench_prints_the_sweep_targets_and_every_case_by_kind(tmp_path, capsys):
    bench(tmp_path, HYBRID_SMALL + ["--policies", "hybrid-serial,hybrid-colocated"])
    out = capsys.readouterr().out
    assert "hybrid sweep: speedup over hybrid-serial" in out
    by_kind = out.split("hybrid cases by kind: speedup over hybrid-serial")[1]
    lines = [ln for ln in by_kind.splitlines() if ln.startswith("hybrid-colocated")]
    assert [ln.split()[1] for ln in lines] == ["all", "sweep"]
    assert not any(ln.startswith("hybrid-serial") for ln in by_kind.splitlines())

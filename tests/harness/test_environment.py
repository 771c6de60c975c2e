"""The environment record on a machine without a GPU, and the copy-bandwidth helper's guards."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from kvtune.harness import environment
from kvtune.harness.environment import (
    environment_record,
    git_state,
    measure_copy_bandwidth,
    package_version,
)
from kvtune.harness.stopping import StoppingRule

GPU_FIELDS = ("gpu_name", "sm_count", "l2_bytes", "gpu_memory_bytes", "compute_capability",
              "driver_version", "cuda_driver_version")

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only record")


@needs_no_gpu
def test_record_on_cpu_has_empty_gpu_fields_and_real_versions():
    record = environment_record(timer="events", cold_l2=True, stopping=StoppingRule())
    assert all(record[key] is None for key in GPU_FIELDS)
    assert record["torch_version"] is not None
    assert record["torch_version"] == package_version("torch")
    assert record["cupti_python_version"] == package_version("cupti-python")
    assert record["triton_version"] == package_version("triton")
    assert record["timer"] == "events" and record["cold_l2"] is True
    assert record["stopping"] == {"min_samples": 10, "min_time_ms": 50.0, "max_noise": 0.005,
                                  "timeout_s": 5.0, "max_samples": 100_000,
                                  "quiet_retries": 5}
    assert record["copy_bandwidth_bytes_per_s"] is None
    assert record["python_version"].count(".") == 2 and record["platform"]
    json.dumps(record)  # a manifest is JSON


def test_missing_package_version_is_none():
    assert package_version("surely-not-an-installed-distribution-xyz") is None


def test_git_commit_of_this_checkout():
    commit, dirty = git_state()
    if commit is None:
        pytest.skip("not running from a git checkout")
    assert len(commit) == 40 and int(commit, 16) >= 0 and isinstance(dirty, bool)


def test_git_state_outside_a_checkout_is_none(tmp_path):
    assert git_state(tmp_path) == (None, None)


def test_git_missing_is_none(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert git_state() == (None, None)
    assert environment_record()["git_commit"] is None


def test_stopping_may_be_given_as_dict():
    assert environment_record(stopping={"min_samples": 20})["stopping"] == {"min_samples": 20}


@needs_no_gpu
def test_copy_bandwidth_without_gpu_is_none():
    assert measure_copy_bandwidth(nbytes=1 << 24) is None


@pytest.mark.parametrize("kwargs, field", [({"nbytes": 1000}, "nbytes"), ({"runs": 1}, "runs"),
                                           ({"warmup_runs": -1}, "warmup_runs")])
def test_copy_bandwidth_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        measure_copy_bandwidth(**kwargs)


def test_nvml_versions_absent_without_driver(monkeypatch):
    monkeypatch.setattr(environment, "_nvml_versions", lambda: {"driver_version": "580.1"})
    # on a CPU machine the NVML versions are never asked for: no GPU, nothing to describe
    if not torch.cuda.is_available():
        assert environment.gpu_fields()["driver_version"] is None


def test_a_git_commit_is_recorded_only_at_the_projects_own_git_root(tmp_path):
    """A copy of the project without .git inside another repository must not record that
    repository's commit; the source hash identifies the code instead."""
    outer = tmp_path / "outer"
    project = outer / "vendor" / "kvtune"
    (project / "harness").mkdir(parents=True)
    (project / "harness" / "x.py").write_text("A = 1\n")
    run = lambda *a: subprocess.run(["git", "-C", str(outer), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x")
    assert git_state(outer)[0] is not None
    assert git_state(project) == (None, None)
    first = environment.source_hash(project)
    (project / "harness" / "x.py").write_text("A = 2\n")
    assert first and environment.source_hash(project) != first
    assert environment.environment_record(None)["source_sha256"] == environment.source_hash()


def test_the_record_names_the_decode_kernel_it_ran():
    from kvtune.kernels.fingerprint import decode_kernel_sha256

    record = environment.environment_record(None)
    assert record["decode_kernel_sha256"] == decode_kernel_sha256() is not None

"""Shared pieces of the studies tests: small suites on the simulator, fake backends."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from kvtune.harness.backends import Measurement, Verification
from kvtune.harness.backends.simulator import SimulatorBackend
from kvtune.harness.device import device_model
from kvtune.harness.runner import CaseRun, Runner
from kvtune.studies.config import TuneConfig
from kvtune.workloads.suites import make_suite

REPO = Path(__file__).resolve().parents[2]


def tiny_config(tmp_path, **overrides) -> TuneConfig:
    """A fast run: skew80 at batch 4 and 16 (two buckets), simulator h200, 6 trials."""
    values = dict(study="t", distribution="skew80", batch_sizes="4,16",
                  param=("total_tokens=65536",), backend="simulator", device_model="h200",
                  trials=6, sampler="random", finalists=3, finalist_rounds=2,
                  out=str(tmp_path / "results"), no_progress=True, stress=False, adaptive=False)
    values.update(overrides)
    return TuneConfig(**values)


def sim_cases(distribution="skew80", batch_sizes="4", total_tokens=65536, seeds=(0,)):
    suite = make_suite(distribution, batch_sizes, {"total_tokens": total_tokens}, seeds=seeds)
    return [CaseRun(c.case_id, c.batch()) for c in suite.cases]


def sim_runner(model="h200", backend=None):
    device = device_model(model)
    return Runner(backend or SimulatorBackend(device), device, device.hbm_bytes_per_s)


class WrongOutputBackend(SimulatorBackend):
    """The simulator, except that plans with `bad_schedule` produce a wrong output - and would be
    the fastest by far if anyone timed them."""

    name = "wrong-output"

    def __init__(self, device, bad_schedule="static-heavy-first"):
        super().__init__(device)
        self.bad_schedule = bad_schedule
        self.timed_bad = 0

    def verify(self, batch, plan):
        if plan.schedule == self.bad_schedule:
            return Verification(ok=False, checked=True, rel_error=0.5, bound=0.01)
        return super().verify(batch, plan)

    def measure(self, batch, plan):
        if plan.schedule == self.bad_schedule:
            self.timed_bad += 1
            return Measurement(status="ok", latency_us=0.001)
        return super().measure(batch, plan)


class RestrictedBackend(SimulatorBackend):
    """A backend that declares what it can express (as the flashinfer backend will)."""

    name = "restricted"
    supported_schedules = ("static", "persistent-heavy-first")
    fixed_split_params: ClassVar[dict] = {"ctas_per_sm": 2}


def env_with_repo() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def kvtune_argv(*args) -> list[str]:
    return [sys.executable, "-m", "kvtune", *args]


@pytest.fixture
def tmp_results(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    return out

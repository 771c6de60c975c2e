"""kvtune installs one top-level import name, `kvtune`, and every part of the product under it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What an editable install adds next to the package (its path hook), not an import name.
EDITABLE_MACHINERY = ("__editable__", "_kvtune_editable", "__editable___kvtune")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(out), str(ROOT)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (found,) = out.glob("kvtune-*.whl")
    return found


def test_wheel_has_one_top_level_name(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top = {n.split("/")[0] for n in names}
        dist_info = next(t for t in top if t.endswith(".dist-info"))
        top_level_txt = f"{dist_info}/top_level.txt"
        declared = zf.read(top_level_txt).decode().split() if top_level_txt in names else []
    assert top - {dist_info} == {"kvtune"}, sorted(top)
    assert declared in ([], ["kvtune"]), declared


def test_wheel_holds_every_part_and_its_data(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    for module in ("kvtune/__init__.py", "kvtune/__main__.py", "kvtune/cli/__init__.py",
                   "kvtune/kernels/plan.py", "kvtune/kernels/tuned_planner.py",
                   "kvtune/workloads/suites.py", "kvtune/harness/backends/triton.py",
                   "kvtune/studies/tune.py", "kvtune/dashboard/app.py",
                   "kvtune/dashboard/views/runs.py", "kvtune/studies/schemas/tuned_heuristic.schema.json",
                   "kvtune/workloads/data/trace_quantiles.json",
                   "kvtune/harness/calibrations/h200-triton.json", "kvtune/harness/calibration.py",
                   "kvtune/cli/calibrate.py", "kvtune/cli/fidelity.py"):
        assert module in names, module
    assert any(n.startswith("kvtune/studies/presets/") and n.endswith(".toml") for n in names)
    # Every source package of the tree is in the wheel (a new folder must be listed in pyproject).
    for folder in ("kernels", "workloads", "harness", "studies", "dashboard", "kvtune"):
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.relative_to(ROOT / folder)
            inside = "kvtune/" + ("" if folder == "kvtune" else folder + "/") + rel.as_posix()
            assert inside.replace("kvtune/kvtune/", "kvtune/") in names, inside


def test_installed_distribution_has_no_other_top_level_name():
    import sysconfig

    # The installed distribution (site-packages), not a kvtune.egg-info a source build leaves.
    site = [sysconfig.get_paths()["purelib"]]
    (dist,) = [d for d in metadata.distributions(name="kvtune", path=site)]
    files = dist.files or []
    top = {str(f).split("/")[0] for f in files}
    top = {t for t in top if not t.endswith((".dist-info", ".pth")) and not t.startswith(EDITABLE_MACHINERY)
           and t != ".." and not t.startswith("__pycache__")}
    top = {t.removesuffix(".py") for t in top}
    assert top <= {"kvtune"}, sorted(top)


def test_import_and_entry_points():
    import kvtune

    assert kvtune.__version__
    eps = [e for e in metadata.entry_points(group="console_scripts") if e.name == "kvtune"]
    assert eps and eps[0].value == "kvtune.cli:main"
    done = subprocess.run([sys.executable, "-m", "kvtune", "--version"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.startswith("kvtune "), done.stderr
    for name in ("kernels", "harness", "workloads", "studies", "dashboard"):
        found = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True,
                               cwd="/", timeout=60, check=False)
        assert found.returncode != 0, f"top-level {name!r} is importable outside the checkout"

"""kvtune: tune, measure and ship the split-KV heuristics of LLM decode attention.

The installed package holds everything under this one name:
kvtune.kernels (plans, policies, Triton kernels, the vendorable tuned planner),
kvtune.workloads (kv_len distributions, traces, suites, shapes), kvtune.harness (backends,
timers, telemetry, correctness gate, runner, results store), kvtune.studies (Optuna tuning and
export), kvtune.dashboard (Streamlit app) and kvtune.cli (the `kvtune` command).
docs/ARCHITECTURE.md gives the layers and the path of the data.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# Run from a source checkout (`python -m kvtune` in the repository root, which puts this folder
# ahead of any installed copy): the subpackages are the folders beside this one, as the
# package-dir mapping of pyproject.toml installs them. An installed kvtune has them inside.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "kernels" / "plan.py").is_file():
    __path__.append(str(_CHECKOUT))  # noqa: F821 - the package's own __path__

try:
    __version__ = version("kvtune")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"


def main(argv=None) -> int:
    """The `kvtune` command (kvtune.cli.main); returns the exit status."""
    from kvtune.cli import main as cli_main

    return cli_main(argv)


__all__ = ["__version__", "main"]

"""Samplers and pruners by name, all seeded.

  tpe     TPESampler(multivariate, group; constant liar when workers run in parallel) - default
  random  RandomSampler
  grid    GridSampler over SearchSpace.grid() (exhaustive when --trials covers the grid)
  cmaes   CmaEsSampler (needs the package `cmaes`); categorical knobs go to a random sampler
  gp      GPSampler (needs `scipy` and `torch`)
  nsga2   NSGAIISampler - the default of the multi-objective mode (--objective mean,worst)
A sampler whose package is missing is a ValueError naming the package, before anything runs.
Pruners: `median` (MedianPruner, default) and `none`.
"""

from __future__ import annotations

import importlib.util

from kvtune.studies.space import SearchSpace

SAMPLERS = ("tpe", "random", "grid", "cmaes", "gp", "nsga2")
PRUNERS = ("median", "none")
_NEEDS = {"cmaes": ("cmaes",), "gp": ("scipy", "torch")}


def check_sampler(name: str) -> None:
    """ValueError for an unknown sampler or one whose package is not installed."""
    if name not in SAMPLERS:
        raise ValueError(f"sampler: {name!r} unknown; allowed: {', '.join(SAMPLERS)}")
    missing = [m for m in _NEEDS.get(name, ()) if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"sampler: {name} needs the package {missing[0]} (pip install {missing[0]}); "
                         "samplers that need nothing more: tpe, random, grid, nsga2")


def make_sampler(name: str, *, seed: int, space: SearchSpace, parallel: bool = False,
                 n_trials: int = 40, n_startup: int | None = None):
    """The Optuna sampler `name` seeded with `seed`.

    parallel: several processes share the study (TPE then uses the constant liar).
    n_trials: the study's trial budget (sizes the NSGA-II population and TPE's random start).
    n_startup: random trials before TPE models the space (default: a quarter of n_trials, 5..10).
    """
    import optuna

    check_sampler(name)
    seed = int(seed)
    if n_startup is None:
        n_startup = min(10, max(5, n_trials // 4))
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          constant_liar=parallel, n_startup_trials=n_startup)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        return optuna.samplers.GridSampler(space.grid(), seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup,
                                            warn_independent_sampling=False)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup,
                                         warn_independent_sampling=False)
    population = min(50, max(8, n_trials // 4))
    return optuna.samplers.NSGAIISampler(seed=seed, population_size=population)


def make_pruner(name: str, *, n_startup_trials: int = 5):
    """`median`: MedianPruner after `n_startup_trials` complete trials; `none`: NopPruner."""
    import optuna

    if name not in PRUNERS:
        raise ValueError(f"pruner: {name!r} unknown; allowed: {', '.join(PRUNERS)}")
    if name == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=n_startup_trials, n_warmup_steps=0)


def worker_seed(seed: int, worker: int, finished_trials: int, process: int | None = None) -> int:
    """A distinct seed per worker and per restart: a resumed random sampler must not redraw the
    configurations it drew before, and two workers must not draw the same ones. Fresh
    single-worker runs keep `seed` itself, so they are reproducible.

    process: this process's id when several separate processes may share the study (`--resume`
    on one storage from several shells or hosts); they start together with the same count of
    finished trials, so the count alone would give them one seed and the same configurations.
    """
    if worker == 0 and finished_trials == 0 and process is None:
        return int(seed)
    mixed = int(seed) * 1_000_003 + worker * 7919 + finished_trials * 104_729
    if process is not None:
        mixed += int(process) * 15_485_863
    return mixed % (2**31 - 1)


__all__ = ["PRUNERS", "SAMPLERS", "check_sampler", "make_pruner", "make_sampler", "worker_seed"]

"""The settings of a tuning run, and named presets of them (studies/presets/<name>.toml).

A preset is a TOML file whose keys are TuneConfig fields (the `kvtune tune` options with `_` for
`-`) plus an optional `description`; a `[space]` table narrows the search space (see
studies/space.py). Options given on the command line override the preset; the preset overrides
the defaults here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from kvtune.workloads.selection import CaseSettings

PRESET_DIR = Path(__file__).resolve().parent / "presets"
OBJECTIVES = ("robust", "mean", "mean,worst")
# The user attribute of every bucket study holding the settings it was created with: the
# defaults of a later `--resume` (so `kvtune tune --study demo --resume --trials 80` works).
SETTINGS_ATTR = "kvtune_settings"
# Settings of where and how long one process works: never stored, free on every resume.
PROCESS_FIELDS = ("study", "storage", "journal", "resume", "workers", "gpus", "timeout_s", "out",
                  "heartbeat_s", "no_progress")
# Settings a resume may change: how many trials, how they are drawn and how the end is judged.
RESUME_FREE_FIELDS = ("trials", "sampler", "seed", "pruner", "finalists", "finalist_rounds",
                      "oracle", "preset", "validate", "stress", "adaptive", "families")
# The per-batch rule families a study can measure as finalists (studies/finalists.py makes
# their candidates: PER_BATCH_CANDIDATES).
PER_BATCH_FAMILIES = ("makespan", "adaptive")


@dataclass(frozen=True)
class TuneConfig:
    """Everything a tuning run (and each of its worker processes) needs. See `kvtune tune -h`."""

    study: str = ""
    suite: str | None = None
    distribution: str | None = None
    batch_sizes: str | None = None
    param: tuple = ()
    seeds: str = "0"
    shape: str = "llama3-8b"
    page_size: int | None = None
    dtype: str | None = None
    kv_dtype: str | None = None
    num_qo_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    backend: str = "auto"
    device_model: str | None = None
    timer: str = "auto"
    warm_l2: bool = False
    stopping: str | None = None
    trials: int = 40
    buckets: str | None = None  # "auto": searched (studies/buckets_auto.py)
    max_buckets: int = 4
    validate: tuple = ()  # specs (studies/validation.py); () = held-out seeds; ("none",) = off
    stress: bool = True
    adaptive: bool = True  # per-batch finalists at all (studies/finalists.py); False: none
    families: str = "makespan"  # which per-batch families, comma-separated (PER_BATCH_FAMILIES)
    sampler: str | None = None  # None: tpe, or nsga2 for the multi-objective mode
    seed: int = 0
    objective: str = "robust"
    pruner: str = "median"
    baselines: str = "flashinfer-tensor-core,fa3,trtllm-oversub,fixed-split"
    space: dict = field(default_factory=dict)
    finalists: int = 5
    finalist_rounds: int = 3
    oracle: bool = False
    storage: str | None = None
    journal: str | None = None
    resume: bool = False
    workers: int = 1
    gpus: str | None = None
    timeout_s: float | None = None
    out: str = "results"
    heartbeat_s: int = 10
    no_progress: bool = False
    preset: str | None = None

    def __post_init__(self) -> None:
        check_study_name(self.study)
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective: {self.objective!r} not allowed; allowed: {', '.join(OBJECTIVES)}")
        for name, lo, hi in (("trials", 1, 100_000), ("workers", 1, 256), ("finalists", 1, 50),
                             ("finalist_rounds", 1, 100), ("heartbeat_s", 1, 3600),
                             ("max_buckets", 1, 16)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name.replace('_', '-')}: {value!r} out of range; allowed: {lo}..{hi}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"timeout-s: {self.timeout_s} must be > 0")
        names = [f.strip() for f in str(self.families).split(",")]
        if not all(names) or any(f not in PER_BATCH_FAMILIES for f in names):
            raise ValueError(f"families: {self.families!r} not allowed; allowed: a comma-separated "
                             f"list of {', '.join(PER_BATCH_FAMILIES)}")
        if self.storage and self.journal:
            raise ValueError("storage: give --storage URL or --journal FILE, not both")

    def case_settings(self):
        """The settings that choose the cases (kvtune.workloads.selection)."""
        return CaseSettings(suite=self.suite, distribution=self.distribution,
                            batch_sizes=self.batch_sizes, params=tuple(self.param),
                            seeds=self.seeds, shape=self.shape, page_size=self.page_size,
                            dtype=self.dtype, kv_dtype=self.kv_dtype,
                            num_qo_heads=self.num_qo_heads,
                            num_kv_heads=self.num_kv_heads, head_dim=self.head_dim)

    @property
    def per_batch_families(self) -> tuple[str, ...]:
        """The per-batch families measured as finalists, in the order given; () with --no-adaptive."""
        if not self.adaptive:
            return ()
        return tuple(dict.fromkeys(f.strip() for f in self.families.split(",")))

    @property
    def multi_objective(self) -> bool:
        return self.objective == "mean,worst"

    @property
    def robust(self) -> bool:
        return self.objective == "robust"

    @property
    def sampler_name(self) -> str:
        return self.sampler or ("nsga2" if self.multi_objective else "tpe")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["param"] = list(self.param)
        d["validate"] = list(self.validate)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TuneConfig:
        d = dict(d)
        d["param"] = tuple(d.get("param") or ())
        d["validate"] = tuple(d.get("validate") or ())
        return cls(**d)


def stored_settings_of(config: TuneConfig) -> dict:
    """What a study stores of the config that created it (SETTINGS_ATTR): every field except
    where and how long one process works (no storage URL: no credential reaches the database)."""
    return {k: v for k, v in config.to_dict().items() if k not in PROCESS_FIELDS}


def resume_config(explicit: dict, preset: dict | None, stored: dict) -> TuneConfig:
    """The TuneConfig of `--resume` on a study created with `stored` settings: the stored
    settings are the defaults, a preset and the flags given override them, but a flag that
    defines the study (suite, shape, backend, buckets, baselines, space, objective, ...) must
    agree with the stored value; ValueError naming the first difference otherwise."""
    known = {f.name for f in dataclasses.fields(TuneConfig)}
    base = {k: v for k, v in stored.items() if k in known and k not in PROCESS_FIELDS}
    for key in ("param", "validate"):  # JSON lists back to the tuples TuneConfig holds
        if key in base:
            base[key] = tuple(base[key] or ())
    given = dict(preset or {})
    space = dict(given.get("space") or {})
    space.update(explicit.get("space") or {})
    given.update({k: v for k, v in explicit.items() if k != "space"})
    if space or "space" in given:
        given["space"] = space
    for key, value in given.items():
        if key in PROCESS_FIELDS or key in RESUME_FREE_FIELDS or key not in base:
            continue
        if _comparable(value) != _comparable(base[key]):
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"resume: {flag} {_shown(value)} differs from the study's stored "
                             f"{key} {_shown(base[key])}; drop {flag} to keep the stored value, "
                             "or start another --study")
    return TuneConfig(**{**base, **given})


def _comparable(value):
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _comparable(v) for k, v in value.items()}
    return value


def _shown(value) -> str:
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_study_name(name: str) -> None:
    if not name or not isinstance(name, str):
        raise ValueError("study: a name is required (--study NAME)")
    if "/" in name or len(name) > 200 or name != name.strip():
        raise ValueError(f"study: {name!r} not allowed; allowed: 1..200 characters without '/' "
                         "or surrounding spaces (buckets add '/<bucket>')")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_preset(name: str) -> dict:
    """The preset's settings as TuneConfig field values (description dropped)."""
    path = PRESET_DIR / f"{name}.toml"
    if "/" in name or not path.is_file():
        raise ValueError(f"preset: {name!r} unknown; allowed: {', '.join(preset_names()) or 'none'}")
    data = _read_toml(path)
    data.pop("description", None)
    known = {f.name for f in dataclasses.fields(TuneConfig)} - {"study", "resume", "preset"}
    values = {}
    for key, value in data.items():
        key = key.replace("-", "_")
        if key not in known:
            raise ValueError(f"preset {name}: key {key!r} unknown; allowed: {', '.join(sorted(known))}")
        values[key] = tuple(value) if key in ("param", "validate") else value
    if "space" in values and not isinstance(values["space"], dict):
        raise ValueError(f"preset {name}: space must be a table of knob = values")
    return values


def preset_description(name: str) -> str:
    return str(_read_toml(PRESET_DIR / f"{name}.toml").get("description", ""))


def _read_toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ValueError("preset: reading TOML needs Python 3.11 or the package tomli") from None
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"preset: {path.name} is not valid TOML ({exc})") from None


def merge(explicit: dict, preset: dict | None) -> TuneConfig:
    """TuneConfig from the options given on the command line (`explicit`: only those the user
    gave) over the preset's values over the defaults; space tables merge knob by knob."""
    values = dict(preset or {})
    space = dict(values.get("space") or {})
    space.update(explicit.get("space") or {})
    values.update({k: v for k, v in explicit.items() if k != "space"})
    values["space"] = space
    return TuneConfig(**values)


__all__ = [
    "OBJECTIVES",
    "PROCESS_FIELDS",
    "SETTINGS_ATTR",
    "TuneConfig",
    "resume_config",
    "stored_settings_of",
    "check_study_name",
    "load_preset",
    "merge",
    "preset_description",
    "preset_names",
]

"""The outcome of a tuning run: the tuned table of SplitParams per batch-size bucket, with evidence.

This is the contract between `kvtune tune` (which writes it) and `kvtune export`, the dashboard
and `load_heuristic` (which read it). It is stored twice, identically:
- as `results/<run-id>/tuning.json` next to the run's manifest and measurements;
- in the Optuna storage, as the user attribute `kvtune_result` of each bucket's study
  (`<study>/<bucket>`), holding that bucket's `BucketResult.to_dict()`, and the attribute
  `kvtune_run` holding the run-level fields (everything in `TuningResult.to_dict()` but buckets).
Everything is plain JSON: numbers, strings, lists, dicts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kvtune.kernels.parametric import FIXED_CHUNK_RULE, PARAMETRIC_RULE, RULES, BucketedPolicy
from kvtune.kernels.plan import AttentionShape, SplitParams

TUNING_FILE = "tuning.json"
RESULT_ATTR = "kvtune_result"
RUN_ATTR = "kvtune_run"


@dataclass(frozen=True)
class CaseEvidence:
    """One case of a bucket: the tuned config's latency against every baseline's (microseconds).

    oracle_us: the best per-request split found by the exhaustive search (None when not run).
    """

    case_id: str
    batch_size: int
    tuned_us: float
    baselines_us: dict[str, float]
    oracle_us: float | None = None

    @property
    def best_baseline_us(self) -> float:
        return min(self.baselines_us.values())

    def to_dict(self) -> dict:
        return {
            "case_id": self.case_id,
            "batch_size": self.batch_size,
            "tuned_us": self.tuned_us,
            "baselines_us": dict(self.baselines_us),
            "oracle_us": self.oracle_us,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "CaseEvidence":
        return cls(d["case_id"], int(d["batch_size"]), float(d["tuned_us"]),
                   {k: float(v) for k, v in d["baselines_us"].items()},
                   None if d.get("oracle_us") is None else float(d["oracle_us"]))


@dataclass(frozen=True)
class Finalist:
    """A top config re-measured interleaved at the end: its score samples and their spread."""

    params: SplitParams
    score_median: float
    score_p10: float
    score_p90: float
    ctas: int
    chosen: bool = False
    family: str = ""  # "" = the run's rule; else the candidate's family (makespan, adaptive)
    max_chunk_tokens: int | None = None
    piece_cost_tokens: int | None = None

    def to_dict(self) -> dict:
        d = {"params": self.params.to_dict(), "score_median": self.score_median,
             "score_p10": self.score_p10, "score_p90": self.score_p90, "ctas": self.ctas,
             "chosen": self.chosen}
        if self.family:
            d["family"] = self.family
            d["max_chunk_tokens"] = self.max_chunk_tokens
            if self.piece_cost_tokens is not None:
                d["piece_cost_tokens"] = self.piece_cost_tokens
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Finalist":
        return cls(SplitParams(**d["params"]), float(d["score_median"]), float(d["score_p10"]),
                   float(d["score_p90"]), int(d["ctas"]), bool(d.get("chosen", False)),
                   d.get("family") or "", d.get("max_chunk_tokens"), d.get("piece_cost_tokens"))


@dataclass(frozen=True)
class BucketResult:
    """The tuned params of one batch-size bucket [min_batch, max_batch] and why they won.

    score: geometric mean over cases of tuned / best baseline latency (lower is better).
    worst: the largest such ratio over the cases. regret_geomean: tuned / oracle (None if no oracle).
    """

    name: str
    min_batch: int
    max_batch: int
    study_name: str
    params: SplitParams
    score: float
    worst: float
    n_trials: int
    cases: tuple[CaseEvidence, ...] = ()
    finalists: tuple[Finalist, ...] = ()
    regret_geomean: float | None = None
    pareto_front: tuple[dict, ...] = ()
    family: str = ""
    validation: dict | None = None
    max_chunk_tokens: int | None = None
    piece_cost_tokens: int | None = None

    @property
    def deferred(self) -> bool:
        return self.family == "defer"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "min_batch": self.min_batch,
            "max_batch": self.max_batch,
            "study_name": self.study_name,
            "params": self.params.to_dict(),
            "score": self.score,
            "worst": self.worst,
            "n_trials": self.n_trials,
            "cases": [c.to_dict() for c in self.cases],
            "finalists": [f.to_dict() for f in self.finalists],
            "regret_geomean": self.regret_geomean,
            "pareto_front": list(self.pareto_front),
            "family": self.family,
            "validation": self.validation,
            "max_chunk_tokens": self.max_chunk_tokens,
            "piece_cost_tokens": self.piece_cost_tokens,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "BucketResult":
        return cls(
            name=d["name"], min_batch=int(d["min_batch"]), max_batch=int(d["max_batch"]),
            study_name=d["study_name"], params=SplitParams(**d["params"]),
            score=float(d["score"]), worst=float(d["worst"]), n_trials=int(d["n_trials"]),
            cases=tuple(CaseEvidence.from_dict(c) for c in d.get("cases", [])),
            finalists=tuple(Finalist.from_dict(f) for f in d.get("finalists", [])),
            regret_geomean=d.get("regret_geomean"),
            pareto_front=tuple(d.get("pareto_front", [])),
            family=d.get("family") or "",
            validation=d.get("validation"),
            max_chunk_tokens=d.get("max_chunk_tokens"),
            piece_cost_tokens=d.get("piece_cost_tokens"),
        )


@dataclass(frozen=True)
class TuningResult:
    """A whole tuning run: buckets in batch order plus where and how it was tuned.

    device: DeviceSpec.to_dict() of the device planned for (live or model). shape:
    AttentionShape.to_dict(). kernel: what the latencies are of ("triton-splitkv",
    "flashinfer-tensor-core", or "simulated:<model>"). provenance: storage (credentials
    removed), suite, seeds, sampler, timer, cold/hot, versions, git commit, run id.
    rule: the split rule of the tuned table, one of kernels.parametric.RULES: "parametric"
    (default; a result written before the field existed is one) or "fixed-chunk" (tuned on a
    backend that runs one chunk per batch, e.g. flashinfer; studies/rules.py).
    """

    study: str
    buckets: tuple[BucketResult, ...]
    device: dict
    shape: dict
    kernel: str
    backend: str
    simulated: bool
    provenance: dict = field(default_factory=dict)
    rule: str = PARAMETRIC_RULE

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"rule: {self.rule!r} not allowed; allowed: {', '.join(RULES)}")

    def to_dict(self) -> dict:
        return {
            "study": self.study,
            "buckets": [b.to_dict() for b in self.buckets],
            "device": dict(self.device),
            "shape": dict(self.shape),
            "kernel": self.kernel,
            "backend": self.backend,
            "simulated": self.simulated,
            "provenance": dict(self.provenance),
            "rule": self.rule,
        }

    def run_fields(self) -> dict:
        d = self.to_dict()
        d.pop("buckets")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TuningResult":
        return cls(
            study=d["study"],
            buckets=tuple(BucketResult.from_dict(b) for b in d["buckets"]),
            device=dict(d["device"]), shape=dict(d["shape"]), kernel=d["kernel"],
            backend=d["backend"], simulated=bool(d["simulated"]),
            provenance=dict(d.get("provenance", {})),
            rule=d.get("rule", PARAMETRIC_RULE),
        )

    def bucket_table(self) -> list[tuple[int, int, SplitParams]]:
        """(min_batch, max_batch, params) in batch order: BucketedPolicy's buckets (its rule is
        `rule`; tuned_params / tuned_policy give both)."""
        return [(b.min_batch, b.max_batch, b.params) for b in sorted(self.buckets, key=lambda b: b.min_batch)]

    def tuned_params(self) -> dict:
        """The params of the tuned table: kernels.policies.get("tuned", **tuned_params())."""
        return {"buckets": [b.to_dict() for b in self.tuned_policy().buckets], "rule": self.rule}

    def tuned_policy(self) -> BucketedPolicy:
        """The tuned table as a Policy: the bucket table planned with the result's rule."""
        return BucketedPolicy(tuple((b.min_batch, b.max_batch, b.params, b.family, b.max_chunk_tokens,
                                     b.piece_cost_tokens)
                                    for b in sorted(self.buckets, key=lambda b: b.min_batch)),
                              rule=self.rule)


def save_tuning_result(run_dir: str | Path, result: TuningResult) -> Path:
    from kvtune.harness.store import atomic_write_json

    path = Path(run_dir) / TUNING_FILE
    atomic_write_json(path, result.to_dict())
    return path


MAX_TUNING_FILE_BYTES = 64 << 20
# A fixed-chunk table cuts a request of REFERENCE_KV_LEN_TOKENS into at most this many pieces
# (FlashInfer's split-KV buffers are sized for that; the search space's smallest chunk, 128
# tokens, gives exactly 1024 at 131,072 tokens).
MAX_FIXED_CHUNK_SPLITS = 1024
REFERENCE_KV_LEN_TOKENS = 131072


def check_tuning_dict(d, where: str = "tuning result") -> None:
    """ValueError naming the field for a tuning result (tuning.json, or a study's attributes)
    that cannot be used: a missing or mistyped field, a shape field missing, a bucket with
    min_batch > max_batch or outside 1..MAX_BATCH, a fixed-chunk chunk giving more than
    MAX_FIXED_CHUNK_SPLITS pieces per request."""
    from kvtune.kernels.plan import MAX_BATCH

    if not isinstance(d, dict):
        raise ValueError(f"{where}: the top level must be a JSON object")
    for key, kind in (("study", str), ("buckets", list), ("device", dict), ("shape", dict),
                      ("kernel", str), ("backend", str)):
        if not isinstance(d.get(key), kind):
            raise ValueError(f"{key}: {'missing' if key not in d else 'not a ' + kind.__name__}"
                             f" in the {where}")
    for key in ("num_qo_heads", "num_kv_heads", "head_dim", "page_size", "dtype"):
        if key not in d["shape"]:
            raise ValueError(f"shape.{key}: missing in the {where}")
    AttentionShape(**{k: d["shape"][k] for k in ("num_qo_heads", "num_kv_heads", "head_dim",
                                                 "page_size", "dtype")})
    if not d["buckets"]:
        raise ValueError(f"buckets: empty in the {where}")
    rule = d.get("rule", PARAMETRIC_RULE)
    for i, b in enumerate(d["buckets"]):
        if not isinstance(b, dict):
            raise ValueError(f"buckets[{i}]: not a JSON object")
        for key in ("min_batch", "max_batch"):
            v = b.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_BATCH:
                raise ValueError(f"buckets[{i}].{key}: {str(v)[:40]} out of range; allowed: 1..{MAX_BATCH}")
        if b["min_batch"] > b["max_batch"]:
            raise ValueError(f"buckets[{i}]: min_batch {b['min_batch']} > max_batch {b['max_batch']}; "
                             "allowed: min_batch <= max_batch")
        params = b.get("params")
        if not isinstance(params, dict):
            raise ValueError(f"buckets[{i}].params: missing or not a JSON object")
        if (b.get("family") or rule) == FIXED_CHUNK_RULE:  # a bucket's family replaces the rule
            check_fixed_chunk(params.get("min_tokens_per_cta"), d["shape"]["page_size"],
                              f"buckets[{i}].params.min_tokens_per_cta")


def check_fixed_chunk(min_tokens_per_cta, page_size: int, where: str) -> None:
    """ValueError when a fixed-chunk bucket's chunk would cut a request of
    REFERENCE_KV_LEN_TOKENS into more than MAX_FIXED_CHUNK_SPLITS pieces."""
    if isinstance(min_tokens_per_cta, bool) or not isinstance(min_tokens_per_cta, int) or min_tokens_per_cta < 1:
        raise ValueError(f"{where}: {str(min_tokens_per_cta)[:40]} is not a positive integer")
    chunk = -(-min_tokens_per_cta // page_size) * page_size
    splits = -(-REFERENCE_KV_LEN_TOKENS // chunk)
    if splits > MAX_FIXED_CHUNK_SPLITS:
        lowest = -(-REFERENCE_KV_LEN_TOKENS // MAX_FIXED_CHUNK_SPLITS)
        raise ValueError(f"{where}: a fixed chunk of {chunk} tokens cuts a {REFERENCE_KV_LEN_TOKENS}-token "
                         f"request into {splits} pieces; allowed: at most {MAX_FIXED_CHUNK_SPLITS} "
                         f"(a chunk of at least {lowest} tokens)")


def load_tuning_result(run_dir: str | Path) -> TuningResult:
    """The TuningResult of a run folder's tuning.json; ValueError (one line naming the file and
    the field) for a missing, unreadable, oversized, deeply nested or invalid file."""
    path = Path(run_dir) / TUNING_FILE
    if not path.is_file():
        raise ValueError(f"run: {run_dir} has no {TUNING_FILE} (not a finished tuning run)")
    try:
        size = path.stat().st_size
        if size > MAX_TUNING_FILE_BYTES:
            raise ValueError(f"run: {path} is {size} bytes; allowed: at most {MAX_TUNING_FILE_BYTES}")
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"run: cannot read {path} ({exc.strerror})") from None
    try:
        d = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"run: {path} is not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise ValueError(f"run: {path} is nested too deeply to be a tuning result") from None
    except ValueError as exc:  # JSON syntax, or an integer of thousands of digits
        raise ValueError(f"run: {path} is not valid JSON ({' '.join(str(exc).split())[:160]})") from None
    try:
        check_tuning_dict(d, TUNING_FILE)
        return TuningResult.from_dict(d)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"run: {path} is not a valid tuning result ({exc})") from None

"""The tuned heuristic as a versioned JSON file: build it from a finished tuning run, write it,
and load it back as a Policy.

A tuning run (studies/result.py: TuningResult) is read from its Optuna studies `<study>/<bucket>`
(user attributes `kvtune_result` and `kvtune_run`) or from `results/<run-id>/tuning.json`.
`build_heuristic` turns it into the file described in docs/EXPORT.md and checked by
studies/schemas/tuned_heuristic.schema.json; `load_heuristic` reads such a file defensively and
returns a policy that plans exactly like kernels.parametric.BucketedPolicy of its buckets and its
`rule` ("parametric", or "fixed-chunk" for a table tuned on a one-chunk backend such as
flashinfer; a 1.0 file has no `rule` and is "parametric").
The dependency-free planner a serving engine vendors is harness/tuned_planner.py
(`plan_splits` is re-exported here).

Buckets: the file's buckets cover batch sizes 1..max_batch without gaps. A study whose buckets
start above 1 or leave gaps is exported by extending its buckets the way BucketedPolicy's
nearest-bucket rule already plans such batches (the first bucket down to 1; a gap split at its
middle, a tie going to the smaller batches), so the file plans exactly as the study's table did;
each extension is recorded in that bucket's evidence `notes`. Overlapping study buckets are
refused.
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from kvtune.harness.device import model_for_gpu_name
from kvtune.harness.redact import redact_url
from kvtune.kernels import tuned_planner
from kvtune.kernels.parametric import FIXED_CHUNK_RULE, PARAMETRIC_RULE, BucketedPolicy
from kvtune.kernels.plan import (MAX_KV_LEN_TOKENS, SHAPE_FIELDS, AttentionShape, DeviceSpec,
                                 SplitParams, check_shape)
from kvtune.kernels.tuned_planner import (
    MAX_FILE_BYTES,
    check_document,
    check_schema_version,
    parse_document,
    plan_pieces,
    read_document,
)
from kvtune.studies.export_targets import DEFAULT_MAX_KV_LEN_TOKENS, build_targets
from kvtune.studies.result import (
    RESULT_ATTR,
    RUN_ATTR,
    BucketResult,
    TuningResult,
    check_fixed_chunk,
    check_tuning_dict,
    load_tuning_result,
)
from kvtune.studies.validation import REGRESSION_LIMIT  # an export past it is refused

# 1.1 added the top-level `rule` (a 1.0 file has none and is read as "parametric"); 1.2 per-bucket
# `family` and `max_chunk_tokens`, the evidence's `validation`, `allow_regression`; 1.3 the
# `hybrid` section; 1.4 the `makespan` family and its per-bucket `piece_cost_tokens`.
SCHEMA_VERSION = "1.4"
SCHEMA_RESOURCE = "schemas/tuned_heuristic.schema.json"
DEFAULT_STORAGE = "sqlite:///results/optuna.db"


# --------------------------------------------------------------------------- credentials


def _clean(value):
    """Plain JSON with credentials removed from every string and non-finite numbers as null."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) or hasattr(value, "__float__"):
        number = float(value)
        return number if math.isfinite(number) else None
    return str(value)


# --------------------------------------------------------------------------- reading a run


def open_storage(storage: str | None = None, journal: str | None = None):
    """(Optuna storage, its description with credentials removed) for --storage or --journal.

    Opening is studies.storage.open_storage's; export only refuses first what would make a new,
    empty store (a sqlite file or journal that does not exist is a wrong path, not a new study).
    """
    from kvtune.studies.storage import describe_storage
    from kvtune.studies.storage import open_storage as open_study_storage

    if storage and journal:
        raise ValueError("storage: give --storage URL or --journal FILE, not both")
    if journal and not Path(journal).is_file():
        raise ValueError(f"journal: {journal} does not exist")
    url = None if journal else (storage or DEFAULT_STORAGE)
    shown = describe_storage(url, journal)
    if url and url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):].split("?")[0]).is_file():
        raise ValueError(f"storage: {shown} does not exist (no tuning run has written it)")
    import optuna

    with warnings.catch_warnings():  # the RDB heartbeat is experimental in Optuna; export never runs trials
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return open_study_storage(url, journal), shown


def tuning_result_from_study(study: str, storage: str | None = None,
                             journal: str | None = None) -> tuple[TuningResult, dict]:
    """Rebuild the TuningResult of study `study` from its bucket studies `<study>/<bucket>`.

    Returns (result, source) where source says where it came from (credentials removed) and how
    many trials each bucket study holds. ValueError when no bucket study exists or one of them
    has not finished (no `kvtune_result` attribute).
    """
    import optuna

    if not study or "/" in study:
        raise ValueError(f"study: {study!r} is not a study name (give NAME, not NAME/<bucket>)")
    handle, shown = open_storage(storage, journal)
    try:
        summaries = optuna.get_all_study_summaries(handle, include_best_trial=False)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"storage: cannot read studies from {shown} ({type(exc).__name__})") from None
    mine = [s for s in summaries if s.study_name.startswith(f"{study}/")]
    if not mine:
        names = sorted({s.study_name.split("/")[0] for s in summaries})
        raise ValueError(f"study: no study named {study}/<bucket> in {shown}; "
                         f"found: {', '.join(names) if names else 'none'}")
    buckets, run, trials = [], None, {}
    for summary in mine:
        attrs = summary.user_attrs
        if RESULT_ATTR not in attrs:
            raise ValueError(f"study: {summary.study_name} has no {RESULT_ATTR} "
                             "(its tuning did not finish; resume it with `kvtune tune --resume`)")
        try:
            bucket = BucketResult.from_dict(attrs[RESULT_ATTR])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"study: {summary.study_name} holds a malformed {RESULT_ATTR} ({exc})") from None
        buckets.append(bucket)
        trials[summary.study_name] = int(summary.n_trials)
        this_run = attrs.get(RUN_ATTR)
        if run is not None and this_run is not None:
            # Hosts of one study measure slightly different bandwidths; the GPU model must agree.
            for key, get in (("shape", lambda r: r.get("shape")), ("kernel", lambda r: r.get("kernel")),
                             ("split rule", lambda r: r.get("rule", PARAMETRIC_RULE)),
                             ("device", lambda r: (r.get("device") or {}).get("name")),
                             ("SM count", lambda r: (r.get("device") or {}).get("sm_count"))):
                if get(this_run) != get(run):
                    raise ValueError(f"study: {summary.study_name} was tuned with another {key} than the "
                                     f"other {study}/<bucket> studies; export one run at a time (--run)")
        run = run or this_run
    if run is None:
        raise ValueError(f"study: none of the studies {study}/<bucket> holds {RUN_ATTR}")
    buckets.sort(key=lambda b: (b.min_batch, b.max_batch))  # batch order, as tuning.json keeps them
    try:
        whole = {**run, "study": study, "buckets": [b.to_dict() for b in buckets]}
        check_tuning_dict(whole, f"study {study}'s stored result")
        result = TuningResult.from_dict(whole)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"study: {study} holds a malformed {RUN_ATTR} ({exc})") from None
    return result, {"kind": "optuna-storage", "storage": shown, "storage_trials": trials}


def tuning_result_from_run(run_dir) -> tuple[TuningResult, dict]:
    """The TuningResult in `<run_dir>/tuning.json` and its source description."""
    result = load_tuning_result(run_dir)
    return result, {"kind": "run-dir", "run_dir": str(run_dir)}


# --------------------------------------------------------------------------- building the file


@dataclass(frozen=True)
class CoveredBucket:
    """A study bucket after extension to cover batch sizes 1..max (see the module docstring)."""

    min_batch: int
    max_batch: int
    result: BucketResult
    notes: tuple[str, ...] = field(default=())


def cover_buckets(buckets) -> list[CoveredBucket]:
    """Extend study buckets so they start at 1 and leave no gap; refuse overlaps."""
    ordered = sorted(buckets, key=lambda b: (b.min_batch, b.max_batch))
    if not ordered:
        raise ValueError("buckets: the tuning run has no bucket")
    for prev, cur in itertools.pairwise(ordered):
        if cur.min_batch <= prev.max_batch:
            raise ValueError(f"buckets: {prev.name} ({prev.min_batch}..{prev.max_batch}) and {cur.name} "
                             f"({cur.min_batch}..{cur.max_batch}) overlap; allowed: disjoint ranges")
    lows = [b.min_batch for b in ordered]
    highs = [b.max_batch for b in ordered]
    notes = [[] for _ in ordered]
    if lows[0] > 1:
        notes[0].append(f"extended from min_batch {lows[0]} down to 1: smaller batches were not tuned "
                        "and take the nearest bucket")
        lows[0] = 1
    for i in range(1, len(ordered)):
        if lows[i] > highs[i - 1] + 1:
            gap = f"{highs[i - 1] + 1}..{lows[i] - 1}"
            middle = (highs[i - 1] + lows[i]) // 2  # a tie goes to the smaller batches
            if middle > highs[i - 1]:
                notes[i - 1].append(f"extended max_batch from {highs[i - 1]} to {middle} to cover the "
                                    f"untuned batches {gap} (nearest bucket)")
                highs[i - 1] = middle
            if middle + 1 < lows[i]:
                notes[i].append(f"extended min_batch from {lows[i]} down to {middle + 1} to cover the "
                                f"untuned batches {gap} (nearest bucket)")
                lows[i] = middle + 1
    return [CoveredBucket(lo, hi, b, tuple(n)) for lo, hi, b, n in zip(lows, highs, ordered, notes)]


def _geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _positive(where: str, value) -> float:
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{where}: {value!r} is not a positive finite latency (microseconds)")
    return number


def bucket_evidence(bucket: CoveredBucket) -> dict:
    """Cases, latencies, speedups over each baseline, finalists' spread and regret of one bucket."""
    r = bucket.result
    where = f"buckets ({r.name})"
    cases, ratios, best, regrets = [], {}, [], []
    for case in r.cases:
        tuned = _positive(f"{where}: case {case.case_id} tuned_us", case.tuned_us)
        baselines = {k: _positive(f"{where}: case {case.case_id} {k}_us", v) for k, v in case.baselines_us.items()}
        for name, us in baselines.items():
            ratios.setdefault(name, []).append(us / tuned)
        if baselines:
            best.append(min(baselines.values()) / tuned)
        oracle = None if case.oracle_us is None else _positive(f"{where}: case {case.case_id} oracle_us", case.oracle_us)
        if oracle is not None:
            regrets.append(tuned / oracle)
        cases.append({"case_id": case.case_id, "batch_size": case.batch_size, "tuned_us": tuned,
                      "baselines_us": baselines, "oracle_us": oracle})
    speedup = {name: {"geomean": _geomean(v), "worst": min(v), "cases": len(v)} for name, v in sorted(ratios.items())}
    finalists = []
    for f in r.finalists:
        spread = (f.score_p90 - f.score_p10) / f.score_median if f.score_median > 0 else None
        finalists.append({"params": f.params.to_dict(), "score_median": f.score_median,
                          "score_p10": f.score_p10, "score_p90": f.score_p90, "spread": spread,
                          "ctas": f.ctas, "chosen": f.chosen,
                          **({"family": f.family, "max_chunk_tokens": f.max_chunk_tokens}
                             if f.family else {}),
                          **({"piece_cost_tokens": f.piece_cost_tokens}
                             if f.piece_cost_tokens is not None else {})})
    regret = None
    if regrets or r.regret_geomean is not None:
        regret = {"geomean": r.regret_geomean if r.regret_geomean is not None else _geomean(regrets),
                  "worst": max(regrets) if regrets else None, "cases": len(regrets)}
    return _clean({
        "min_batch": bucket.min_batch, "max_batch": bucket.max_batch,
        "tuned_min_batch": r.min_batch, "tuned_max_batch": r.max_batch,
        "name": r.name, "study_name": r.study_name, "n_trials": r.n_trials,
        "score": r.score, "worst": r.worst,
        "speedup": speedup,
        "speedup_over_best_baseline": ({"geomean": _geomean(best), "worst": min(best), "cases": len(best)}
                                       if best else None),
        "cases": cases, "finalists": finalists, "regret": regret,
        "pareto_front": list(r.pareto_front), "notes": list(bucket.notes),
        "family": r.family, "validation": r.validation,
        "regression": regression(r),
    })


def regression(r: BucketResult) -> dict | None:
    """The cases where what the bucket ships is slower than the engine default by more than
    REGRESSION_LIMIT on its validation cases, or None. A deferred bucket ships the default."""
    v = r.validation
    if r.deferred or not v:
        return None
    worse = [(c["case_id"], c["chosen_us"] / c["default_us"]) for c in v.get("case_list", [])
             if c["chosen_us"] > REGRESSION_LIMIT * c["default_us"]]
    if not worse:
        return None
    case, ratio = max(worse, key=lambda w: w[1])
    return {"cases": len(worse), "worst_case": case, "worst_ratio": ratio,
            "limit": REGRESSION_LIMIT, "source": v.get("source")}


def check_regressions(result: TuningResult, allow: bool) -> list[str]:
    """ValueError (one line naming the bucket and the numbers) for the first bucket whose
    validation is slower than the engine default by more than 2% on some case, unless `allow`;
    then the lines describing each such bucket."""
    lines = []
    for b in sorted(result.buckets, key=lambda b: b.min_batch):
        reg = regression(b)
        if reg is None:
            continue
        line = (f"bucket {b.name}: {reg['source']} case {reg['worst_case']} is "
                f"{reg['worst_ratio']:.3f}x the engine default's latency ({reg['cases']} case(s) over "
                f"{reg['limit']:.2f}x)")
        if not allow:
            raise ValueError(f"regression: {line}; re-tune with validation (the bucket then defers) "
                             "or pass --allow-regression")
        lines.append(line)
    return lines


def _pick(record: dict, *keys):
    """The first of `keys` found in the run's provenance or its nested environment/versions."""
    nested = [record] + [record[k] for k in ("environment", "versions") if isinstance(record.get(k), dict)]
    for key in keys:
        for source in nested:
            if source.get(key) is not None:
                return source[key]
    return None


def build_provenance(result: TuningResult, source: dict) -> dict:
    prov = dict(result.provenance)
    storage = source.get("storage") or _pick(prov, "storage")
    return _clean({
        "study": result.study,
        "study_names": [b.study_name for b in sorted(result.buckets, key=lambda b: b.min_batch)],
        "exported_from": source.get("kind", "tuning-result"),
        "storage": storage,
        "run_dir": source.get("run_dir"),
        "run_id": _pick(prov, "run_id"),
        "trials": sum(b.n_trials for b in result.buckets),
        "storage_trials": source.get("storage_trials"),
        "backend": result.backend,
        "suite": _pick(prov, "suite"),
        "seeds": _pick(prov, "seeds", "seed"),
        "sampler": _pick(prov, "sampler"),
        "objective": _pick(prov, "objective"),
        "timer": _pick(prov, "timer"),
        "cold_l2": _pick(prov, "cold_l2"),
        "torch_version": _pick(prov, "torch_version"),
        "triton_version": _pick(prov, "triton_version"),
        "driver_version": _pick(prov, "driver_version"),
        "git_commit": _pick(prov, "git_commit"),
        "run": prov,
    })


def device_section(result: TuningResult) -> dict:
    spec = DeviceSpec(**{k: result.device[k] for k in
                         ("name", "sm_count", "l2_bytes", "hbm_bytes_per_s", "max_ctas_per_sm", "live")
                         if k in result.device})
    measured = _pick(dict(result.provenance), "copy_bandwidth_bytes_per_s")
    if not result.simulated and measured:
        source = "measured"
    else:
        source = "simulated" if result.simulated else "datasheet"
    return _clean({
        "name": spec.name, "sm_count": spec.sm_count, "l2_bytes": spec.l2_bytes,
        "max_ctas_per_sm": spec.max_ctas_per_sm,
        "hbm_bytes_per_s": float(measured) if source == "measured" else spec.hbm_bytes_per_s,
        "hbm_bytes_per_s_source": source,
        "simulated": spec.name if result.simulated else None,
    }), spec


def kvtune_version() -> str:
    from kvtune.harness.environment import package_version

    return package_version("kvtune") or "unknown"


def build_heuristic(result: TuningResult, *, source: dict | None = None,
                    max_kv_len_tokens: int = DEFAULT_MAX_KV_LEN_TOKENS,
                    now: _dt.datetime | None = None, allow_regression: bool = False,
                    hybrid_path=None) -> dict:
    """The heuristic document (docs/EXPORT.md) of a finished tuning run; validated before return.

    max_kv_len_tokens: the longest request the engine targets are checked for, 1..1,048,576.
    allow_regression: export a bucket whose validation is > 2% slower than the engine default on
    some case (recorded in the file); without it that is a ValueError naming the bucket.
    hybrid_path: a hybrid_heuristic.json (`kvtune tune --suite hybrid`) of the same shape, written
    as the `hybrid` section (schema 1.3; kernels.tuned_planner.plan_hybrid plans with it).
    """
    from kvtune.kernels.policy_common import check_int

    check_int("max-kv-len", max_kv_len_tokens, 1, MAX_KV_LEN_TOKENS)
    source = source or {"kind": "tuning-result"}
    # Results stored before kv_dtype existed have none: their cache was of the query type.
    shape = AttentionShape(**{k: result.shape.get(k) for k in SHAPE_FIELDS})
    device, spec = device_section(result)
    regressions = check_regressions(result, allow_regression)
    covered = cover_buckets(result.buckets)
    table = [(b.min_batch, b.max_batch, b.result.params) for b in covered]
    now = now or _dt.datetime.now(_dt.timezone.utc)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": now.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kvtune_version": kvtune_version(),
        "device": device,
        "shape": shape.to_dict(),
        "kernel": result.kernel,
        "rule": result.rule,
        "buckets": [_bucket_entry(b) for b in covered],
        "evidence": [bucket_evidence(b) for b in covered],
        "provenance": build_provenance(result, source),
        "targets": build_targets(table, shape, spec, max_kv_len_tokens, rule=result.rule),
    }
    _family_targets(doc, covered)
    if hybrid_path is not None:
        doc["hybrid"] = hybrid_section(hybrid_path, doc["shape"])
    if regressions:
        doc["allow_regression"] = True
    validate_document(doc)
    return doc


def hybrid_section(path, shape: dict) -> dict:
    """The `hybrid` section of schema 1.3 from a hybrid_heuristic.json of `kvtune tune --suite
    hybrid`: its schema, buckets and bucket edges, each bucket's knobs checked by the
    hybrid-parametric policy. ValueError (one line, naming the field) for a file that is not
    one, or that was tuned for another attention shape than `shape` (the export's)."""
    from kvtune.kernels.hybrid_policies import HYBRID_SCHEMA, HybridParametricPolicy

    path = _regular_file(path, "hybrid")
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"hybrid: cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or str(doc.get("schema", "")).split("/")[0] != \
            HYBRID_SCHEMA.split("/")[0]:
        raise ValueError(f"hybrid: {path} is not a {HYBRID_SCHEMA} file")
    theirs = {k: doc.get("shape", {}).get(k) for k in ("num_qo_heads", "num_kv_heads", "head_dim",
                                                         "page_size")}
    ours = {k: shape.get(k) for k in theirs}
    if theirs != ours:
        raise ValueError(f"hybrid: {path} was tuned for shape {theirs}; this export's is {ours}")
    buckets = doc.get("buckets")
    deferred = doc.get("deferred_buckets", [])
    if not isinstance(buckets, list) or not isinstance(deferred, list) \
            or not (buckets or deferred):
        raise ValueError(f"hybrid: {path} has no buckets")
    out = []
    for i, b in enumerate(buckets):
        try:
            HybridParametricPolicy(**b["params"])
            edges = {k: int(b[k]) for k in ("min_decodes", "max_decodes", "min_prefill_tokens",
                                             "max_prefill_tokens")}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"hybrid: buckets[{i}]: {exc}") from None
        out.append({**edges, "params": dict(b["params"])})
    # Deferred buckets plan as the engine does; the section names them (edges and why) so a
    # reader sees that the engine's own planner runs there by evidence, not by omission.
    edge_keys = ("min_decodes", "max_decodes", "min_prefill_tokens", "max_prefill_tokens")
    try:
        held = [{**{k: int(b[k]) for k in edge_keys}, "reason": str(b.get("reason", ""))}
                for b in deferred]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"hybrid: deferred_buckets: {exc}") from None
    return {"schema": doc["schema"], "buckets": out, "deferred_buckets": held}


def _family_targets(doc: dict, covered) -> None:
    """A deferred or adaptive bucket's FlashInfer target: its params are not what it plans."""
    for i, b in enumerate(covered):
        family = b.result.family
        target = doc["targets"]["flashinfer"]["buckets"][i]
        entry = {"min_batch": target["min_batch"], "max_batch": target["max_batch"],
                 "workspace": target.get("workspace")}
        if family == "defer":
            target.clear()
            target.update(entry, expressible=True, disable_split_kv=False, fixed_split_size_pages=None,
                          note="deferred: FlashInfer's own planner (fixed_split_size=None / -1)")
        elif family in ("adaptive", "makespan"):
            target.clear()
            target.update(entry, expressible=True, disable_split_kv=False, fixed_split_size_pages=None,
                          note=f"{family}: fixed_split_size computed per batch at plan time "
                               "(kernels/tuned_planner.py: fixed_split_size)")


def _bucket_entry(b: CoveredBucket) -> dict:
    entry = {"min_batch": b.min_batch, "max_batch": b.max_batch, "params": b.result.params.to_dict()}
    if b.result.family:
        entry["family"] = b.result.family
    if b.result.max_chunk_tokens is not None:
        entry["max_chunk_tokens"] = b.result.max_chunk_tokens
    if b.result.piece_cost_tokens is not None:
        entry["piece_cost_tokens"] = b.result.piece_cost_tokens
    return entry


def heuristic_text(doc: dict) -> str:
    return json.dumps(doc, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_heuristic(doc: dict, path) -> Path:
    """Validate `doc`, then write it atomically to `path` (its folder must exist)."""
    from kvtune.harness.store import atomic_write_bytes

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"output: {path} is a folder; allowed: a file name (e.g. {path}/tuned.json)")
    if not path.parent.is_dir():
        raise ValueError(f"output: folder {path.parent} does not exist")
    if path.exists() and not path.is_file():
        raise ValueError(f"output: {path} is not a regular file")
    from kvtune.harness.store import check_output_dir

    check_output_dir(path.parent, field="output")
    text = heuristic_text(doc)
    validate_document(parse_document(text))  # exactly what a reader will see
    data = text.encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"output: the heuristic would be {len(data)} bytes; allowed: at most {MAX_FILE_BYTES}")
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise ValueError(f"output: cannot write {path} ({exc.strerror})") from None
    return path


# --------------------------------------------------------------------------- loading the file


@functools.lru_cache(maxsize=1)
def heuristic_schema() -> dict:
    """The JSON Schema shipped as package data (studies/schemas/tuned_heuristic.schema.json)."""
    from importlib.resources import files

    return json.loads(files("kvtune.studies").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = heuristic_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _path_text(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _schema_error_line(error) -> str:
    path = _path_text(error.absolute_path)
    join = (lambda key: f"{path}.{key}" if path else key)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [k for k in error.validator_value if k not in error.instance]
        return f"{join(missing[0])}: required field missing"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        return f"{join(extra[0])}: unknown field; allowed: {', '.join(sorted(allowed))}"
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    lo, hi = error.schema.get("minimum"), error.schema.get("maximum")
    if error.validator in ("minimum", "maximum", "exclusiveMinimum") and (lo is not None or hi is not None):
        message += f"; allowed: {lo if lo is not None else ''}..{hi if hi is not None else ''}"
    elif error.validator == "enum":
        message = f"{error.instance!r} not allowed; allowed: {', '.join(map(str, error.validator_value))}"
    return f"{path or 'heuristic'}: {message}"


def validate_document(doc) -> dict:
    """Full check of a parsed heuristic: major version, JSON Schema, coverage, evidence alignment."""
    import jsonschema

    if not isinstance(doc, dict):
        raise ValueError("heuristic: the top level must be a JSON object")
    check_schema_version(doc)  # before the schema: another major version has another schema
    error = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if error is not None:
        raise ValueError(_schema_error_line(error))
    check_document(doc)
    if len(doc["evidence"]) != len(doc["buckets"]):
        raise ValueError(f"evidence: {len(doc['evidence'])} entries for {len(doc['buckets'])} buckets; "
                         "allowed: one per bucket, in the same order")
    for i, (bucket, evidence) in enumerate(zip(doc["buckets"], doc["evidence"])):
        for key in ("min_batch", "max_batch"):
            if evidence[key] != bucket[key]:
                raise ValueError(f"evidence[{i}].{key}: {evidence[key]} does not match "
                                 f"buckets[{i}].{key} {bucket[key]}")
    return doc


@dataclass(frozen=True, eq=False)
class TunedHeuristic:
    """A loaded heuristic file as a Policy (registry name `tuned`).

    Plans exactly like BucketedPolicy(buckets, rule) (whose plan notes name the bucket used, its
    batch range and the rule) and refuses a shape other than the file's; the notes also name the
    file and the device it was tuned on.
    document: the validated JSON; source: the file it came from.
    """

    policy: BucketedPolicy
    shape: AttentionShape
    document: dict
    source: str
    name: ClassVar[str] = "tuned"

    def params(self) -> dict:
        return self.policy.params()

    def plan(self, kv_lens, shape: AttentionShape, device: DeviceSpec):
        check_shape(self.document["shape"], shape)
        plan = self.policy.plan(kv_lens, shape, device)
        tuned_on = self.document["device"]["name"]
        plan.notes.update(
            heuristic=self.source,
            tuned_on=tuned_on if same_card(device.name, tuned_on)
            else f"{tuned_on} (planning for {device.name})",
            tuned_kernel=tuned_kernel(self.document),
        )
        if plan.batch_size > self.policy.buckets[-1].max_batch:
            plan.notes["above_tuned_batches"] = True  # the last bucket, extrapolated
        return plan


def tuned_kernel(doc: dict) -> str:
    """"<backend>:<decode kernel hash>" of the run a heuristic document was tuned in
    (provenance.backend, provenance.run.decode_kernel_sha256: kernels/fingerprint.py), with
    "unrecorded" for a file from before the hash was recorded."""
    prov = doc.get("provenance") or {}
    run = prov.get("run") or {}
    return f"{prov.get('backend') or 'unknown'}:{run.get('decode_kernel_sha256') or 'unrecorded'}"


def same_card(a: str, b: str) -> bool:
    """Whether two device names name one card: equal ignoring case, or the same simulator preset
    ("NVIDIA H200" and the preset "h200"; harness.device.model_for_gpu_name)."""
    if a.strip().lower() == b.strip().lower():
        return True
    preset = model_for_gpu_name(a)
    return preset is not None and preset is model_for_gpu_name(b)


def _regular_file(path, field: str):
    """`path` when it is a readable regular file; ValueError naming `field` otherwise. A FIFO,
    a device or a folder is refused from its stat, never opened (opening a FIFO blocks)."""
    import stat as stat_module

    try:
        st = os.stat(path)
    except OSError as exc:
        raise ValueError(f"{field}: cannot read {os.fspath(path)!r} ({exc.strerror})") from None
    if stat_module.S_ISDIR(st.st_mode):
        raise ValueError(f"{field}: {os.fspath(path)!r} is a folder; allowed: a JSON file")
    if not stat_module.S_ISREG(st.st_mode):
        raise ValueError(f"{field}: {os.fspath(path)!r} is not a regular file (a FIFO, socket or "
                         "device); allowed: a JSON file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"{field}: cannot read {os.fspath(path)!r} ({exc.strerror})") from None
    return path


def load_heuristic(path, *, shape=None, dtype: str | None = None) -> TunedHeuristic:
    """Read, validate and return the heuristic in `path` as a Policy (its buckets planned with
    the file's `rule`; "parametric" when absent, as in schema 1.0).

    shape: an AttentionShape (or its dict) the caller will plan for; dtype: "bf16"/"fp16". A
    mismatch with the file's shape is a ValueError naming the field. Also refused, each with a
    one-line ValueError naming the field: a file over 1 MB (without reading it), JSON nested
    deeper than 32 levels, NaN/Infinity, duplicate keys, an unknown major schema_version, a
    schema violation (wrong type, missing field, value out of range), buckets that do not start
    at 1 or that overlap or leave a gap, and evidence that does not match the buckets.
    """
    doc = read_document(_regular_file(path, "heuristic"))
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if isinstance(schema, str) and schema.startswith(tuned_planner.HYBRID_SCHEMA_PREFIX):
        # A `kvtune tune --suite hybrid` file plans hybrid batches, through its own policy.
        raise ValueError(f"heuristic: {os.fspath(path)!r} is a hybrid heuristic ({schema}), not a "
                         f"decode heuristic; use --policy hybrid-tuned:path={os.fspath(path)} "
                         "(with --q-lens for `kvtune plan`)")
    doc = validate_document(doc)
    check_shape(doc["shape"], shape, dtype)
    for i, b in enumerate(doc["buckets"]):  # a bucket's own family replaces the table's rule
        if (b.get("family") or doc.get("rule")) == FIXED_CHUNK_RULE:
            check_fixed_chunk(b["params"]["min_tokens_per_cta"], doc["shape"]["page_size"],
                              f"buckets[{i}].params.min_tokens_per_cta")
    buckets = [(b["min_batch"], b["max_batch"], SplitParams(**b["params"]), b.get("family", ""),
                b.get("max_chunk_tokens"), b.get("piece_cost_tokens")) for b in doc["buckets"]]
    rule = doc.get("rule", PARAMETRIC_RULE)  # 1.0 files have no rule: they are parametric
    return TunedHeuristic(BucketedPolicy(tuple(buckets), rule=rule), AttentionShape(**doc["shape"]),
                          doc, os.fspath(path))


def plan_splits(heuristic, kv_lens, num_sms: int, *, max_ctas_per_sm: int | None = None):
    """Pieces per request under a heuristic (a TunedHeuristic, a document or a path); numpy only.

    The implementation is kernels.tuned_planner.plan_splits, which a serving engine can vendor.
    """
    return plan_pieces(heuristic, kv_lens, num_sms, max_ctas_per_sm=max_ctas_per_sm).splits


__all__ = [
    "DEFAULT_STORAGE",
    "SCHEMA_VERSION",
    "TunedHeuristic",
    "bucket_evidence",
    "build_heuristic",
    "cover_buckets",
    "heuristic_text",
    "load_heuristic",
    "plan_splits",
    "redact_url",
    "same_card",
    "tuned_kernel",
    "tuned_planner",
    "tuning_result_from_run",
    "tuning_result_from_study",
    "validate_document",
    "write_heuristic",
]

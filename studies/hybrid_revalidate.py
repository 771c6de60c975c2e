"""Re-validate a tuned hybrid file against today's serial step, without searching again.

A hybrid_heuristic.json (studies/hybrid_tune.py) ships a bucket because its knobs beat the
engine's serial step on held-out cases *with the kernels of that day*. When the kernels change
(a faster prefill tile makes the serial step faster, not the co-located one), a shipped bucket
can fall behind serial: on an H100 the thirteenth session's file, validated at 1.05-1.32x over
serial, ran 0.93x of the serial step on a 3,072-token chunk beside 21 decodes once the serial
step's prefill took the Gluon tile (docs/PERFORMANCE.md, twentieth session, call 3).

`kvtune tune --revalidate FILE` measures every shipped bucket's knobs against `hybrid-serial` on
validation cases, interleaved over --finalist-rounds rounds, with the tune's own ship-or-defer
rule (studies/hybrid_validation.py validate_bucket). A bucket that fails now defers (its knobs
move to `tuned_params`, the reason says "revalidation"); one that passes keeps its knobs with the
new measurement. Deferred buckets stay deferred (re-searching them is a tune's job). The new
file is written next to the run's rows; FILE itself is never changed.

`--split-failing`: a bucket that fails is split once at a prefill-token edge fixed in advance
(split_edge: the largest power of two below its top, 1025-4096 -> 1025-2048 and 2049-4096), and
each half ships or defers by the same rule on the rows of its own cases, from the same
measurements (a half no case falls in defers). Why: a bucket can lose on long chunks only (the
case above) while winning 1.3-2.4x below them; the halves have fewer cases each, so check the
result on batches no suite holds before relying on it.

`--serial-fallback`: every bucket that defers after this run (the file's deferred buckets, the
ones this run defers, failing halves) is measured once more as a serial step that splits its
decodes by the makespan rule over its own decode knobs (studies/hybrid_validation.py
serial_fallback_knobs: hybrid-serial's prefill launch; the engine's chunk unless another is
modelled clearly faster), on the same cases and by the same rule; it ships where that passes
(its entry names the co-located knobs it replaces under `fallback_from`), else it stays deferred
with the fallback's verdict beside it. `--keep-shipped` keeps FILE's shipped buckets as they
are, unmeasured (for a file re-validated with today's kernels already), so a run can spend its
time on the deferred ones.

Which cases: by default the ones each bucket's last validation measured (their ids in the file,
rebuilt from the hybrid suites, which are deterministic); with `--validate SPEC ...` the cases of
those hybrid suites that fall in the bucket instead. The file must have been tuned on the same
device name and backend as this run measures (a bucket decided on an H100 is no decision for an
H200), and its shape is the run's shape.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kvtune.studies.hybrid_validation import (bucket_key, check_serial_fallback,
                                              decided_entry, in_bucket, overall_summary,
                                              split_verdicts, validate_bucket)


def load_hybrid_file(path: str) -> dict:
    """The parsed hybrid_heuristic.json; ValueError naming `revalidate` for an unreadable file or
    another kind of file."""
    from kvtune.kernels.hybrid_policies import HYBRID_SCHEMA

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"revalidate: cannot read {path!r}: {exc}") from None
    if not isinstance(doc, dict) or \
            str(doc.get("schema", "")).split("/")[0] != HYBRID_SCHEMA.split("/")[0]:
        raise ValueError(f"revalidate: {path!r} is not a {HYBRID_SCHEMA} file (kvtune tune "
                         "--suite hybrid writes one)")
    for key in ("shape", "buckets", "deferred_buckets"):
        if key not in doc:
            raise ValueError(f"revalidate: {path!r} has no {key!r}")
    return doc


def recorded_cases(entry: dict, index: dict) -> list:
    """The Case objects of the ids the bucket's last validation measured; ValueError naming the
    first id no hybrid suite holds (a file from a kvtune whose suites differ)."""
    ids = [r["case_id"] for r in ((entry.get("validation") or {}).get("cases") or [])]
    missing = [i for i in ids if i not in index]
    if missing:
        raise ValueError(f"revalidate: case {missing[0]!r} of bucket {bucket_name(entry)} is in "
                         "no hybrid suite of this kvtune; pass --validate SUITE")
    return [index[i] for i in ids]


def bucket_name(entry: dict) -> str:
    """The tune's label of a file's bucket (hybrid_tune.bucket_name), also in the rows."""
    from kvtune.studies.hybrid_tune import bucket_name as label

    return label(bucket_key(entry))


def revalidated_entry(entry: dict, verdict: dict) -> dict:
    """The bucket after its new check (hybrid_validation.decided_entry), marked `revalidated`;
    a deferred one's reason starts "revalidation: "."""
    return {**decided_entry(entry, verdict, "revalidation: "), "revalidated": True}


def split_bucket(entry: dict, verdict: dict, cases) -> list[dict]:
    """The two halves of a bucket whose knobs failed `verdict` (studies/hybrid_validation.py
    split_verdicts), each labelled as a re-validation's decision; [] where it cannot split."""
    return [revalidated_entry(half, v) for half, v in split_verdicts(entry, verdict, cases)]


def bucket_cases(entry: dict, chosen, index: dict) -> list:
    """The Case objects a bucket is measured on: the given suites' cases that fall in it, or
    the ones its last validation measured."""
    key = bucket_key(entry)
    return ([c for c in chosen if in_bucket(key, c.batch())] if chosen is not None
            else recorded_cases(entry, index))


def run_hybrid_revalidation(path: str, settings, command: str = "") -> dict:
    """Re-measure FILE's shipped buckets (module docstring) with settings' backend, timer,
    stopping rule, --validate specs, finalist_rounds and split_failing (a HybridTuneSettings);
    returns the new document (also written under settings.out, with the rows), its path under
    "path"."""
    from kvtune.harness.backends.select import check_choices, open_backend
    from kvtune.harness.runner import CaseRun, Runner
    from kvtune.harness.store import RunWriter
    from kvtune.kernels import policies
    from kvtune.kernels.plan import AttentionShape
    from kvtune.studies.hybrid_tune import BASELINE
    from kvtune.studies.hybrid_validation import validation_cases
    from kvtune.studies.records import RowRecorder, finish_complete, finish_failed
    from kvtune.workloads.hybrid import HYBRID_SUITES
    from kvtune.workloads.suites import get_suite

    doc = load_hybrid_file(path)
    shape = AttentionShape(**doc["shape"])
    m = settings.measure
    check_choices(m.backend, m.device_model, m.timer, m.stopping)
    if settings.validate:  # the given suites' cases, whichever bucket they fall in
        chosen, _ = validation_cases(settings.validate, shape, ())
        # Not "held out": the file does not say which cases its search trained on, so the given
        # suites may hold some of them.
        how = (f"--validate {' '.join(settings.validate)} ({len(chosen)} cases, training "
               "cases of the file's search possibly among them)")
    else:
        chosen, how = None, "the cases each bucket's last validation measured"
    index = {c.case_id: c for name in HYBRID_SUITES for c in get_suite(name, shape=shape).cases}
    plans = [] if settings.keep_shipped else [
        (entry, [CaseRun(c.case_id, c.batch()) for c in bucket_cases(entry, chosen, index)])
        for entry in doc["buckets"]]
    opened = open_backend(m.backend, device_model_name=m.device_model, timer=m.timer,
                          cold_l2=not m.warm_l2, stopping=m.stopping)
    try:
        tuned_on = ((doc.get("device") or {}).get("name"), doc.get("backend"))
        here = (opened.device.name, opened.backend.name)
        if tuned_on != here:
            raise ValueError(f"revalidate: {path} was tuned on {tuned_on[0]} with the "
                             f"{tuned_on[1]} backend; this run measures {here[0]} with "
                             f"{here[1]} (a bucket decided on one card is no decision for "
                             "another)")
        print(f"kvtune tune --revalidate: {opened.notice}", file=sys.stderr)
        print(f"kvtune tune --revalidate: validation: {how}", file=sys.stderr)
        manifest = {"kind": "tune-hybrid", "command": command, "study": settings.study,
                    "revalidate": str(path), "validation_how": how,
                    "backend": opened.backend.name, "device": opened.device.to_dict(),
                    "simulated": not opened.device.live, "shape": shape.to_dict(),
                    "finalist_rounds": settings.finalist_rounds,
                    "serial_fallback": settings.serial_fallback,
                    "keep_shipped": settings.keep_shipped}
        writer = RunWriter.create(settings.out, manifest, kind="tune")
        recorder = RowRecorder(writer.root)
        runner = Runner(opened.backend, opened.device, opened.ceiling_bytes_per_s,
                        run_id=writer.run_id)
        serial = policies.get(BASELINE)
        shipped = [dict(b) for b in doc["buckets"]] if settings.keep_shipped else []
        deferred = [dict(b) for b in doc["deferred_buckets"]]
        measured_ids = []
        source = {"path": str(path), "run_id": doc.get("run_id"), "study": doc.get("study"),
                  "command": command}

        def save_partial(unfinished: list) -> None:
            """What is decided so far, on disk before the next bucket (a run stopped by a time
            limit keeps it); the unchecked buckets are listed, not shipped. It names FILE as the
            finished file does (a partial file re-validated in turn keeps the chain)."""
            partial = {**doc, "study": settings.study, "run_id": writer.run_id,
                       "buckets": shipped, "deferred_buckets": deferred,
                       "unfinished_buckets": unfinished, "revalidated_from": source}
            tmp = writer.root / "hybrid_heuristic.partial.tmp"
            tmp.write_text(json.dumps(partial, indent=1, default=float))
            tmp.replace(writer.root / "hybrid_heuristic.partial.json")

        def try_serial_fallback(entry: dict) -> dict:
            """--serial-fallback for one deferred bucket (check_serial_fallback); unchanged
            where its knobs already are a serial step or no case falls in it."""
            name = bucket_name(entry)
            cases = [CaseRun(c.case_id, c.batch()) for c in bucket_cases(entry, chosen, index)]
            new, verdict = check_serial_fallback(
                entry, cases, runner, serial, recorder, study=settings.study, bucket=name,
                rounds=settings.finalist_rounds, source="revalidation",
                reason_prefix="revalidation: ")
            if verdict is None:
                return entry
            recorder.flush()
            measured_ids.extend(c.case_id for c in cases)
            t = verdict["tuned_vs_serial"]
            print(f"bucket {name}, serial fallback: "
                  f"{'defers' if verdict['deferred'] else 'ships'}: x{t['geomean']:.3f} over "
                  f"serial on {len(cases)} cases, worst x{t['worst']:.3f} ({verdict['reason']})",
                  file=sys.stderr)
            return new if verdict["deferred"] else {**new, "revalidated": True}
        try:
            for i, (entry, cases) in enumerate(plans):
                name = bucket_name(entry)
                if not cases:
                    shipped.append({**entry, "revalidated": False,
                                    "reason": "revalidation: no case of the given suites falls "
                                              "in this bucket; kept as it was"})
                    print(f"bucket {name}: no case to measure, kept", file=sys.stderr)
                    continue
                verdict = validate_bucket(runner, cases,
                                          policies.get("hybrid-parametric", **entry["params"]),
                                          serial, recorder, study=settings.study,
                                          bucket=name, rounds=settings.finalist_rounds,
                                          source="revalidation")
                recorder.flush()
                measured_ids += [c.case_id for c in cases]
                t = verdict["tuned_vs_serial"]
                print(f"bucket {name}: {'defers' if verdict['deferred'] else 'ships'}: "
                      f"x{t['geomean']:.3f} over serial on {len(cases)} cases, worst "
                      f"x{t['worst']:.3f} ({verdict['reason']})", file=sys.stderr)
                # --split-failing: a bucket that failed as a whole is replaced by its two
                # halves, each decided on its own cases' rows (split_bucket).
                parts = split_bucket(entry, verdict, cases) \
                    if verdict["deferred"] and settings.split_failing else []
                for new in parts or [revalidated_entry(entry, verdict)]:
                    (deferred if new["validation"]["deferred"] else shipped).append(new)
                    if parts:
                        print(f"  half {bucket_name(new)}: "
                              f"{'defers' if new['validation']['deferred'] else 'ships'} "
                              f"({new['validation']['reason']})", file=sys.stderr)
                save_partial([bucket_name(e) for e, _ in plans[i + 1:]])
            if settings.serial_fallback:
                for entry in list(deferred):
                    new = try_serial_fallback(entry)
                    pos = next(k for k, e in enumerate(deferred) if e is entry)
                    if "params" in new:  # shipped by its fallback
                        del deferred[pos]
                        shipped.append(new)
                    else:
                        deferred[pos] = new
                    save_partial([])
        except BaseException as exc:
            finish_failed(writer, recorder, exc)
            raise
    finally:
        opened.backend.close()
    out = {**doc, "study": settings.study, "run_id": writer.run_id, "buckets": shipped,
           "deferred_buckets": deferred,
           "validation": overall_summary(shipped, deferred, how, measured_ids, []),
           "revalidated_from": source}
    target = writer.root / "hybrid_heuristic.json"
    target.write_text(json.dumps(out, indent=1, default=float))
    (writer.root / "hybrid_heuristic.partial.json").unlink(missing_ok=True)
    finish_complete(writer, recorder)
    out["path"] = str(target)
    return out


__all__ = ["bucket_cases", "load_hybrid_file", "revalidated_entry", "run_hybrid_revalidation",
           "split_bucket"]

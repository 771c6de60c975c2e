"""`kvtune tune --suite hybrid` (or `--distribution hybrid`): the hybrid knobs per (decodes,
prefill tokens) bucket, by studies/hybrid_tune.py. kvtune/cli/tune.py hands such runs here, and
`kvtune tune --revalidate FILE` (studies/hybrid_revalidate.py: a finished file's shipped buckets
measured again against the serial step, no search).

Options of `kvtune tune` that belong to the split-knob study (buckets, sampler, objective,
space, oracle, storage, ...) are not used by this search and are refused (one line, exit 2).
"""

from __future__ import annotations

import argparse
import sys

USED = {"study", "suite", "distribution", "batch_sizes", "param", "seeds", "shape", "page_size",
        "dtype", "q_len", "num_qo_heads", "num_kv_heads", "head_dim", "backend", "device_model",
        "timer", "warm_l2", "stopping", "trials", "seed", "out", "no_progress", "validate",
        "finalist_rounds", "finalists", "resume", "revalidate", "split_failing",
        "serial_fallback"}
# What a re-validation reads: the file holds the shape and the buckets, so the case and search
# options would be ignored, and are refused instead.
REVALIDATE_USED = {"study", "backend", "device_model", "timer", "warm_l2", "stopping", "out",
                   "no_progress", "validate", "finalist_rounds", "revalidate", "split_failing",
                   "serial_fallback", "keep_shipped"}


def wants_hybrid(args: argparse.Namespace) -> bool:
    from kvtune.workloads.hybrid import DISTRIBUTION, HYBRID_SUITES

    return (getattr(args, "suite", None) in HYBRID_SUITES
            or getattr(args, "distribution", None) == DISTRIBUTION
            or getattr(args, "revalidate", None) is not None)


def run(args: argparse.Namespace) -> int:
    from kvtune.harness.bench import DEFAULT_RESULTS_DIR, BackendSettings
    from kvtune.studies.hybrid_tune import HybridTuneSettings, run_hybrid_tune
    from kvtune.workloads.selection import CaseSettings

    given = {k for k in vars(args) if k not in ("handler", "command", "command_line")}
    revalidate = getattr(args, "revalidate", None)
    refused = sorted(given - (REVALIDATE_USED if revalidate is not None else USED))
    if refused:
        what = ("re-validating a hybrid file (--revalidate: its shape and buckets come from the "
                "file)" if revalidate is not None
                else "tuning hybrid knobs (--suite/--distribution hybrid)")
        raise ValueError(f"tune: option --{refused[0].replace('_', '-')} is not used when {what}")
    g = lambda k, d=None: getattr(args, k, d)  # noqa: E731 - absent options are suppressed
    cases = CaseSettings(suite=g("suite"), distribution=g("distribution"),
                         batch_sizes=g("batch_sizes"), params=tuple(g("param") or ()),
                         seeds=g("seeds", "0"), shape=g("shape"), page_size=g("page_size"),
                         dtype=g("dtype"), num_qo_heads=g("num_qo_heads"),
                         num_kv_heads=g("num_kv_heads"), head_dim=g("head_dim"), q_len=g("q_len"))
    measure = BackendSettings(backend=g("backend", "auto"), device_model=g("device_model"),
                              timer=g("timer", "auto"), warm_l2=bool(g("warm_l2", False)),
                              stopping=g("stopping"))
    settings = HybridTuneSettings(cases=cases, measure=measure, trials=g("trials", 24),
                                  seed=g("seed", 0), out=g("out", DEFAULT_RESULTS_DIR),
                                  progress=not g("no_progress", False), study=args.study,
                                  validate=tuple(g("validate", ()) or ()),
                                  finalist_rounds=g("finalist_rounds", 3),
                                  finalists=g("finalists", 2),
                                  resume=bool(g("resume", False)),
                                  split_failing=bool(g("split_failing", False)),
                                  serial_fallback=bool(g("serial_fallback", False)),
                                  keep_shipped=bool(g("keep_shipped", False)))
    if revalidate is not None:
        from kvtune.studies.hybrid_revalidate import run_hybrid_revalidation

        doc = run_hybrid_revalidation(revalidate, settings,
                                      command=getattr(args, "command_line", ""))
    else:
        doc = run_hybrid_tune(settings, command=getattr(args, "command_line", ""))
    print(f"hybrid heuristic: {doc['path']}")
    for b in doc["buckets"]:
        v = b["validation"]["tuned_vs_serial"]
        # A bucket shipped by --serial-fallback was never searched as that serial step.
        how = (f"training {b['score_vs_serial']:.3f} x serial" if "score_vs_serial" in b
               else "serial fallback")
        print(f"  decodes {b['min_decodes']}-{b['max_decodes']}, prefill tokens "
              f"{b['min_prefill_tokens']}-{b['max_prefill_tokens']}: ships, "
              f"x{v['geomean']:.3f} over serial on {b['validation']['source']} cases (worst "
              f"x{v['worst']:.3f}); {how}  {b['params']}")
    for b in doc["deferred_buckets"]:
        print(f"  decodes {b['min_decodes']}-{b['max_decodes']}, prefill tokens "
              f"{b['min_prefill_tokens']}-{b['max_prefill_tokens']}: defers to serial "
              f"({b['reason']})")
    v = doc["validation"]
    s, m = v["speedup_vs_serial"], v["shipped_speedup_vs_serial"]
    checked = "re-validated" if doc.get("revalidated_from") else "held out"
    if s["geomean"] is not None:
        print(f"{checked} ({v['cases']} cases; serial where a bucket defers or none holds the "
              f"batch): x{s['geomean']:.3f} over serial in geomean, worst x{s['worst']:.3f} "
              f"({s['worst_case']})")
    if m["geomean"] is not None:
        print(f"  of which {v['shipped_cases']} in shipped buckets: x{m['geomean']:.3f}, worst "
              f"x{m['worst']:.3f} ({m['worst_case']})")
    print(f"use: kvtune bench --suite hybrid --policies hybrid-tuned:path={doc['path']}",
          file=sys.stderr)
    return 0


__all__ = ["run", "wants_hybrid"]

"""`kvtune export`: write the tuned heuristic of a finished tuning run as versioned JSON.

    kvtune export --study NAME [--storage URL | --journal FILE] -o tuned.json
    kvtune export --run results/<run-id> -o tuned.json

Everything is read and validated before the output file is written (atomically, so a failed
export never leaves a half-written file). The format is docs/EXPORT.md.
"""

from __future__ import annotations



def add_parser(sub) -> None:
    from kvtune.studies.export import DEFAULT_STORAGE
    from kvtune.studies.export_targets import DEFAULT_MAX_KV_LEN_TOKENS

    from kvtune.cli.common import add_command

    p = add_command(sub, "export", "write a finished tuning run's heuristic as versioned JSON", [
        "kvtune export --study demo -o tuned.json",
        "kvtune export --run results/<run-id> -o tuned.json",
    ], "Read a finished study (or a tuning run's tuning.json), check it, and write the tuned "
       "heuristic with its evidence and engine targets (docs/EXPORT.md).")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--study", help="study name NAME (its bucket studies are NAME/<bucket>)")
    source.add_argument("--run", help="a tuning run folder results/<run-id> (reads its tuning.json)")
    p.add_argument("--storage", help=f"Optuna storage URL with --study (default {DEFAULT_STORAGE})")
    p.add_argument("--journal", help="Optuna journal file with --study, instead of --storage")
    p.add_argument("-o", "--output", required=True, help="the JSON file to write")
    p.add_argument("--max-kv-len", type=int, default=DEFAULT_MAX_KV_LEN_TOKENS,
                   help="longest request (tokens) the FlashInfer/trtllm-gen translations are checked "
                        f"for (default {DEFAULT_MAX_KV_LEN_TOKENS})")
    p.add_argument("--allow-regression", action="store_true",
                   help="export even a bucket whose validation is more than 2%% slower than the "
                        "engine's own planner on some case (the file records it)")
    p.add_argument("--hybrid", metavar="FILE",
                   help="also write the hybrid knobs of a `kvtune tune --suite hybrid` run "
                        "(its hybrid_heuristic.json, same shape) as the file's hybrid section")
    p.set_defaults(handler=run_export)


def run_export(args) -> int:
    from kvtune.studies import export

    if args.run and (args.storage or args.journal):
        raise ValueError("storage: --storage and --journal go with --study, not --run")
    if args.study:
        result, source = export.tuning_result_from_study(args.study, args.storage, args.journal)
    else:
        result, source = export.tuning_result_from_run(args.run)
    doc = export.build_heuristic(result, source=source, max_kv_len_tokens=args.max_kv_len,
                                 allow_regression=args.allow_regression, hybrid_path=args.hybrid)
    path = export.write_heuristic(doc, args.output)
    for line in summary_lines(doc):
        print(line)
    print(f"wrote {path}")
    return 0


def summary_lines(doc: dict) -> list[str]:
    """A few lines a person reads after an export: buckets, params, evidence, targets."""
    device = doc["device"]
    label = f"simulated ({device['simulated']})" if device["simulated"] else f"measured on {device['name']}"
    prov = doc["provenance"]
    where = prov.get("storage") or prov.get("run_dir") or "a tuning result"
    lines = [f"kvtune export: study {prov['study']} from {where}, {label}, kernel {doc['kernel']}"]
    flashinfer = doc["targets"]["flashinfer"]["buckets"]
    trtllm = doc["targets"]["trtllm_gen"]["buckets"]
    for bucket, evidence, fi, tr in zip(doc["buckets"], doc["evidence"], flashinfer, trtllm):
        p = bucket["params"]
        knobs = " ".join(f"{k}={p[k]}" for k in ("min_tokens_per_cta", "max_waves", "max_splits",
                                                  "ctas_per_sm", "schedule"))
        best = evidence.get("speedup_over_best_baseline")
        speed = (f"x{best['geomean']:.2f} over the best baseline (worst x{best['worst']:.2f})"
                 if best else "no cases recorded")
        if not fi["expressible"]:
            fi_text = "not expressible"
        elif fi["disable_split_kv"]:
            fi_text = "disable_split_kv"
        elif fi.get("fixed_split_size_pages") is None:
            fi_text = "its own planner" if bucket.get("family") == "defer" else "fixed_split_size per batch"
        else:
            fi_text = f"fixed_split_size={fi['fixed_split_size_pages']} pages"
        tr_text = "env" if tr["expressible"] else "not expressible"
        if bucket.get("family") == "defer":
            knobs = "defer (the engine's own planner)"
        elif bucket.get("family"):
            knobs = f"{bucket['family']}: {knobs}"
        lines.append(f"  batch {bucket['min_batch']}..{bucket['max_batch']}: {knobs}; {speed}; "
                     f"flashinfer: {fi_text}; trtllm-gen: {tr_text}")
        v = evidence.get("validation")
        if v and v.get("cases"):
            vs = v.get("vs_default") or {}
            lines.append(f"    validation ({v['cases']} cases): score {v['score_geomean']:.3f}, worst "
                         f"{v['worst']:.3f}; vs engine default x{vs.get('geomean', float('nan')):.3f} "
                         f"(worst x{vs.get('worst', float('nan')):.3f})")
        if evidence.get("regression"):
            lines.append(f"    REGRESSION allowed: {evidence['regression']}")
        for note in evidence["notes"]:
            lines.append(f"    note: {note}")
    if not doc["targets"]["trtllm_gen"]["process_wide"]["expressible"]:
        lines.append("  trtllm-gen: no process-wide env setting reproduces it (reasons in the file)")
    return lines

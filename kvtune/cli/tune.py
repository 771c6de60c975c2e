"""`kvtune tune`: tune the five split knobs per batch-size bucket with Optuna.

    kvtune tune --study demo --suite prod-mix --backend simulator --device-model h200 \\
        --trials 40 --seed 0 [--buckets 1-8,9-32,...] [--sampler tpe] [--objective mean,worst]
        [--oracle] [--storage URL | --journal FILE] [--resume] [--workers N] [--preset NAME]

Options given here override a preset's (studies/presets/<name>.toml), which override the
defaults. Bad input is one line and exit 2 (kvtune.cli.main), with nothing written.
"""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    from kvtune.cli.common import add_backend_arguments, add_command, add_suite_arguments
    from kvtune.studies.config import OBJECTIVES, preset_names
    from kvtune.studies.samplers import PRUNERS, SAMPLERS

    p = add_command(sub, "tune", "tune the split heuristic per batch-size bucket (Optuna)", [
        "kvtune tune --study demo --suite prod-mix --backend simulator --device-model h200 --trials 40",
        "kvtune tune --study demo --resume --trials 80",
        "kvtune tune --study h100-hybrid --revalidate results/<run>/hybrid_heuristic.json",
    ], "Search the five split knobs per batch-size bucket with Optuna, re-measure the finalists, "
       "and store the result in the study and under results/<run-id>/.")
    p.add_argument("--study", required=True,
                   help="study name; each bucket's study is <NAME>/<bucket>")
    p.add_argument("--preset", help="named settings from studies/presets/ ("
                   + (", ".join(preset_names()) or "none") + ")")
    add_suite_arguments(p)
    add_backend_arguments(p)
    p.add_argument("--trials", type=int, help="trials per bucket, counted over resumptions (default 40)")
    p.add_argument("--buckets", help="batch-size buckets, e.g. 1-8,9-32,33-128,129-512 (default: "
                   "those, extended past 512 when the suite has larger batches), or auto: "
                   "boundaries searched over a fixed-chunk grid and the engine's own planner (at most "
                        "--max-buckets)")
    p.add_argument("--max-buckets", type=int, help="with --buckets auto: most buckets (default 4)")
    p.add_argument("--validate", action="append", metavar="SPEC",
                   help="held-out cases the search never sees (repeatable): a suite name, "
                        "distribution:NAME, trace:FILE, or none (default: a held-out share of the "
                        "training suite's seeds; for hybrid knobs: hybrid-holdout and the hybrid "
                        "suite's cases not trained on)")
    p.add_argument("--families", metavar="LIST",
                   help="per-batch rule families measured as finalists, comma-separated: makespan "
                        "(one chunk per batch from a model of the launch), adaptive (a chunk from "
                        "the batch's total tokens and target waves) (default makespan)")
    p.add_argument("--no-adaptive", dest="adaptive", action="store_false",
                   help="no per-batch finalists at all (neither family of --families)")
    p.add_argument("--no-stress", dest="stress", action="store_false",
                   help="do not add the stress share (skew80 and uniform batches of 262,144 tokens "
                        "and lognormal short contexts at each training batch size)")
    p.add_argument("--sampler", help=f"{', '.join(SAMPLERS)} (default tpe; nsga2 with --objective mean,worst)")
    p.add_argument("--seed", type=int, help="sampler seed (default 0)")
    p.add_argument("--objective", help=f"{' or '.join(OBJECTIVES)} (default robust: geometric mean "
                   "of tuned / best baseline times max(1, worst / 1.02); mean: the geometric mean "
                   "alone; mean,worst adds the worst case, multi-objective)")
    p.add_argument("--pruner", help=f"{', '.join(PRUNERS)} (default median)")
    p.add_argument("--baselines", help="comma-separated baseline policies the score divides by "
                   "(default flashinfer-tensor-core,fa3,trtllm-oversub,fixed-split)")
    p.add_argument("--space", action="append", metavar="KNOB=VALUES",
                   help="narrow the search space (repeatable): min_tokens_per_cta=512..4096, "
                        "max_waves=1..4, max_splits=8..64, ctas_per_sm=1,2, schedule=static,...")
    p.add_argument("--finalists", type=int, help="top configs re-measured at the end (default 5; "
                   "for hybrid knobs: the best settings checked on held-out cases in turn until "
                   "one passes, default 2)")
    p.add_argument("--finalist-rounds", type=int, help="interleaved rounds of the finalists (default 3)")
    p.add_argument("--oracle", action="store_true",
                   help="also search the best per-request split of every case (regret)")
    p.add_argument("--storage", help="Optuna RDB URL (default sqlite:///<out>/optuna.db)")
    p.add_argument("--journal", help="Optuna journal file instead of --storage (many processes, one host)")
    p.add_argument("--resume", action="store_true",
                   help="continue the named study (or create it); hybrid suites: keep the "
                        "buckets the newest earlier run of the study decided, search the rest")
    p.add_argument("--revalidate", metavar="FILE",
                   help="hybrid knobs: measure a finished hybrid_heuristic.json's shipped buckets "
                        "against today's serial step (no search) and write a new file where a "
                        "bucket that no longer beats serial defers; FILE is not changed")
    p.add_argument("--split-failing", action="store_true",
                   help="hybrid knobs (a tune or --revalidate): split a bucket that fails its "
                        "check once at a fixed prefill-token edge and ship or defer each half on "
                        "its own cases")
    p.add_argument("--serial-fallback", action="store_true",
                   help="hybrid knobs (a tune or --revalidate): measure each bucket that "
                        "defers once more as a serial step whose decodes follow the makespan "
                        "rule over its own decode knobs, and ship that where it passes")
    p.add_argument("--keep-shipped", action="store_true",
                   help="--revalidate: keep FILE's shipped buckets as they are, unmeasured")
    p.add_argument("--workers", type=int, help="worker processes sharing the study (default 1)")
    p.add_argument("--gpus", help="GPU indices for the workers, e.g. 0,1 (default: all)")
    p.add_argument("--timeout-s", type=float, help="stop searching after this many seconds")
    p.add_argument("--heartbeat-s", type=int, help="RDB trial heartbeat interval, s (default 10)")
    p.add_argument("--out", help="results folder (default results/)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (and, with stdout not a terminal, no `progress:` lines)")
    # Only what the user typed may override a preset: absent options stay absent.
    for action in p._actions:
        if action.dest != "help":
            action.default = argparse.SUPPRESS
    p.set_defaults(handler=run_tune_command)


def explicit_settings(args: argparse.Namespace) -> dict:
    """The TuneConfig fields the user gave on the command line."""
    from dataclasses import fields

    from kvtune.studies.config import TuneConfig

    given = {k: v for k, v in vars(args).items() if k not in ("handler", "command", "command_line")}
    unknown = sorted(set(given) - {f.name for f in fields(TuneConfig)})
    if unknown:  # an option added to the shared suite/backend arguments that tune cannot pass on
        raise ValueError(f"tune: option --{unknown[0].replace('_', '-')} is not supported by kvtune tune")
    if "param" in given:
        given["param"] = tuple(given["param"])
    if "validate" in given:
        given["validate"] = tuple(given["validate"])
    if "space" in given:
        space = {}
        for item in given["space"]:
            knob, sep, value = item.partition("=")
            if not sep or not knob.strip():
                raise ValueError(f"space: {item!r} is not KNOB=VALUES")
            space[knob.strip()] = value.strip()
        given["space"] = space
    return given


def run_tune_command(args: argparse.Namespace) -> int:
    from kvtune.cli import tune_hybrid
    from kvtune.studies.config import load_preset, merge, resume_config
    from kvtune.studies.tune import run_tune, stored_settings

    if tune_hybrid.wants_hybrid(args):  # the hybrid knobs: studies/hybrid_tune.py
        return tune_hybrid.run(args)

    given = explicit_settings(args)
    preset = load_preset(given["preset"]) if given.get("preset") else None
    config = merge(given, preset)
    if config.resume:  # the study's stored settings are the defaults; given flags must agree
        stored = stored_settings(config)
        if stored is not None:
            config = resume_config(given, preset, stored)
    run_tune(config, command=args.command_line)
    return 0


__all__ = ["add_parser", "explicit_settings", "run_tune_command"]

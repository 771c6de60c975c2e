"""`kvtune bench`: measure policies on a suite of decode batches (kvtune.harness.bench)."""

from __future__ import annotations

import sys

from kvtune.cli.common import (
    add_backend_arguments,
    add_command,
    add_suite_arguments,
    backend_settings,
    case_settings,
)


def add_parser(sub) -> None:
    from kvtune.harness.bench import DEFAULT_POLICIES, HYBRID_DEFAULT_POLICIES
    from kvtune.harness.summary import FORMATS

    p = add_command(sub, "bench", "measure policies on a suite of decode batches", [
        "kvtune bench --suite threshold --policies flashinfer-tensor-core,fa3,no-split",
        "kvtune bench --distribution prod-mix --batch-sizes 8,32,128 --seeds 0,1 "
        "--policies fa3,fixed-split:chunk_tokens=4096 --format markdown",
    ], "Plan every case of a suite with every policy, check its output (GPU backends), time it, "
       "and store one row per case and policy under results/<run-id>/.")
    add_suite_arguments(p)
    p.add_argument("--policies",
                   help="comma-separated policies, each NAME or NAME:key=value:..., or "
                        "tuned:path=FILE for an exported heuristic (its path may hold ',' and ':') "
                        f"(default {DEFAULT_POLICIES}; {HYBRID_DEFAULT_POLICIES} when any case "
                        "has a request with q_len > 1: --suite hybrid, --distribution hybrid, "
                        "--q-len 2..16)")
    p.add_argument("--heuristic", action="append", default=[], metavar="FILE",
                   help="a tuned heuristic JSON from `kvtune export`, run beside the policies as "
                        "series tuned:<file stem> (repeatable)")
    add_backend_arguments(p)
    p.add_argument("--rounds", type=int, default=1,
                   help="measure each case's policies this many times in alternating order "
                        "(A B, B A, ...) and keep the median of each policy's rounds, so that "
                        "drift between back-to-back measurements (up to 2.5%% on an H100) falls "
                        "on every policy alike; 1..20 (default 1)")
    p.add_argument("--out", default="results", help="results folder (default results/)")
    p.add_argument("--format", default="table", choices=FORMATS,
                   help="how the summary is printed: " + ", ".join(FORMATS) + " (default table)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=run)


def run(args) -> int:
    from kvtune.harness.bench import BenchSettings, run_bench
    from kvtune.harness.heuristic_verdict import heuristic_verdicts, verdict_line
    from kvtune.harness.summary import (QUIET_RATIO_MIN, disturbed_count, format_rows,
                                        heuristic_notes)
    from kvtune.kernels.fingerprint import decode_kernel_sha256

    settings = BenchSettings(cases=case_settings(args), policies=args.policies,
                             measure=backend_settings(args), out=args.out,
                             progress=not args.no_progress, heuristics=tuple(args.heuristic),
                             load_heuristic=_load_heuristic, rounds=args.rounds)
    outcome = run_bench(settings, command=args.command_line)
    print(format_rows(outcome.rows, args.format))
    disturbed = disturbed_count(outcome.rows)
    if disturbed:
        print(f"kvtune: note: {disturbed} of {len(outcome.rows)} measurements ran while the GPU's "
              f"memory latency read disturbed (quiet ratio below {QUIET_RATIO_MIN:.2f} after the "
              "retries; column quiet_ratio; marked ~disturbed)", file=sys.stderr)
    for note in heuristic_notes(outcome.rows, decode_kernel_sha256()):
        print(f"kvtune: note: {note}", file=sys.stderr)
    for verdict in heuristic_verdicts(outcome.rows):
        print(f"kvtune: {verdict_line(verdict)}", file=sys.stderr)
    if args.format == "table" and any("prefill_tokens" in r for r in outcome.rows):
        from kvtune.harness.hybrid_summary import (SERIAL_POLICY, hybrid_frame,
                                                   one_round_note, suite_speedups, targets)

        t = targets(hybrid_frame(outcome.rows))
        if not t.empty:  # sweep cases with both halves and hybrid-serial measured
            print("\nhybrid sweep: speedup over hybrid-serial and latency over max(prefill alone, "
                  "decode alone)")
            print(t.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        s = suite_speedups(outcome.rows)
        s = s[s["policy"] != SERIAL_POLICY]  # 1.0 by definition
        if not s.empty:  # every case measured beside hybrid-serial, by kind
            print("\nhybrid cases by kind: speedup over hybrid-serial")
            print(s.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        note = one_round_note(outcome.rows, s)
        if note:
            print(f"kvtune: note: {note}", file=sys.stderr)
    label = "measured" if outcome.live else "simulated"
    print(f"\n{len(outcome.rows)} rows ({label}, {outcome.backend_name}, {outcome.device_name}); "
          f"{outcome.failed_rows} not ok. Results: {outcome.root}/measurements.parquet, "
          f"manifest: {outcome.root}/manifest.json", file=sys.stderr if args.format != "table" else sys.stdout)
    return 0


def _load_heuristic(path, shape):
    from kvtune.studies.export import load_heuristic

    return load_heuristic(path, shape=shape)

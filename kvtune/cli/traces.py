"""`kvtune traces build-quantiles DIR`: rebuild the decode-weighted kv_len tables of public traces.

The tables ship as package data (workloads/data/trace_quantiles.json); this is how they were made
from the public trace files (shared/data/traces/SOURCES.md), which the project never commits.
"""

from __future__ import annotations

from kvtune.cli.common import add_command


def add_parser(sub) -> None:
    from kvtune.workloads.traces import DEFAULT_NUM_QUANTILES, TRACE_QUANTILES_PATH

    p = add_command(sub, "traces", "derived tables of public serving traces", [
        "kvtune traces build-quantiles ../shared/data/traces",
        "kvtune traces build-quantiles ../shared/data/traces --output /tmp/q.json --num-quantiles 257",
    ], "Compute the decode-weighted kv_len quantiles of the public traces named in SOURCES.md.")
    sub2 = p.add_subparsers(dest="traces_command", required=True, parser_class=type(p))
    build = sub2.add_parser("build-quantiles", help="compute the decode-weighted kv_len quantiles")
    build.add_argument("traces_dir", help="folder holding the trace files named in SOURCES.md")
    build.add_argument("--output", default=str(TRACE_QUANTILES_PATH), help="JSON file to write")
    build.add_argument("--num-quantiles", type=int, default=DEFAULT_NUM_QUANTILES,
                       help=f"quantiles per trace (default {DEFAULT_NUM_QUANTILES})")
    build.set_defaults(handler=run)


def run(args) -> int:
    from kvtune.workloads.traces import build_trace_quantiles, write_trace_quantiles

    table = build_trace_quantiles(args.traces_dir, args.num_quantiles)
    write_trace_quantiles(table, args.output)
    for name, entry in table["traces"].items():
        print(f"{name:12s} rows {entry['rows']:>7,d}  kv_len p50/p90/p99 "
              f"{entry['kv_len_p50']}/{entry['kv_len_p90']}/{entry['kv_len_p99']}")
    print(f"wrote {args.output}")
    return 0

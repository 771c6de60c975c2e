"""`kvtune`: the command line. Parses arguments, turns bad input into one line and exit 2.

One module per subcommand (bench, plan, info, tune, export, dashboard, traces, calibrate,
fidelity): each turns flags into a
plain settings object of a lower layer and calls it. This package is the only place that knows
argparse; kvtune.cli.common holds what the subcommands share.
"""

from __future__ import annotations

import sys

from kvtune.cli.common import EXIT_BAD_INPUT, CliError, Parser, command_line

SUBCOMMANDS = ("bench", "plan", "info", "tune", "export", "dashboard", "traces", "calibrate",
               "fidelity")


def build_parser() -> Parser:
    import importlib

    import kvtune

    parser = Parser(prog="kvtune", description="Tune and benchmark split-KV decode heuristics.")
    parser.add_argument("--version", action="version", version=f"kvtune {kvtune.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in SUBCOMMANDS:
        importlib.import_module(f"kvtune.cli.{name}").add_parser(sub)
    return parser


def main(argv=None) -> int:
    """Run the `kvtune` command with `argv` (default sys.argv[1:]); returns the exit status."""
    from kvtune.harness.backends import BackendUnavailable

    try:
        args = build_parser().parse_args(argv)
        args.command_line = command_line(argv)
        return int(args.handler(args) or 0)
    except (CliError, ValueError, BackendUnavailable) as exc:
        from kvtune.harness.redact import redact_text

        # One line, whatever the exception held, and no credential a driver may have echoed.
        message = redact_text(" ".join(str(exc).split()))
        print(f"kvtune: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("kvtune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`kvtune info | head`): stop quietly, as cat does. Point stdout at
        # devnull so that the interpreter's own flush at exit does not raise again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


__all__ = ["EXIT_BAD_INPUT", "CliError", "build_parser", "command_line", "main"]

"""`kvtune`: the command line. Parses arguments, turns bad input into one line and exit 2.

Subcommands: bench, plan, info (this module), tune (studies.cli), export (harness.export_cli),
dashboard (dashboard.launch). Each handler validates everything it can before it writes anything.
"""

from __future__ import annotations

import argparse
import sys

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input found by the CLI itself; printed as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2, like ours
        raise CliError(f"{self.prog}: {message}")


def parse_value(text: str):
    """'16' -> 16, '0.5' -> 0.5, 'true' -> True, anything else stays a string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_assignments(items, field: str) -> dict:
    """['a=1', 'b=x'] -> {'a': 1, 'b': 'x'}; ValueError names `field` for a malformed item."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{field}: {item!r} is not KEY=VALUE")
        out[key.strip()] = parse_value(value)
    return out


def parse_policy_spec(spec: str):
    """'fixed-split:chunk_tokens=4096' -> the policy with that override; plain names too."""
    from kernels import policies

    name, *assignments = spec.strip().split(":")
    return policies.get(name, **parse_assignments(assignments, f"policies ({name})"))


def parse_int_list(text: str, field: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{field}: {text!r} is not a comma-separated list of integers") from None
    if not values:
        raise ValueError(f"{field}: empty; give at least one integer")
    return values


def command_line(argv=None) -> str:
    """The command as a user would type it again: `kvtune <args>`, whatever started the process
    (the console script, `python -m harness.cli`, or a test calling main), with secrets in
    storage URLs removed."""
    import shlex

    from harness.redact import redact_url

    args = sys.argv[1:] if argv is None else list(argv)
    return "kvtune " + " ".join(shlex.quote(redact_url(a) if "://" in a else a) for a in args)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvtune", description="Tune and benchmark split-KV decode heuristics.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    from harness import bench_cli

    bench_cli.add_bench_parser(sub)
    bench_cli.add_plan_parser(sub)
    bench_cli.add_info_parser(sub)
    for module_name in ("studies.cli", "harness.export_cli", "dashboard.launch"):
        module = _optional_module(module_name)
        if module is not None:
            module.add_parsers(sub)
    return parser


def _optional_module(name: str):
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None  # that part of kvtune is not installed in this checkout
        raise


def main(argv=None) -> int:
    from harness.backends import BackendUnavailable

    try:
        args = build_parser().parse_args(argv)
        args.command_line = command_line(argv)
        return int(args.handler(args) or 0)
    except (CliError, ValueError, BackendUnavailable) as exc:
        message = " ".join(str(exc).split())  # one line, whatever the exception held
        print(f"kvtune: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("kvtune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""`kvtune dashboard`: start the Streamlit app (kvtune.dashboard.launch) on this machine."""

from __future__ import annotations

from kvtune.cli.common import add_command


def add_parser(sub) -> None:
    from kvtune.dashboard.launch import DEFAULT_HOST, DEFAULT_PORT

    p = add_command(sub, "dashboard", "browse results and studies in a Streamlit app (local by default)", [
        "kvtune dashboard",
        "kvtune dashboard --results results/ --storage sqlite:///results/optuna.db --port 8600",
    ], "Runs, latency versus batch size with the policies' thresholds, studies, SM timelines and "
       "export, read from a results folder and an Optuna storage (never written to).")
    p.add_argument("--results", default="results", help="results folder to read (default results/)")
    p.add_argument("--storage", help="Optuna storage URL to read studies from "
                   "(default: sqlite:///<results>/optuna.db when it exists), or a journal file")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port, 1..65535 (default {DEFAULT_PORT}); refused when taken")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}: this machine only); "
                        "0.0.0.0 opens it to the network, without any login")
    p.set_defaults(handler=run)


def run(args) -> int:
    from kvtune.dashboard.launch import run_dashboard

    return run_dashboard(args.results, args.storage, host=args.host, port=args.port)

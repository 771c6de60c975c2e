"""`kvtune dashboard`: start the Streamlit app (dashboard/app.py) on this machine.

It binds to 127.0.0.1 unless --host says otherwise (with a warning: the app has no login, and
anyone who reaches the port can read the results). The results folder and the storage reach the
app through the environment (KVTUNE_DASHBOARD_RESULTS, KVTUNE_DASHBOARD_STORAGE); the app reads
them and never writes to either.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

DEFAULT_PORT = 8501
DEFAULT_HOST = "127.0.0.1"
APP_PATH = Path(__file__).resolve().parent / "app.py"
# How the app learns what to read (dashboard/data.py reads them).
ENV_RESULTS = "KVTUNE_DASHBOARD_RESULTS"
ENV_STORAGE = "KVTUNE_DASHBOARD_STORAGE"


def check_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port: {port!r} out of range; allowed: 1..65535")
    return port


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str) -> str:
    host = (host or "").strip()
    if not host or any(ch.isspace() for ch in host):
        raise ValueError(
            f"host: {host!r} is not an address; allowed: an IP address or host name, e.g. 127.0.0.1"
        )
    return host


def streamlit_command(app_path: Path, host: str, port: int) -> list[str]:
    """The `python -m streamlit run` command line for the app (headless, no usage statistics,
    no file watcher: the app's code does not change under a user)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_path),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--server.runOnSave",
        "false",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "minimal",
        "--global.developmentMode",
        "false",
    ]


def dashboard_environment(results: str, storage: str | None, base: dict | None = None) -> dict:
    """The environment the app reads its folder and storage from (absolute results path)."""
    env = dict(os.environ if base is None else base)
    env[ENV_RESULTS] = str(Path(results).expanduser().resolve())
    if storage:
        env[ENV_STORAGE] = storage
    else:
        env.pop(ENV_STORAGE, None)
    return env


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (a bind test, closed at once)."""
    import socket

    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host.strip("[]"), port))
        except OSError:
            return True
    return False


def run_dashboard(results_dir: str, storage: str | None, host: str = DEFAULT_HOST,
                  port: int = DEFAULT_PORT) -> int:
    """Check the settings, say where the app is, then become the Streamlit server (exec).

    results_dir: the folder the app reads. storage: an Optuna storage URL or journal file (None:
    the results folder's optuna.db). port: 1..65535, refused when already taken.
    """
    port = check_port(port)
    host = check_host(host)
    if port_in_use(host, port):
        raise ValueError(f"port: {port} on {host} is already in use; allowed: a free port "
                         "(give another with --port)")
    results = Path(results_dir).expanduser()
    if results.exists() and not results.is_dir():
        raise ValueError(f"results: {results} is not a folder")
    if not APP_PATH.is_file():  # pragma: no cover - a broken install
        raise ValueError(f"dashboard: {APP_PATH} is missing from this install")
    if not is_loopback(host):
        print(
            f"kvtune dashboard: WARNING: listening on {host}:{port}. The dashboard has no login: "
            "anyone who can reach this address can read every run and study it shows.",
            file=sys.stderr,
        )
    if not results.is_dir():
        print(
            f"kvtune dashboard: {results} does not exist yet; "
            "the app will say so until a run is made.",
            file=sys.stderr,
        )
    shown_host = f"[{host}]" if ":" in host else host
    print(
        f"kvtune dashboard: serving {results.resolve()} "
        f"at http://{shown_host}:{port} (Ctrl-C stops it)",
        file=sys.stderr,
    )
    sys.stderr.flush()
    sys.stdout.flush()
    command = streamlit_command(APP_PATH, host, port)
    os.execve(command[0], command, dashboard_environment(str(results), storage))
    return 0  # pragma: no cover - execve does not return


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ENV_RESULTS",
    "ENV_STORAGE",
    "port_in_use",
    "check_host",
    "check_port",
    "dashboard_environment",
    "is_loopback",
    "run_dashboard",
    "streamlit_command",
]

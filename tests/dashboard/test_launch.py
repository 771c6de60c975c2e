"""`kvtune dashboard`: argument checks, the Streamlit command it becomes, loopback by default."""

from __future__ import annotations

import pytest

from kvtune.dashboard import launch
from kvtune.cli import main


@pytest.fixture()
def exec_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(
        launch.os, "execve", lambda path, argv, env: calls.append((path, argv, env))
    )
    return calls


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_defaults_bind_loopback_and_pass_the_folder_and_storage(exec_calls, tmp_path, capsys):
    assert (
        main(
            [
                "dashboard",
                "--results",
                str(tmp_path),
                "--storage",
                "sqlite:///x.db",
                "--port",
                "8600",
            ]
        )
        == 0
    )
    ((path, argv, env),) = exec_calls
    assert argv[:4] == [path, "-m", "streamlit", "run"] and argv[4] == str(launch.APP_PATH)
    assert (
        option(argv, "--server.address") == "127.0.0.1" and option(argv, "--server.port") == "8600"
    )
    assert (
        option(argv, "--server.headless") == "true"
        and option(argv, "--browser.gatherUsageStats") == "false"
    )
    assert (
        env[launch.ENV_RESULTS] == str(tmp_path.resolve())
        and env[launch.ENV_STORAGE] == "sqlite:///x.db"
    )
    err = capsys.readouterr().err
    assert "WARNING" not in err and "http://127.0.0.1:8600" in err


def test_a_wider_host_warns(exec_calls, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(launch.ENV_STORAGE, "left-over")
    assert main(["dashboard", "--results", str(tmp_path), "--host", "0.0.0.0"]) == 0
    ((_, argv, env),) = exec_calls
    assert option(argv, "--server.address") == "0.0.0.0" and option(argv, "--server.port") == str(
        launch.DEFAULT_PORT
    )
    assert launch.ENV_STORAGE not in env  # no --storage: the app finds the default itself
    assert "WARNING" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,field",
    [
        (["--port", "0"], "port"),
        (["--port", "70000"], "port"),
        (["--port", "http"], "port"),
        (["--host", " "], "host"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(exec_calls, argv, field, capsys):
    assert main(["dashboard", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and err.startswith("kvtune: error:")
    assert not exec_calls


def test_results_must_be_a_folder(exec_calls, tmp_path, capsys):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    assert main(["dashboard", "--results", str(not_a_folder)]) == 2
    assert "results" in capsys.readouterr().err and not exec_calls


def test_loopback_addresses():
    assert all(
        launch.is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]")
    )
    assert not any(launch.is_loopback(h) for h in ("0.0.0.0", "192.168.1.2", "example.org", "::"))


def test_importing_the_launcher_does_not_load_streamlit():
    import subprocess
    import sys

    code = "import sys, dashboard.launch; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # `kvtune --help` and every other command stay fast

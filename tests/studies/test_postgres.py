"""Two hosts on one PostgreSQL study: two `kvtune tune --resume` processes against one server.

The server is the one named by KVTUNE_TEST_POSTGRES_URL (as .ci/run may start it), or else a
throwaway cluster this test starts on loopback from Debian's `postgresql` package. Without a
server and the driver (psycopg 3) the test is skipped, saying which is missing.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import optuna
import pytest

from kvtune.studies.storage import counted_trials, open_storage
from tests.studies.conftest import env_with_repo, kvtune_argv

HOST = ["tune", "--distribution", "skew60", "--batch-sizes", "8", "--param", "total_tokens=32768",
        "--backend", "simulator", "--device-model", "h200", "--finalists", "2",
        "--finalist-rounds", "1", "--no-progress", "--resume", "--study", "pg", "--trials", "16"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres_url(tmp_path):
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("PostgreSQL driver psycopg not installed (pip install 'psycopg[binary]')")
    url = os.environ.get("KVTUNE_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins or os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("no PostgreSQL server: set KVTUNE_TEST_POSTGRES_URL or install Debian's postgresql")
    # pytest's tmp folders are private to root; the server runs as the postgres user.
    base = Path(tempfile.mkdtemp(prefix="kvtune-pg-"))
    os.chmod(base, 0o755)
    bin_dir, data = bins[-1], base / "pgdata"
    data.mkdir()
    shutil.chown(data, "postgres")
    port = _free_port()

    def as_postgres(*cmd):
        return subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=False,
                              capture_output=True, text=True, timeout=120, cwd="/")

    init = as_postgres(f"{bin_dir}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres")
    assert init.returncode == 0, init.stderr
    start = as_postgres(f"{bin_dir}/pg_ctl", "-D", str(data), "-w", "-l", str(data / "log"), "-o",
                        f"-p {port} -k {data} -c listen_addresses=127.0.0.1", "start")
    assert start.returncode == 0, start.stderr
    try:
        yield f"postgresql://postgres:unused-secret@127.0.0.1:{port}/postgres"
    finally:
        as_postgres(f"{bin_dir}/pg_ctl", "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


def _two_hosts(postgres_url, out, study: str) -> set:
    """Two `kvtune tune --resume` hosts started together on one study; checks what must hold
    however they interleave and returns the process ids that ran its trials."""
    argv = [a if a != "pg" else study for a in HOST]
    procs = [subprocess.Popen(kvtune_argv(*argv, "--storage", postgres_url,
                                          "--out", str(out / f"host{i}")),
                              env=env_with_repo(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "unused-secret" not in stdout + err
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    loaded = optuna.load_study(study_name=f"{study}/1-8", storage=open_storage(postgres_url))
    numbers = sorted(t.number for t in loaded.trials)
    assert numbers == list(range(len(numbers)))
    assert counted_trials(loaded) >= 16  # each host stops once the shared study has its trials
    for path in out.rglob("*"):  # provenance, manifests, results: credentials removed
        if path.is_file() and path.suffix in (".json", ".parquet"):
            assert b"unused-secret" not in path.read_bytes(), path
    return {t.user_attrs.get("kvtune_pid") for t in loaded.trials if t.user_attrs}


def test_two_hosts_share_one_postgres_study(postgres_url, tmp_path):
    # On a loaded machine (CI: two cores) one host can take every trial before the other has
    # started; the pair then runs again on a fresh study, as the journal test does.
    for attempt in range(3):
        pids = _two_hosts(postgres_url, tmp_path / str(attempt), f"pg{attempt}")
        if len(pids) == 2:
            break
    else:
        pytest.skip("one host took every trial in 3 attempts: no concurrency to observe")
    assert len(pids) == 2

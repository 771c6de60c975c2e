"""Results on disk: one folder per run, `results/<run-id>/`.

A run folder holds `manifest.json` (command, versions, device, backend, seed, status) and
`measurements.parquet` (one row per case and policy). The manifest says `"status": "running"`
until the run has written all its rows; only then does it become `"complete"`. A run that fails
ends `"failed"` with its error, and keeps the rows it measured in `measurements.parquet`. Every
file is written to a temporary name and renamed into place, so a crash never leaves a half
written file, and nothing outside the run's own folder is touched.

A running run's manifest names its process (`process`: pid, host, the process's start time), so
a run whose process is gone (SIGKILL, power cut) is recognised: `mark_killed_runs` (called by
`list_runs` and by `kvtune tune` before it starts) turns its status into `"killed"`, merges the
row parts it left (`measurements.part-*.parquet`, studies/records.py) into its
`measurements.parquet`, and removes its stray `.tmp` files. Files get the user's umask (as
`open` would give them), not mkstemp's 0600: a serving container must be able to read an export.
Every string of a manifest is redacted (harness/redact.py) before it is written.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

MANIFEST = "manifest.json"
MEASUREMENTS = "measurements.parquet"
RUN_STATUSES = ("running", "complete", "failed", "killed")
PART_GLOB = "measurements.part-*.parquet"
# Folders of kernel pseudo-filesystems: never a place for results.
_PSEUDO_ROOTS = ("/proc", "/sys")  # (/dev/shm is a real tmpfs: allowed)


def new_run_id(kind: str = "bench", now: _dt.datetime | None = None) -> str:
    """`<UTC date>-<time>-<kind>-<4 hex>`: sorts by time, unique across concurrent runs."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{kind}-{secrets.token_hex(2)}"


def file_mode() -> int:
    """The mode `open(path, "w")` would give a new file: 0o666 less the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def temp_file(path: Path) -> tuple[int, str]:
    """(fd, name) of a new temporary file beside `path` with the umask's mode (mkstemp makes
    0600 files, and the rename would keep that)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())
    except OSError:  # pragma: no cover - a filesystem without modes keeps its own
        pass
    return fd, tmp


def check_output_dir(path: str | os.PathLike, field: str = "out") -> Path:
    """ValueError (one line naming `field`) unless `path` is, or can become, a folder this
    process can write in: not a file, not under /proc or /sys, not read-only. Creates
    nothing; returns the path."""
    path = Path(path)
    resolved = path.resolve()
    text = resolved.as_posix()
    for root in _PSEUDO_ROOTS:
        if text == root or text.startswith(root + "/"):
            raise ValueError(f"{field}: {os.fspath(path)} is under {root}, a kernel "
                             "pseudo-filesystem; allowed: a folder on a real disk")
    probe = resolved
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe != resolved and not probe.is_dir():
        raise ValueError(f"{field}: {os.fspath(path)} cannot be created: {probe} is a file")
    if probe == resolved and not probe.is_dir():
        raise ValueError(f"{field}: {os.fspath(path)} is a file; allowed: a folder (it is created "
                         "when missing)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{field}: {os.fspath(path)} is not writable ({probe} is read-only "
                         "for this user); allowed: a folder you can write in")
    try:  # os.access says yes on a read-only filesystem mounted for root; ask the kernel
        st = os.statvfs(probe)
        if st.f_flag & os.ST_RDONLY:
            raise ValueError(f"{field}: {os.fspath(path)} is on a read-only filesystem; allowed: "
                             "a folder you can write in")
    except (OSError, AttributeError):
        pass
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename."""
    path = Path(path)
    fd, tmp = temp_file(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj) -> None:
    """`obj` as indented JSON, every string redacted (harness/redact.py), written atomically."""
    from kvtune.harness.redact import redact_tree

    text = json.dumps(redact_tree(obj), indent=2, sort_keys=True, default=json_default) + "\n"
    atomic_write_bytes(path, text.encode())


def json_default(obj):
    """JSON for numpy scalars and arrays, datetimes and paths (json.dumps `default=`)."""
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (_dt.datetime, _dt.date)):
        return obj.isoformat()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


@dataclass
class RunWriter:
    """Creates a run folder and keeps its manifest and rows consistent on disk."""

    root: Path
    run_id: str
    manifest: dict

    @classmethod
    def create(cls, results_dir: str | os.PathLike, manifest: dict, kind: str = "bench") -> "RunWriter":
        root = check_output_dir(results_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"out: cannot create the folder {root} ({exc.strerror})") from None
        for _ in range(10):
            run_id = new_run_id(kind)
            try:
                (root / run_id).mkdir()
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise ValueError(f"out: cannot create a run folder in {root} ({exc.strerror})") from None
        else:  # pragma: no cover - ten collisions of 16 random bits in one second
            raise RuntimeError("could not create a unique run folder")
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        man = {**manifest, "run_id": run_id, "status": "running", "started_at": started,
               "process": process_identity()}
        writer = cls(root / run_id, run_id, man)
        atomic_write_json(writer.root / MANIFEST, man)
        return writer

    def write_rows(self, rows: list[dict]) -> None:
        """Replace the run's measurements with `rows` (called as rows accumulate)."""
        write_parquet_atomic(self.root / MEASUREMENTS, pd.DataFrame(rows))

    def update(self, **fields) -> None:
        self.manifest.update(fields)
        atomic_write_json(self.root / MANIFEST, self.manifest)

    def finish(self, status: str, error: str | None = None, **fields) -> None:
        if status not in RUN_STATUSES:
            raise ValueError(f"status: {status!r}; allowed: {', '.join(RUN_STATUSES)}")
        ended = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.update(status=status, ended_at=ended, error=error, **fields)


def write_parquet_atomic(path: Path, frame: pd.DataFrame, *, sync: bool = False) -> None:
    """`frame` as parquet at `path` through a temporary file and a rename (fsync'd when `sync`,
    so that the rows survive a power cut as well as a kill)."""
    path = Path(path)
    fd, tmp = temp_file(path)
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        if sync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def process_identity() -> dict:
    """This process as a manifest names it: pid, host and start time (clock ticks since boot,
    Linux; None elsewhere), so that a reused pid is not taken for the run's process."""
    import socket

    return {"pid": os.getpid(), "host": socket.gethostname(), "start": process_start(os.getpid())}


def process_start(pid: int):
    """Start time of process `pid` in clock ticks since boot (/proc/<pid>/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int) -> bool:
    """True when process `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def run_process_gone(manifest: dict) -> bool:
    """True when `manifest` is of a running run whose process on this host is gone (or is
    another process that got the same pid). A run of another host is never judged."""
    import socket

    proc = manifest.get("process")
    if manifest.get("status") != "running" or not isinstance(proc, dict):
        return False
    if proc.get("host") != socket.gethostname():
        return False
    pid = proc.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    if not process_alive(pid):
        return True
    start = proc.get("start")
    return start is not None and process_start(pid) not in (None, start)


def merge_run_parts(run_dir: str | os.PathLike) -> int:
    """Fold the row parts of `run_dir` (studies/records.py writes one per trial) into its
    measurements.parquet and remove them; returns the number of rows now there."""
    run_dir = Path(run_dir)
    parts = sorted(run_dir.glob(PART_GLOB))
    frames = []
    main = run_dir / MEASUREMENTS
    if main.is_file():
        frames.append(pd.read_parquet(main))
    for part in parts:
        try:
            frames.append(pd.read_parquet(part))
        except Exception:  # noqa: BLE001 - a part is whole or absent (renamed into place)
            continue
    frames = [f for f in frames if len(f)]
    if parts and frames:
        write_parquet_atomic(main, pd.concat(frames, ignore_index=True), sync=True)
    for part in parts:
        part.unlink(missing_ok=True)
    return sum(len(f) for f in frames)


def remove_stray_temp_files(run_dir: str | os.PathLike) -> None:
    """Delete the `.tmp` files a killed writer left in `run_dir`."""
    for tmp in Path(run_dir).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def mark_killed_runs(results_dir: str | os.PathLike) -> list[str]:
    """Runs under `results_dir` whose process is gone become "killed" (their row parts merged,
    stray .tmp files removed); returns their run ids. Never raises for a folder it cannot
    write (a read-only results copy is only listed)."""
    root = Path(results_dir)
    killed = []
    if not root.is_dir():
        return killed
    for sub in sorted(root.iterdir()):
        man_path = sub / MANIFEST
        try:
            man = json.loads(man_path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(man, dict) or not run_process_gone(man):
            continue
        try:
            rows = merge_run_parts(sub)
            remove_stray_temp_files(sub)
            ended = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            proc = man["process"]
            man.update(status="killed", ended_at=ended, rows=rows,
                       error=f"process {proc.get('pid')} on {proc.get('host')} is gone "
                             "(killed or crashed); the rows of its finished work are kept")
            atomic_write_json(man_path, man)
        except (OSError, ValueError):
            continue
        killed.append(sub.name)
    return killed


def list_runs(results_dir: str | os.PathLike) -> list[dict]:
    """Manifests of every run folder under `results_dir`, newest first; unreadable ones are
    reported with status "corrupt" instead of raising. Runs whose process is gone are marked
    "killed" first (mark_killed_runs)."""
    root = Path(results_dir)
    runs = []
    if not root.is_dir():
        return runs
    mark_killed_runs(root)
    for sub in sorted(root.iterdir(), reverse=True):
        man_path = sub / MANIFEST
        if not man_path.is_file():
            continue
        try:
            man = json.loads(man_path.read_text())
        except (OSError, ValueError) as exc:
            man = {"run_id": sub.name, "status": "corrupt", "error": f"manifest unreadable: {exc}"}
        if not isinstance(man, dict):
            man = {"run_id": sub.name, "status": "corrupt", "error": "manifest is not a JSON object"}
        man.setdefault("run_id", sub.name)
        man["path"] = str(sub)
        runs.append(man)
    return runs


def load_measurements(run_dir: str | os.PathLike) -> pd.DataFrame:
    """The measurements of one run (empty frame when there are none yet)."""
    path = Path(run_dir) / MEASUREMENTS
    if not path.is_file():
        return pd.DataFrame()
    return pd.read_parquet(path)


def load_manifest(run_dir: str | os.PathLike) -> dict:
    return json.loads((Path(run_dir) / MANIFEST).read_text())

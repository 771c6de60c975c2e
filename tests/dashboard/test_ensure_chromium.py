"""scripts/ensure_chromium.sh never fails its caller: it installs Chromium where it can and says why
not where it cannot."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure_chromium.sh"


def run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": os.environ.get("HOME", "/tmp"), **env},
        check=False,
    )


def test_present_binaries_are_left_alone(tmp_path):
    for name in ("chromium", "chromedriver"):
        (tmp_path / name).write_text("#!/bin/sh\necho 'Chromium 1.2.3'\n")
        (tmp_path / name).chmod(0o755)
    done = run(
        {
            "PATH": os.environ["PATH"],
            "CHROMIUM": str(tmp_path / "chromium"),
            "CHROMEDRIVER": str(tmp_path / "chromedriver"),
        }
    )
    assert (
        done.returncode == 0
        and "already installed" in done.stdout
        and "Chromium 1.2.3" in done.stdout
    )


def test_where_it_cannot_install_it_says_why_and_exits_0(tmp_path):
    # No PATH: neither `id` nor apt-get can be found, as on a machine without Debian's tools.
    done = run(
        {
            "PATH": str(tmp_path / "empty"),
            "CHROMIUM": str(tmp_path / "none"),
            "CHROMEDRIVER": str(tmp_path / "none"),
        }
    )
    assert done.returncode == 0
    line = done.stdout.strip()
    assert line.startswith("ensure_chromium: ") and "browser test will be skipped" in line
    assert ("not root" in line) or ("no apt-get" in line)

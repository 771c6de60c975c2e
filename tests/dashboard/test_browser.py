"""The dashboard as a person sees it: `kvtune dashboard` started on a free port, every page loaded
in headless Chromium (Debian's /usr/bin/chromium through Selenium and /usr/bin/chromedriver), a
Plotly chart rendered on each, no exception and no "cannot draw" shown; the latency page of a
`kvtune tune --oracle` run (hundreds of trial and oracle configurations) renders in under 5 s.
Screenshots are saved under the test's temporary folder (and copied to $KVTUNE_BROWSER_SHOTS when
set, to look at them). `scripts/ensure_chromium.sh` installs Chromium; without it this test is
skipped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# url path -> the page's title; "" is the default page (Runs)
PAGES = {
    "": "Runs",
    "latency": "Latency vs batch size",
    "study": "Study",
    "timeline": "SM timeline",
    "export": "Export",
}
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1100",
)
SERVER_START_S = 90
PAGE_LOAD_S = 60
ORACLE_LATENCY_PAGE_S = 5.0

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
    reason=f"{CHROMIUM} or {CHROMEDRIVER} not installed (scripts/ensure_chromium.sh installs "
    "Debian's "
    "chromium and chromium-driver when run as root)",
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kvtune_command() -> list[str]:
    script = Path(sys.executable).parent / "kvtune"
    if script.is_file():
        return [str(script)]
    found = shutil.which("kvtune")
    return [found] if found else [sys.executable, "-m", "kvtune"]


def wait_healthy(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    url = f"http://127.0.0.1:{port}/_stcore/health"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"kvtune dashboard exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(
        f"kvtune dashboard did not answer on port {port} in {SERVER_START_S} s: "
        f"{log.read_text()[-2000:]}"
    )


@pytest.fixture(scope="module")
def dashboard_url(tmp_path_factory, results_dir):
    """One server for the module's tests (starting one takes seconds on a 2-core CI)."""
    tmp_path = tmp_path_factory.mktemp("dashboard-server")
    port = free_port()
    log = tmp_path / "dashboard.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*kvtune_command(), "dashboard", "--results", str(results_dir), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HOME": str(tmp_path)},
        )
    try:
        wait_healthy(proc, port, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("chromium")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail(
            "selenium is not installed: it belongs to kvtune's dev extra (pip install -e '.[dev]')"
        )
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(
        service=Service(str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log")),
        options=options,
    )
    driver.set_page_load_timeout(PAGE_LOAD_S)
    try:
        yield driver
    finally:
        driver.quit()


def settled(driver) -> bool:
    """A chart has drawn its traces (or an exception shows) and the app is not running."""
    from selenium.webdriver.common.by import By

    charts = driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot g.trace")
    errors = driver.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
    return bool(charts or errors) and not driver.find_elements(
        By.CSS_SELECTOR, "[data-testid='stStatusWidget']"
    )


def keep_shots(shots: Path) -> None:
    target = os.environ.get("KVTUNE_BROWSER_SHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        for shot in shots.iterdir():
            shutil.copy(shot, Path(target) / shot.name)


def test_every_page_renders_a_plotly_chart_in_chromium(dashboard_url, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    shots = tmp_path / "screenshots"
    shots.mkdir()
    for path, title in PAGES.items():
        browser.get(f"{dashboard_url}/{path}")
        try:
            WebDriverWait(browser, PAGE_LOAD_S, poll_frequency=0.5).until(settled)
        finally:
            browser.save_screenshot(str(shots / f"{path or 'runs'}.png"))
        errors = browser.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
        assert not errors, f"/{path}: {errors[0].text[:500]}"
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "cannot draw" not in body, path
        headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h1")]
        assert title in headings, (path, headings)
        charts = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")
        assert charts, f"/{path}: no Plotly chart rendered"
        # A rendered chart has drawn its traces, not only its frame.
        assert browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot g.trace"), path
        time.sleep(0.5)  # let late charts on the page finish before the screenshot
        browser.save_screenshot(str(shots / f"{path or 'runs'}.png"))
    keep_shots(shots)
    assert sorted(p.name for p in shots.iterdir()) == sorted(f"{p or 'runs'}.png" for p in PAGES)
    assert all(p.stat().st_size > 10_000 for p in shots.iterdir())


def test_oracle_runs_latency_page_renders_in_seconds(dashboard_url, browser, tmp_path, tune_run):
    """The page a person opens on an oracle run: its hundreds of configurations are the `best
    trial` and `oracle` series, so the chart is small and quick. Timed from the request to the
    chart's traces drawn, after one page load that warms the server."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{dashboard_url}/?runs={tune_run.name}")
    WebDriverWait(browser, PAGE_LOAD_S, poll_frequency=0.2).until(settled)
    start = time.monotonic()
    browser.get(f"{dashboard_url}/latency?runs={tune_run.name}")
    WebDriverWait(browser, PAGE_LOAD_S, poll_frequency=0.1).until(settled)
    elapsed = time.monotonic() - start
    shots = tmp_path / "screenshots"
    shots.mkdir()
    browser.save_screenshot(str(shots / "oracle-latency.png"))
    browser.get(f"{dashboard_url}/timeline?runs={tune_run.name}")
    WebDriverWait(browser, PAGE_LOAD_S, poll_frequency=0.2).until(settled)
    time.sleep(0.5)
    browser.save_screenshot(str(shots / "oracle-timeline.png"))
    keep_shots(shots)
    assert elapsed < ORACLE_LATENCY_PAGE_S, f"{elapsed:.1f} s"
    browser.get(f"{dashboard_url}/latency?runs={tune_run.name}")
    WebDriverWait(browser, PAGE_LOAD_S, poll_frequency=0.2).until(settled)
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "cannot draw" not in body and "oracle-splits" not in body
    legend = " ".join(t.text for t in browser.find_elements(By.CSS_SELECTOR, ".legendtext"))
    assert "oracle" in legend and "tuned" in legend

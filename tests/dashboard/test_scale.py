"""A results folder of 100,000 measurement rows opens in under 2 seconds, page by page."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from kvtune.dashboard.launch import ENV_RESULTS, ENV_STORAGE
from tests.dashboard.test_app import APP, goto

ROWS = 100_000
LIMIT_S = 2.0
DISTRIBUTIONS = np.array(["skew40", "skew60", "skew80", "2x40", "uniform"])


def make_big_run(root, bench_run) -> None:
    """The skew80 bench run's rows (kv_lens lists included) repeated with new seeds and
    distributions up to 100,000 rows, in a run folder of its own."""
    run = root / "20260101-000000-bench-b1b1"
    run.mkdir(parents=True)
    shutil.copy(bench_run / "manifest.json", run / "manifest.json")
    base = pd.read_parquet(bench_run / "measurements.parquet")
    big = pd.concat([base] * -(-ROWS // len(base)), ignore_index=True).iloc[:ROWS].copy()
    copy = np.arange(ROWS) // len(base)
    big["seed"] = copy
    big["distribution"] = DISTRIBUTIONS[copy % len(DISTRIBUTIONS)]
    big["case_id"] = (
        big["distribution"]
        + ":B"
        + big["batch_size"].astype(str)
        + ":seed"
        + big["seed"].astype(str)
    )
    big["latency_us"] = big["latency_us"] * (1.0 + 0.01 * np.sin(copy))
    big.to_parquet(run / "measurements.parquet", index=False)


def test_100k_rows_open_in_under_2_seconds(tmp_path, monkeypatch, results_dir, bench_run):
    import streamlit as st

    make_big_run(tmp_path / "big", bench_run)
    monkeypatch.delenv(ENV_STORAGE, raising=False)
    # Warm the process as a running server is warm (modules imported), on another folder.
    monkeypatch.setenv(ENV_RESULTS, str(results_dir))
    warm = AppTest.from_file(APP, default_timeout=120)
    warm.run()
    goto(warm, "views/latency.py")
    goto(warm, "views/timeline.py")

    st.cache_data.clear()  # nothing of the big folder is cached
    monkeypatch.setenv(ENV_RESULTS, str(tmp_path / "big"))
    at = AppTest.from_file(APP, default_timeout=60)
    timings = {}
    t0 = time.perf_counter()
    at.run()
    timings["runs"] = time.perf_counter() - t0
    assert not at.exception
    assert at.get("plotly_chart") and "100,000 measurement rows" in " ".join(
        m.value for m in at.markdown
    )
    for page in ("views/latency.py", "views/timeline.py"):
        t0 = time.perf_counter()
        goto(at, page)
        timings[page] = time.perf_counter() - t0
        assert at.get("plotly_chart"), page
        if page == "views/latency.py":  # 4 policies in 5 distribution facets, each from 20,000 rows
            fig = json.loads(at.get("plotly_chart")[0].proto.spec)
            policies = [t for t in fig["data"] if t["name"] != "floor"]
            assert len(policies) == 4 * len(DISTRIBUTIONS)
            assert len(fig["data"]) - len(policies) == len(DISTRIBUTIONS)  # the floor per facet
    assert max(timings.values()) < LIMIT_S, timings

"""The hybrid-batch page and figure (issue 15) on a simulated hybrid bench run."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from kvtune.dashboard.hybrid_charts import BOUND_NAME, hybrid_figure
from kvtune.dashboard.launch import ENV_RESULTS, ENV_STORAGE
from kvtune.dashboard.selection import RUNS_KEY
from kvtune.harness.bench import BackendSettings, BenchSettings, run_bench
from kvtune.harness.hybrid_summary import hybrid_frame
from kvtune.workloads.selection import CaseSettings

from tests.dashboard.test_app import APP, TIMEOUT_S


@pytest.fixture(scope="module")
def hybrid_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrid-results")
    rows = []
    for params, sizes in ((("chunk_tokens=512",), "8,32"), (("chunk_tokens=512", "decodes=0"), "1"),
                          (("chunk_tokens=0",), "8,32")):
        out = run_bench(BenchSettings(
            cases=CaseSettings(distribution="hybrid", batch_sizes=sizes, params=params),
            policies="hybrid-serial,pod",
            measure=BackendSettings(backend="simulator", device_model="h100"),
            out=str(root), progress=False))
        rows += out.rows
    return root, rows


def test_figure_has_policies_and_bound(hybrid_results):
    _, rows = hybrid_results
    frame = hybrid_frame(rows)
    assert set(frame["num_decodes"]) == {8, 32}
    fig = hybrid_figure(frame)
    names = {t.name for t in fig.data}
    assert names == {"hybrid-serial", "pod", BOUND_NAME}
    assert hybrid_figure(frame, ["pod"]).data[0].name == "pod"
    assert len(hybrid_figure(pd.DataFrame(frame.iloc[:0])).data) == 0
    # A run without the one-kind rows (a bench of two-kind batches only) has no bound to draw.
    unbounded = frame.assign(bound_us=float("nan"))
    assert {t.name for t in hybrid_figure(unbounded).data} == {"hybrid-serial", "pod"}


def test_legend_names_stay_short():
    """A tuned file's series label keeps its file name in the legend, not its folders, and any
    label longer than the legend's budget loses its middle (the hover keeps it whole)."""
    from kvtune.dashboard.hybrid_charts import LEGEND_MAX_CHARS, legend_name

    assert legend_name("pod") == "pod"
    assert legend_name("hybrid-tuned:path=benchmarks/gpu_calls/s9_hybrid_heuristic.json") \
        == "hybrid-tuned:path=s9_hybrid_heuristic.json"
    long = "hybrid-parametric:schedule=colocated:prefill_block_m=64:ctas_per_sm=4:max_waves=2"
    short = legend_name(long)
    assert len(short) == LEGEND_MAX_CHARS and short.startswith("hybrid-parametric:sch")
    assert short.endswith("max_waves=2") and "…" in short


def _open_hybrid_page(monkeypatch, root):
    monkeypatch.setenv(ENV_RESULTS, str(root))
    monkeypatch.delenv(ENV_STORAGE, raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    runs = [p.name for p in root.iterdir() if p.is_dir()]
    at.sidebar.multiselect(key=RUNS_KEY).set_value(runs).run()
    at.switch_page("views/hybrid.py").run()
    assert not at.exception
    return at


def test_page_draws_the_hybrid_runs(monkeypatch, hybrid_results):
    root, _ = hybrid_results
    at = _open_hybrid_page(monkeypatch, root)
    assert at.title[0].value == "Hybrid batches"
    assert at.get("plotly_chart"), "no chart drawn"
    assert any(h.value.startswith("Every hybrid case, by kind") for h in at.subheader)
    assert len(at.dataframe) == 2


def test_replayed_hybrid_rows_show_prefill_and_decode_ctas_and_reproduce_the_latency(hybrid_results):
    import numpy as np

    from kvtune.dashboard.replay import replay_row
    from kvtune.dashboard.timeline_chart import KIND_COLORS, timeline_figure
    from kvtune.harness.device import device_model

    _, rows = hybrid_results
    device = device_model("h100")
    mixed = [r for r in rows if r["status"] == "ok" and r.get("q_lens")
             and max(r["q_lens"]) > 1 and min(r["q_lens"]) == 1]
    assert mixed
    for row in mixed:
        rep = replay_row(row, device)
        t = rep.timeline
        assert set(t["kind"]) == {"prefill", "decode"}
        assert (t["kind"] == "prefill").sum() == rep.plan["prefill_tasks"]
        assert (t["kind"] == "decode").sum() == rep.plan["decode_tasks"]
        # The replay is the stored simulation: same latency, no two CTAs on one slot at once.
        assert rep.time_us == pytest.approx(row["latency_us"], rel=1e-9)
        assert t["slot"].max() < rep.num_slots // rep.sm_count
        for _, part in t.groupby(["sm", "slot"]):
            part = part.sort_values("start_us")
            assert (part["start_us"].to_numpy()[1:] >= part["end_us"].to_numpy()[:-1] - 1e-6).all()
        assert np.isin(t["request"], np.arange(len(row["kv_lens"]))).all()
        fig = timeline_figure(t, sm_count=rep.sm_count, num_slots=rep.num_slots,
                              kv_lens=rep.kv_lens, stage1_us=rep.stage1_us, time_us=rep.time_us)
        bars = [trace for trace in fig.data if trace.type == "bar"]
        assert [b.marker.color for b in bars] == [KIND_COLORS["prefill"], KIND_COLORS["decode"]]
        assert sum(len(b.x) for b in bars) == len(t)


def test_timeline_page_draws_a_hybrid_run_by_cta_kind(monkeypatch, hybrid_results):
    root, rows = hybrid_results
    monkeypatch.setenv(ENV_RESULTS, str(root))
    monkeypatch.delenv(ENV_STORAGE, raising=False)
    run = next(r["run_id"] for r in rows if max(r.get("q_lens") or [1]) > 1
               and min(r.get("q_lens") or [2]) == 1)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    at.sidebar.multiselect(key=RUNS_KEY).set_value([run]).run()
    at.switch_page("views/timeline.py").run()
    assert not at.exception
    assert not at.error, [e.value for e in at.error]
    charts = at.get("plotly_chart")
    assert len(charts) == 2
    import json

    names = {t["name"].split(" (")[0] for c in charts
             for t in json.loads(c.proto.spec)["data"] if t.get("type") == "bar"}
    assert names == {"prefill CTAs", "decode CTAs"}


def test_a_measured_one_round_run_that_reads_slower_than_serial_warns(monkeypatch, tmp_path,
                                                                      hybrid_results):
    """The page says when a GPU run's "never > 2% slower" verdict comes from one round per case
    (harness/hybrid_summary.one_round_note); the simulated runs (pod reads > 2% slower there)
    get no such warning."""
    import shutil

    root, _ = hybrid_results
    assert not [w for w in _open_hybrid_page(monkeypatch, root).warning
                if "one round" in w.value]
    measured = tmp_path / "measured"
    shutil.copytree(root, measured)
    for parquet in measured.glob("*/measurements.parquet"):
        df = pd.read_parquet(parquet)
        df.assign(simulated=False).to_parquet(parquet, index=False)
    warned = [w.value for w in _open_hybrid_page(monkeypatch, measured).warning]
    assert any("one round" in w and "--rounds 2" in w for w in warned), warned

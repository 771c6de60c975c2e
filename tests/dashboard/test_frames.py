"""Table transformations of dashboard/frames.py on small hand-made frames and on a real tuning
run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kvtune.dashboard import frames
from kvtune.kernels.plan import SplitParams
from kvtune.studies.result import BucketResult, CaseEvidence, Finalist, TuningResult, load_tuning_result


def rows(**columns) -> pd.DataFrame:
    n = max(len(v) for v in columns.values() if isinstance(v, list))
    base = {
        "status": ["ok"] * n,
        "run_id": ["r1"] * n,
        "distribution": ["skew80"] * n,
        "policy_params": ["{}"] * n,
        "max_splits": [1] * n,
        "split_requests": [0] * n,
        "grid_size": [8] * n,
        "num_tasks": [8] * n,
        "waves": [0.5] * n,
        "bw_fraction": [0.5] * n,
        "p10_us": [np.nan] * n,
        "p90_us": [np.nan] * n,
    }
    base.update(columns)
    return pd.DataFrame(base)


def test_latency_points_take_the_median_over_cases_and_keep_hover_columns():
    frame = rows(
        policy=["fa3"] * 4 + ["no-split"],
        batch_size=[4, 4, 4, 8, 4],
        case_id=["a", "b", "c", "d", "a"],
        latency_us=[10.0, 30.0, 20.0, 5.0, 99.0],
        p10_us=[9.0, 29.0, 19.0, 4.0, 98.0],
        p90_us=[11.0, 31.0, 21.0, 6.0, 100.0],
        max_splits=[2, 4, 6, 1, 1],
    )
    pts = frames.latency_points(frame)
    fa3_4 = pts[(pts["line"] == "fa3") & (pts["batch_size"] == 4)].iloc[0]
    assert fa3_4["latency_us"] == 20.0 and fa3_4["cases"] == 3 and fa3_4["max_splits"] == 4
    assert fa3_4["latency_p10_us"] == pytest.approx(12.0) and fa3_4[
        "latency_p90_us"
    ] == pytest.approx(28.0)
    one = pts[(pts["line"] == "fa3") & (pts["batch_size"] == 8)].iloc[0]
    assert (one["latency_p10_us"], one["latency_p90_us"]) == (
        4.0,
        6.0,
    )  # a single case keeps its own spread
    assert list(pts["line"].unique()) == ["fa3", "no-split"]


def test_failed_rows_are_not_drawn():
    frame = rows(
        policy=["fa3", "fa3"],
        batch_size=[4, 8],
        case_id=["a", "b"],
        latency_us=[10.0, np.nan],
        status=["ok", "failed"],
    )
    assert frames.latency_points(frame)["batch_size"].tolist() == [4]
    assert frames.status_counts(frame) == {"ok": 1, "failed": 1}
    assert frames.latency_points(frame.iloc[1:]).empty
    assert frames.latency_points(pd.DataFrame()).empty


def test_one_policy_with_several_parameter_sets_gets_one_label_each():
    frame = rows(
        policy=["fixed-split", "fixed-split", "fa3"],
        batch_size=[4, 4, 4],
        case_id=["a"] * 3,
        latency_us=[1.0, 2.0, 3.0],
        policy_params=[
            json.dumps({"chunk_tokens": 1024, "schedule": "static"}),
            json.dumps({"chunk_tokens": 4096, "schedule": "static"}),
            "{}",
        ],
    )
    assert frames.policy_labels(frame).tolist() == [
        "fixed-split[chunk_tokens=1024]",
        "fixed-split[chunk_tokens=4096]",
        "fa3",
    ]
    by_run = frames.latency_points(frame, by_run=True)
    assert set(by_run["line"]) == {
        "r1 · fixed-split[chunk_tokens=1024]",
        "r1 · fixed-split[chunk_tokens=4096]",
        "r1 · fa3",
    }


def test_policy_summary_compares_with_the_fastest_policy_of_each_case():
    frame = rows(
        policy=["a", "b", "a", "b"],
        batch_size=[4, 4, 8, 8],
        case_id=["x", "x", "y", "y"],
        latency_us=[10.0, 20.0, 40.0, 10.0],
    )
    summary = frames.policy_summary(frame).set_index("line")
    assert summary.loc["a", "geomean_slowdown"] == pytest.approx(2.0)  # sqrt(1 * 4)
    assert summary.loc["a", "worst_slowdown"] == pytest.approx(4.0)
    assert summary.loc["b", "best_on"] == 1 and summary.loc["a", "best_on"] == 1


def test_runs_table_describes_devices_and_l2():
    manifests = [
        {
            "run_id": "r2",
            "status": "running",
            "kind": "bench",
            "device": {"name": "h200", "live": False},
            "simulated": True,
            "backend": "simulator",
            "environment": {"timer": "simulated", "cold_l2": None},
        },
        {
            "run_id": "r1",
            "status": "complete",
            "device": {"name": "NVIDIA H100 80GB HBM3", "live": True},
            "simulated": False,
            "backend": "triton",
            "environment": {"timer": "cupti", "cold_l2": False},
            "has_tuning": True,
        },
        {"run_id": "bad", "status": "corrupt", "error": "manifest unreadable"},
    ]
    table = frames.runs_table(manifests)
    assert table["run"].tolist() == ["r2", "r1", "bad"]
    assert table["device"].tolist() == ["simulated (h200)", "NVIDIA H100 80GB HBM3", "?"]
    assert table["L2"].tolist() == ["n/a (model)", "hot L2", "?"]
    assert table["tuning"].tolist() == [False, True, False]
    shape = {
        "num_qo_heads": 32,
        "num_kv_heads": 8,
        "head_dim": 128,
        "page_size": 16,
        "dtype": "bf16",
    }
    assert frames.shape_text(shape) == "32 q / 8 KV heads, head_dim 128, page 16, bf16"
    assert frames.shape_text({**shape, "kv_dtype": "bf16"}) == frames.shape_text(shape)
    assert frames.shape_text({**shape, "kv_dtype": "fp8_e4m3"}).endswith("bf16, KV fp8_e4m3")


def small_result() -> TuningResult:
    params = SplitParams(min_tokens_per_cta=1024)
    bucket = BucketResult(
        name="1-8",
        min_batch=1,
        max_batch=8,
        study_name="s/1-8",
        params=params,
        score=0.9,
        worst=1.0,
        n_trials=5,
        cases=(
            CaseEvidence("c1", 4, 100.0, {"fa3": 200.0, "no-split": 100.0}),
            CaseEvidence("c2", 8, 50.0, {"fa3": 200.0, "no-split": 200.0}, oracle_us=45.0),
        ),
        finalists=(
            Finalist(params, 0.9, 0.8, 1.0, 10, chosen=True),
            Finalist(SplitParams(), 0.95, 0.95, 0.95, 4),
        ),
    )
    other = BucketResult(
        name="9-64",
        min_batch=9,
        max_batch=64,
        study_name="s/9-64",
        params=SplitParams(),
        score=1.0,
        worst=1.0,
        n_trials=5,
    )
    return TuningResult(
        "s", (other, bucket), {"name": "h200"}, {}, "simulated:h200", "simulator", True
    )


def test_tuning_tables():
    result = small_result()
    buckets = frames.bucket_table(result)
    assert buckets["bucket"].tolist() == ["1-8", "9-64"] and buckets[
        "min_tokens_per_cta"
    ].tolist() == [1024, 2048]
    fin = frames.finalists_table(result.buckets[1])
    assert fin["spread"].tolist() == pytest.approx([0.2 / 0.9, 0.0])
    assert fin["chosen"].tolist() == [True, False]
    cases = frames.case_table(result.buckets[1])
    assert cases["speedup_vs_fa3"].tolist() == [2.0, 4.0] and cases["oracle_us"].tolist()[1] == 45.0
    long = frames.case_latencies_long(result.buckets[1])
    assert long[long["case"] == "c2"]["policy"].tolist() == ["tuned", "fa3", "no-split", "oracle"]
    speed = frames.bucket_speedups(result).set_index("baseline")
    assert speed.loc["fa3", "geomean_speedup"] == pytest.approx(np.sqrt(8.0))
    assert speed.loc["no-split", "worst_speedup"] == pytest.approx(1.0)


def test_mark_tuned_names_the_winning_config_of_a_real_tuning_run(tune_run):
    from kvtune.dashboard.data import measurements
    from kvtune.kernels import policies

    result = load_tuning_result(tune_run)
    raw = measurements(tune_run).value
    marked = frames.mark_tuned(raw, result)
    tuned = marked[marked["policy"] == "tuned"]
    assert not tuned.empty and len(marked) == len(raw)
    shipped = [b for b in result.buckets if b.family != "defer"]
    assert shipped  # bucket 9-64 ships a rule; 1-8 defers to the engine's planner
    for bucket in result.buckets:
        in_bucket = tuned[tuned["batch_size"].between(bucket.min_batch, bucket.max_batch)]
        # A deferred bucket ships the engine's own planner: none of its rows is "tuned".
        assert in_bucket.empty == (bucket.family == "defer"), bucket.name
    # Every renamed row was measured with its bucket's chosen params ...
    for (_, before), (_, after) in zip(raw.loc[tuned.index].iterrows(), tuned.iterrows()):
        bucket = next(
            b for b in result.buckets if b.min_batch <= before["batch_size"] <= b.max_batch
        )
        want = bucket.params.to_dict()
        if bucket.family in ("adaptive", "makespan"):  # a per-batch winner records its knobs
            want["max_chunk_tokens"] = bucket.max_chunk_tokens
        if bucket.family == "makespan":
            want["piece_cost_tokens"] = bucket.piece_cost_tokens
        assert json.loads(before["policy_params"]) == want
    # ... and its new params rebuild the tuned table as a policy.
    policy = policies.get("tuned", **json.loads(tuned["policy_params"].iloc[0]))
    assert [b.params for b in policy.buckets] == [p for _, _, p in result.bucket_table()]
    assert (marked.loc[marked["policy"] == "parametric", "phase"] != "baseline").all()


def test_trial_and_oracle_configurations_are_grouped_series_of_their_fastest_per_case():
    frame = rows(
        policy=["fa3", "fa3", "parametric", "parametric", "tuned", "oracle-splits", "oracle-splits", "fa3"],
        policy_params=["{}", "{}", '{"a": 1}', '{"a": 2}', "{}", '{"splits": [1]}', '{"splits": [2]}', "{}"],
        phase=["baseline", "baseline", "trial", "trial", "finalist", "oracle", "oracle", "oracle"],
        batch_size=[4, 8, 4, 4, 4, 4, 4, 4],
        case_id=["c4", "c8", "c4", "c4", "c4", "c4", "c4", "c4"],
        latency_us=[10.0, 20.0, 12.0, 11.0, 9.0, 8.0, 7.0, 6.5],
    )
    ok = frames.ok_rows_with_lines(frame)
    assert sorted(ok["policy_label"].unique()) == ["best trial", "fa3", "oracle", "tuned"]
    best = ok[ok["policy_label"] == "best trial"]
    assert len(best) == 1 and best["latency_us"].iloc[0] == 11.0 and best["grouped"].all()
    oracle = ok[ok["policy_label"] == "oracle"]
    # The oracle's seed (a baseline re-measured in the oracle phase) counts for the oracle.
    assert len(oracle) == 1 and oracle["latency_us"].iloc[0] == 6.5
    assert len(ok[ok["policy_label"] == "fa3"]) == 2  # the baseline phase only
    owners = frames.line_policies(ok)
    assert set(owners["line"]) == {"fa3", "tuned"}  # grouped series have no thresholds
    summary = frames.policy_summary(frame)
    assert summary["line"].iloc[0] == "oracle" and len(summary) == 4
    named = frames.ok_rows_with_lines(frame, by_run=True, run_names={"r1": "h200 · bench-r1"})
    assert "h200 · bench-r1 · oracle" in set(named["line"])


def test_floor_points_and_the_matching_tuning_run():
    from kvtune.dashboard import compare

    frame = rows(
        policy=["fa3", "no-split", "fa3"],
        batch_size=[4, 4, 8],
        case_id=["a", "a", "b"],
        latency_us=[10.0, 20.0, 30.0],
        bytes_moved=[4.0e6, 4.0e6, 8.0e6],
        ceiling_bytes_per_s=[4.0e12] * 3,
    )
    ok = frames.ok_rows_with_lines(frame)
    floor = compare.floor_points(ok)
    assert list(floor["floor_us"]) == pytest.approx([1.0, 2.0]) and set(floor["line"]) == {"floor"}
    assert compare.floor_points(ok.drop(columns="bytes_moved")).empty

    shape = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "page_size": 16, "dtype": "bf16"}
    other = {**shape, "num_kv_heads": 4}

    def run(rid, suite, shp, device="h200", kind="bench"):
        return {"run_id": rid, "kind": kind, "suite": suite, "cases": [{"shape": shp}],
                "device": {"name": device, "live": False}}

    bench = run("b", "prod-mix", shape)
    tuning = [
        run("t-new-unrelated", "threshold", shape, kind="tune"),
        run("t-other-shape", "prod-mix", other, kind="tune"),
        run("t-other-device", "prod-mix", shape, device="h100", kind="tune"),
        run("t-match", "prod-mix", shape, kind="tune"),
    ]
    assert compare.matching_tuning_run([bench], tuning) == "t-match"
    assert compare.matching_tuning_run([bench], tuning[:3]) is None
    assert compare.matching_tuning_run([tuning[0], bench], tuning) == "t-new-unrelated"


def test_mark_tuned_follows_each_buckets_family():
    """A fixed-chunk bucket's winner is its chunk's fixed-split rows, an adaptive bucket's its
    adaptive-chunk rows of the same knobs, a deferred bucket has no winner among the trials."""
    import json as _json

    from kvtune.kernels.plan import SplitParams
    from kvtune.studies.result import BucketResult, TuningResult

    fixed, adaptive = SplitParams(2048, 16, 128, 2, "static"), SplitParams(512, 2, 64, 2, "static")
    buckets = (BucketResult("1-8", 1, 8, "s/1-8", fixed, 1.0, 1.0, 6),
               BucketResult("9-32", 9, 32, "s/9-32", adaptive, 1.0, 1.0, 6, family="adaptive",
                            max_chunk_tokens=16384),
               BucketResult("33-64", 33, 64, "s/33-64", fixed, 1.0, 1.0, 6, family="defer"))
    result = TuningResult(study="s", buckets=buckets, device={}, shape={}, kernel="k",
                          backend="flashinfer", simulated=True, rule="fixed-chunk")

    def row(policy, params, batch, bucket):
        return {"policy": policy, "policy_params": _json.dumps(params), "batch_size": batch,
                "bucket": bucket, "phase": "finalist"}

    chunk = {"chunk_tokens": 2048, "schedule": "static", "ctas_per_sm": 2}
    rows = [row("fixed-split", chunk, 4, "1-8"),
            row("fixed-split", {**chunk, "chunk_tokens": 512}, 4, "1-8"),
            row("adaptive-chunk", {**adaptive.to_dict(), "max_chunk_tokens": 16384}, 16, "9-32"),
            row("adaptive-chunk", {**adaptive.to_dict(), "max_chunk_tokens": 8192}, 16, "9-32"),
            row("fixed-split", chunk, 48, "33-64")]
    marked = frames.mark_tuned(pd.DataFrame(rows), result)
    assert list(marked["policy"]) == ["tuned", "fixed-split", "tuned", "adaptive-chunk",
                                      "fixed-split"]


def test_heuristic_notes_name_files_of_another_card_or_kernel():
    import json

    import pandas as pd

    from kvtune.dashboard.frames import heuristic_notes

    def row(series, backend, tuned_on, kernel):
        return {"series": series, "policy": "tuned", "backend": backend, "status": "ok",
                "plan_notes": json.dumps({"tuned_on": tuned_on, "tuned_kernel": kernel})}

    frame = pd.DataFrame([
        row("tuned:a", "triton", "NVIDIA H200", "triton:k2abc"),
        row("tuned:a", "triton", "NVIDIA H200", "triton:k2abc"),
        row("tuned:b", "triton", "NVIDIA H200 (planning for NVIDIA H100 80GB HBM3)",
            "triton:k2old"),
        {"series": "fa3", "policy": "fa3", "backend": "triton", "status": "ok",
         "plan_notes": "{}"}])
    notes = heuristic_notes(frame, "k2abc")
    assert len(notes) == 2
    assert notes[0].startswith("tuned:b was tuned on NVIDIA H200, planned here for NVIDIA H100")
    assert notes[1].startswith("tuned:b was tuned with another Triton decode kernel (k2old;")
    assert heuristic_notes(frame.iloc[:2], "k2abc") == []
    assert heuristic_notes(frame.drop(columns="plan_notes"), "k2abc") == []
    assert heuristic_notes(frame.iloc[:0], "k2abc") == []


def test_heuristic_verdict_lines_per_run_with_identical_launches_apart():
    import pandas as pd

    from kvtune.dashboard.frames import heuristic_verdict_lines

    def row(run, series, case, us, splits, policy):
        return {"run_id": run, "series": series, "policy": policy, "case_id": case,
                "status": "ok", "latency_us": us, "splits": splits, "schedule": "static",
                "grid_size": len(splits), "plan_notes": "{}", "kernel_config": "c",
                "prefill_tokens": float("nan"),
                "heuristic_path": "f.json" if policy == "tuned" else None}

    fi = "flashinfer-tensor-core"
    frame = pd.DataFrame([
        row("r1", "tuned:f", "a", 100.0, [1, 1], "tuned"), row("r1", fi, "a", 98.0, [1, 1], fi),
        row("r1", "tuned:f", "b", 100.0, [3, 1], "tuned"), row("r1", fi, "b", 130.0, [1, 1], fi),
        # Another run's case of the same id pairs only within its run.
        row("r2", "tuned:f", "a", 100.0, [2, 1], "tuned"), row("r2", fi, "a", 200.0, [1, 1], fi),
    ])
    lines = heuristic_verdict_lines(frame, {"r1": "h200 · one", "r2": "h200 · two"})
    assert lines == [
        (f"h200 · one: tuned:f against {fi}: 2 cases; 1 with another launch: x1.300 geomean, "
         "worst x1.300; 1 the same launch (x0.980..x0.980: the measurement's noise); all: "
         "x1.129 geomean, worst x0.980", 0),
        (f"h200 · two: tuned:f against {fi}: 1 case; 1 with another launch: x2.000 geomean, "
         "worst x2.000; all: x2.000 geomean, worst x2.000", 0)]
    assert heuristic_verdict_lines(frame[frame["policy"] != "tuned"]) == []


def test_split_counts_join_the_page_frame_so_identical_launches_are_told_apart(tmp_path):
    import pandas as pd

    from kvtune.dashboard import data
    from kvtune.dashboard.frames import (benches_a_heuristic_file, heuristic_verdict_lines,
                                         with_split_counts)

    fi = "flashinfer-tensor-core"
    rows = []
    for case, (mine, theirs) in {"a": ([1, 1], [1, 1]), "b": ([3, 1], [1, 1])}.items():
        for series, policy, splits, us in (("tuned:f", "tuned", mine, 100.0),
                                           (fi, fi, theirs, 99.0 if case == "a" else 150.0)):
            rows.append({"run_id": "r", "case_id": case, "series": series, "policy": policy,
                         "status": "ok", "latency_us": us, "splits": splits,
                         "schedule": "static", "grid_size": 8, "plan_notes": "{}",
                         "kernel_config": "c",
                         "heuristic_path": "f.json" if policy == "tuned" else None})
    run = tmp_path / "r"
    run.mkdir()
    pd.DataFrame(rows).to_parquet(run / "measurements.parquet")
    page = data.measurements(run).value.assign(run_id="r")  # per-request arrays left out
    assert "splits" not in page and benches_a_heuristic_file(page)
    assert "2 with another launch" in heuristic_verdict_lines(page)[0][0]  # nothing to tell by
    joined = with_split_counts(page, {"r": data.split_counts(run).value})
    ((line, slower),) = heuristic_verdict_lines(joined)
    assert slower == 0
    assert "1 with another launch: x1.500" in line and "1 the same launch (x0.990..x0.990" in line
    assert not benches_a_heuristic_file(page.assign(heuristic_path=None))

import json
from pathlib import Path

import numpy as np
import pytest

from kvtune.cli import main
from kvtune.workloads import traces
from kvtune.workloads.distributions import sample_kv_lens

SHARED_TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
needs_shared_traces = pytest.mark.skipif(
    not SHARED_TRACES.is_dir(),
    reason="the trace files of ../shared/data/traces are not present (they are never committed)",
)

# Decode-weighted kv_len p50 / p90 / p99 published in shared/data/traces/SOURCES.md.
SOURCES_QUANTILES = {
    "azure-code": (1587, 5027, 7476),
    "azure-conv": (1250, 1552, 4153),
    "mooncake": (7688, 29861, 87754),
    "arxiv": (2517, 3695, 3990),
    "sharegpt": (2155, 5988, 7611),
}

# context, output: decode pairs (kv_len) 6, 7 | 11 | 101, 102, 103; the 0-output row never decodes.
TINY = [(5, 2), (10, 1), (3, 0), (100, 3)]
TINY_KV_VALUES = [6, 7, 11, 101, 102, 103]


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _tiny_files(tmp_path):
    kvtune = "context_tokens,output_tokens\n" + "".join(f"{c},{o}\n" for c, o in TINY)
    azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:46.6805900,{c},{o}\n" for c, o in TINY)
    mooncake = "".join(json.dumps({"timestamp": 27 * i, "input_length": c, "output_length": o,
                                   "hash_ids": [46, 47]}) + "\n" for i, (c, o) in enumerate(TINY))
    return {
        "kvtune-csv": _write(tmp_path, "lengths.csv", kvtune),
        "azure-csv": _write(tmp_path, "AzureLLMInferenceTrace_conv.csv", azure),
        "mooncake-jsonl": _write(tmp_path, "conversation_trace.jsonl", mooncake),
    }


def test_all_three_formats_parse_to_the_same_lengths(tmp_path):
    for fmt, path in _tiny_files(tmp_path).items():
        assert traces.detect_trace_format(path) == fmt
        trace = traces.read_trace(path)
        assert trace.format == fmt
        assert trace.context_tokens.tolist() == [c for c, _ in TINY]
        assert trace.output_tokens.tolist() == [o for _, o in TINY]
        assert trace.rows == 4 and trace.decode_steps == 6


def test_unrecognised_format_names_file_and_formats(tmp_path):
    path = _write(tmp_path, "weird.csv", "prompt,completion\n1,2\n")
    with pytest.raises(ValueError, match=r"weird\.csv.*allowed formats: kvtune-csv.*azure-csv.*"
                                         r"mooncake-jsonl"):
        traces.read_trace(path)
    jsonl = _write(tmp_path, "other.jsonl", '{"prompt_len": 3}\n')
    with pytest.raises(ValueError, match="other.jsonl"):
        sample_kv_lens("trace", 4, {"path": str(jsonl)})


def test_bad_rows_and_missing_files(tmp_path):
    neg = _write(tmp_path, "neg.csv", "context_tokens,output_tokens\n5,2\n-1,3\n")
    with pytest.raises(ValueError, match=r"neg\.csv.*context_tokens of request 1 is -1"):
        traces.read_trace(neg)
    frac = _write(tmp_path, "frac.csv", "context_tokens,output_tokens\n5,2.5\n")
    with pytest.raises(ValueError, match="output_tokens of request 0"):
        traces.read_trace(frac)
    silent = _write(tmp_path, "silent.csv", "context_tokens,output_tokens\n5,0\n")
    with pytest.raises(ValueError, match="no request decodes"):
        traces.read_trace(silent)
    broken = _write(tmp_path, "broken.jsonl", '{"input_length": 3, "output_length": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"broken\.jsonl.*line 2"):
        traces.read_trace(broken)
    with pytest.raises(ValueError, match="path: .*not a file"):
        traces.read_trace(tmp_path / "absent.csv")


def test_decode_weighted_sampling_matches_the_exact_distribution(tmp_path):
    path = _tiny_files(tmp_path)["mooncake-jsonl"]
    n = 60_000
    kv = sample_kv_lens("trace", n, {"path": str(path)}, seed=11)
    values, counts = np.unique(kv, return_counts=True)
    # every (request, step) pair is equally likely: six values, 1/6 each
    assert values.tolist() == TINY_KV_VALUES
    assert np.abs(counts / n - 1 / 6).max() < 0.01
    # the same seed gives the same batch whatever the file format
    csv = _tiny_files(tmp_path)["kvtune-csv"]
    assert np.array_equal(sample_kv_lens("trace", 100, {"path": str(csv)}, seed=3),
                          sample_kv_lens("trace", 100, {"path": str(path)}, seed=3))


def test_exact_counts_and_quantiles_match_enumeration():
    rng = np.random.default_rng(0)
    context = rng.integers(0, 300, size=200)
    output = rng.integers(0, 40, size=200)
    pairs = np.sort(np.concatenate([c + np.arange(1, o + 1) for c, o in zip(context, output)]))
    counts = traces.decode_kv_len_counts(context, output)
    assert counts.sum() == pairs.size
    assert np.array_equal(np.flatnonzero(counts), np.unique(pairs))
    q = traces.decode_weighted_quantiles(context, output, 101)
    for k in range(101):
        rank = max(1, -(-k * pairs.size // 100))  # smallest x with >= rank pairs <= x
        assert q[k] == pairs[rank - 1]
    assert q[0] == pairs[0] and q[-1] == pairs[-1]


def test_tiny_trace_quantiles_by_hand():
    c, o = zip(*TINY)
    assert traces.decode_weighted_quantiles(np.array(c), np.array(o), 3).tolist() == [6, 11, 103]
    with pytest.raises(ValueError, match="num_quantiles"):
        traces.decode_weighted_quantiles(np.array(c), np.array(o), 1)


def test_committed_table_has_provenance_and_valid_quantiles():
    raw = json.loads(traces.TRACE_QUANTILES_PATH.read_text())
    assert raw["num_quantiles"] >= 1001 and "exact" in raw["method"]
    assert set(raw["traces"]) == set(traces.BUILTIN_TRACES)
    for name, entry in raw["traces"].items():
        origin = traces.BUILTIN_TRACES[name]
        assert entry["source"] == origin.source and "@" in entry["source"]
        assert entry["license"] and entry["attribution"] and entry["rows"] > 1000
        q = np.asarray(entry["kv_len_quantiles"])
        assert q.shape == (raw["num_quantiles"],) and (np.diff(q) >= 0).all() and q[0] >= 1
    # only derived tables ship with the package, never a trace
    data_dir = traces.TRACE_QUANTILES_PATH.parent
    assert {p.suffix for p in data_dir.iterdir() if p.is_file()} == {".json"}


@pytest.mark.parametrize("name", list(SOURCES_QUANTILES))
def test_sampled_builtin_matches_published_quantiles(name):
    kv = traces.sample_builtin_kv_lens(name, 200_000, np.random.default_rng(5))
    got = np.percentile(kv, [50, 90, 99])
    want = np.asarray(SOURCES_QUANTILES[name], dtype=float)
    assert np.all(np.abs(got / want - 1) < 0.03), (name, got, want)


def test_bad_table_is_a_value_error(tmp_path):
    bad = _write(tmp_path, "table.json", '{"num_quantiles": 3, "traces": {"x": '
                                         '{"kv_len_quantiles": [5, 4, 9]}}}')
    with pytest.raises(ValueError, match=r"trace_quantiles: .*table\.json"):
        traces.load_trace_quantiles(str(bad))
    with pytest.raises(ValueError, match="trace_quantiles"):
        traces.load_trace_quantiles(str(_write(tmp_path, "junk.json", "{nope")))


@needs_shared_traces
def test_table_quantiles_match_sources_md():
    table = traces.build_trace_quantiles(SHARED_TRACES)
    for name, want in SOURCES_QUANTILES.items():
        entry = table["traces"][name]
        got = np.array([entry["kv_len_p50"], entry["kv_len_p90"], entry["kv_len_p99"]])
        assert np.all(np.abs(got / np.asarray(want) - 1) < 0.01), (name, got, want)


@needs_shared_traces
def test_committed_table_is_what_the_builder_writes(tmp_path):
    out = tmp_path / "rebuilt.json"
    assert main(["traces", "build-quantiles", str(SHARED_TRACES), "--output", str(out)]) == 0
    assert out.read_text() == traces.TRACE_QUANTILES_PATH.read_text()


@needs_shared_traces
def test_file_sampling_agrees_with_the_table():
    path = SHARED_TRACES / traces.BUILTIN_TRACES["mooncake"].file
    from_file = traces.sample_decode_kv_lens(traces.read_trace(path), 200_000,
                                             np.random.default_rng(1))
    from_table = traces.sample_builtin_kv_lens("mooncake", 200_000, np.random.default_rng(2))
    for p in (10, 50, 90, 99):
        assert abs(np.percentile(from_file, p) / np.percentile(from_table, p) - 1) < 0.03


def test_builder_cli_reports_bad_folder(tmp_path, capsys):
    assert main(["traces", "build-quantiles", str(tmp_path / "nowhere")]) == 2
    assert "traces_dir" in capsys.readouterr().err

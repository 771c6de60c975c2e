"""Request lengths from LLM serving traces, as a decode batch sees them.

A decode kernel never sees a trace's raw prompt length. In steady state a request is in its decode
phase with probability proportional to its output length, at a uniformly random step of it. The
convention used everywhere in kvtune: a request with `context_tokens` c and `output_tokens` o runs
o decode steps s = 1..o, and at step s its kv_len (tokens the kernel reads, the token being
appended included) is `c + s`. Every (request, step) pair is equally likely, so a request is drawn
with weight o and its step uniformly from 1..o. Requests with o = 0 never decode.

Two ways to sample:
- from a trace file at run time (`read_trace` + `sample_decode_kv_lens`); three formats are
  recognised by their first line (TRACE_FORMATS);
- from a built-in name (BUILTIN_TRACES) through a quantile table that `build_trace_quantiles`
  computes exactly from the trace files and that ships in workloads/data/trace_quantiles.json.
  The trace files themselves are never part of the project: only the derived table is, with each
  trace's source and license next to its numbers.

Rebuild the table with: python -m workloads.traces build-quantiles /work/shared/data/traces
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

TRACE_QUANTILES_PATH = Path(__file__).with_name("data") / "trace_quantiles.json"
DEFAULT_NUM_QUANTILES = 1001

TRACE_FORMATS = {
    "kvtune-csv": "CSV with header context_tokens,output_tokens",
    "azure-csv": "Azure LLM inference CSV with header TIMESTAMP,ContextTokens,GeneratedTokens",
    "mooncake-jsonl": "Mooncake JSONL, one object per line with input_length and output_length",
}
_CSV_COLUMNS = {
    "kvtune-csv": ("context_tokens", "output_tokens"),
    "azure-csv": ("ContextTokens", "GeneratedTokens"),
}


@dataclass(frozen=True)
class TraceOrigin:
    """Where a built-in trace comes from: file name in the traces folder, repository @ commit and
    path of the original, its license and the attribution the license asks for."""

    file: str
    source: str
    license: str
    attribution: str


# Facts from shared/data/traces/SOURCES.md. The numbers of the table are computed, never typed in.
BUILTIN_TRACES: dict[str, TraceOrigin] = {
    "azure-conv": TraceOrigin(
        "azure2023_conv_lengths.csv",
        "Azure/AzurePublicDataset @ b469a113, data/AzureLLMInferenceTrace_conv.csv",
        "CC-BY-4.0",
        'Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", '
        "ISCA 2024; Azure LLM inference trace 2023",
    ),
    "azure-code": TraceOrigin(
        "azure2023_code_lengths.csv",
        "Azure/AzurePublicDataset @ b469a113, data/AzureLLMInferenceTrace_code.csv",
        "CC-BY-4.0",
        'Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", '
        "ISCA 2024; Azure LLM inference trace 2023",
    ),
    "mooncake": TraceOrigin(
        "mooncake_conversation_lengths.csv",
        "kvcache-ai/Mooncake @ 3b5a5941, FAST25-release/traces/conversation_trace.jsonl",
        "Apache-2.0",
        'Qin et al., "Mooncake: Trading More Storage for Less Computation", FAST 2025; '
        "conversation trace",
    ),
    "arxiv": TraceOrigin(
        "vidur_arxiv_summarization_lengths.csv",
        "microsoft/vidur @ 7d47513, "
        "data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
        "MIT",
        'Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM Inference", '
        "MLSys 2024; arXiv summarization lengths, Llama-2 tokenizer",
    ),
    "sharegpt": TraceOrigin(
        "etalon_sharegpt_8k_lengths.csv",
        "project-etalon/etalon @ d5f18de, "
        "data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
        "Apache-2.0 (repository); ShareGPT content license unclear",
        "project-etalon/etalon; ShareGPT conversations, 8K-filtered lengths, Llama-2 tokenizer",
    ),
}

QUANTILE_METHOD = (
    "Every (request, decode step) pair of the trace counts once: for step s = 1..output_tokens the "
    "kv_len is context_tokens + s (requests with output_tokens = 0 never decode). quantile(p) is the "
    "smallest kv_len x such that at least max(1, ceil(p * decode_steps)) pairs have kv_len <= x, "
    "computed exactly from integer counts over all pairs (no sampling). Probabilities are "
    "k / (num_quantiles - 1), k = 0..num_quantiles-1. Sampling a built-in name draws p uniformly "
    "in [0, 1), interpolates linearly between neighbouring quantiles and rounds to the nearest "
    "integer (at least 1)."
)


@dataclass(frozen=True, eq=False)
class TraceLengths:
    """Per-request lengths of a trace file, in trace order.

    context_tokens: [N] int64 >= 0, prompt tokens. output_tokens: [N] int64 >= 0, generated tokens.
    format: a key of TRACE_FORMATS.
    """

    path: str
    format: str
    context_tokens: np.ndarray
    output_tokens: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.context_tokens.shape[0])

    @property
    def decode_steps(self) -> int:
        """Number of (request, decode step) pairs: the sum of output_tokens."""
        return int(self.output_tokens.sum())


def detect_trace_format(path: str | os.PathLike) -> str:
    """The TRACE_FORMATS key of the file at `path`, from its first non-empty line.

    Raises ValueError naming the file and the allowed formats when none matches.
    """
    first = ""
    try:
        with open(path, encoding="utf-8-sig") as f:
            for line in f:
                if line.strip():
                    first = line.strip()
                    break
    except UnicodeDecodeError as exc:
        raise ValueError(f"path: {os.fspath(path)!r} is not UTF-8 text (byte {exc.start}: a binary "
                         "or UTF-16 file?); allowed: a UTF-8 CSV or JSONL trace") from None
    except OSError as exc:
        raise ValueError(f"path: cannot read {os.fspath(path)!r} ({exc.strerror})") from None
    if "\x00" in first:
        raise ValueError(f"path: {os.fspath(path)!r} holds NUL characters (a binary or UTF-16 "
                         "file?); allowed: a UTF-8 CSV or JSONL trace")
    if first.startswith("{"):
        try:
            obj = _json_line(first)
        except json.JSONDecodeError:
            obj = {}
        except ValueError as exc:  # nested too deep, or an integer of thousands of digits
            raise ValueError(f"path: {os.fspath(path)!r} line 1: {exc}") from None
        if isinstance(obj, dict) and {"input_length", "output_length"} <= obj.keys():
            return "mooncake-jsonl"
    else:
        header = {col.strip() for col in first.split(",")}
        for fmt, cols in _CSV_COLUMNS.items():
            if set(cols) <= header:
                return fmt
    raise ValueError(
        f"path: {os.fspath(path)!r} is not a recognised trace; allowed formats: "
        + "; ".join(f"{k} ({v})" for k, v in TRACE_FORMATS.items())
    )


def read_trace(path: str | os.PathLike) -> TraceLengths:
    """Read the lengths of a trace file in any of TRACE_FORMATS (detected automatically).

    Raises ValueError naming the file for a missing file, an unknown format, a non-integer or
    negative length, or a trace in which no request decodes (every output_tokens is 0).
    Results are cached per (path, modification time, size); the arrays are read-only.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path: {os.fspath(path)!r} is not a file")
    st = p.stat()
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"path: cannot read {os.fspath(path)!r} ({exc.strerror})") from None
    return _read_trace_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)


# A JSON line nested deeper than this is not a trace record (and would exhaust the recursion of
# Python's parser); integers longer than this many digits are past any token count.
MAX_JSON_LINE_DEPTH = 32
MAX_INT_DIGITS = 18
MAX_TRACE_TOKENS = 2**40  # lengths above this are not token counts (and would pass int64 math)


def _json_line(line: str):
    """json.loads of one trace line, refusing deep nesting and giant integers up front."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in line:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_LINE_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_LINE_DEPTH} levels")
        elif ch in "]}":
            depth -= 1

    def bounded_int(text: str):
        if len(text.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError(f"an integer of {len(text.lstrip('-'))} digits; allowed: at most "
                             f"{MAX_INT_DIGITS}")
        return int(text)

    return json.loads(line, parse_int=bounded_int)


@functools.lru_cache(maxsize=16)
def _read_trace_cached(path: str, _mtime_ns: int, _size: int) -> TraceLengths:
    fmt = detect_trace_format(path)
    try:
        return _read_trace_file(path, fmt)
    except UnicodeDecodeError as exc:
        raise ValueError(f"path: {path!r} is not UTF-8 text (byte {exc.start}: a binary or UTF-16 "
                         "file?); allowed: a UTF-8 CSV or JSONL trace") from None


def _read_trace_file(path: str, fmt: str) -> TraceLengths:
    if fmt == "mooncake-jsonl":
        context, output = [], []
        with open(path, encoding="utf-8-sig") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = _json_line(line)
                    context.append(obj["input_length"])
                    output.append(obj["output_length"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(
                        f"path: {path!r} line {lineno}: need a JSON object with input_length and "
                        f"output_length ({' '.join(str(exc).split())[:120]})"
                    ) from None
                for key in ("input_length", "output_length"):
                    value = obj[key]
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        raise ValueError(f"path: {path!r} line {lineno}: {key} is {str(value)[:40]!r}; "
                                         "allowed: an integer >= 0")
        raw = np.array([context, output], dtype=object).T if context else np.zeros((0, 2))
    else:
        cols = _CSV_COLUMNS[fmt]
        try:
            frame = pd.read_csv(path, usecols=list(cols), skipinitialspace=True,
                                encoding="utf-8-sig")
        except ValueError as exc:  # pandas' parser errors are ValueErrors without the file name
            raise ValueError(f"path: {path!r} is not a valid {fmt} file ({exc})") from None
        raw = frame[list(cols)].to_numpy(dtype=object)
    context_tokens, output_tokens = (_as_token_column(path, fmt, raw[:, j], j) for j in (0, 1))
    if context_tokens.shape[0] == 0:
        raise ValueError(f"path: {path!r} holds no requests")
    if not (output_tokens > 0).any():
        raise ValueError(f"path: {path!r}: every output length is 0, so no request decodes")
    for arr in (context_tokens, output_tokens):
        arr.flags.writeable = False
    return TraceLengths(path, fmt, context_tokens, output_tokens)


def _as_token_column(path: str, fmt: str, values: np.ndarray, which: int) -> np.ndarray:
    name = (_CSV_COLUMNS.get(fmt) or ("input_length", "output_length"))[which]
    try:
        as_float = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"path: {path!r}: column {name} holds a non-number") from None
    bad = (~np.isfinite(as_float) | (as_float < 0) | (as_float != np.round(as_float))
           | (as_float > MAX_TRACE_TOKENS))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"path: {path!r}: {name} of request {row} is {str(values[row])[:40]}; allowed: "
            f"integers 0..{MAX_TRACE_TOKENS}"
        )
    return as_float.astype(np.int64)


def sample_decode_kv_lens(trace: TraceLengths, batch_size: int,
                          rng: np.random.Generator) -> np.ndarray:
    """kv_lens of `batch_size` decode requests drawn from `trace` the way a decode batch sees them.

    One integer r uniform in [0, decode_steps) picks a (request, step) pair exactly: request i owns
    r in [cum_i - o_i, cum_i) and its step is s = r - (cum_i - o_i) + 1, so kv_len = c_i + s.
    Returns int64 [batch_size] tokens.
    """
    ends = np.cumsum(trace.output_tokens)
    r = rng.integers(0, int(ends[-1]), size=batch_size, dtype=np.int64)
    request = np.searchsorted(ends, r, side="right")
    step = r - (ends[request] - trace.output_tokens[request]) + 1
    return trace.context_tokens[request] + step


def decode_kv_len_counts(context_tokens: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """counts[x] = number of (request, step) pairs whose kv_len is x tokens (x = 0..max kv_len).

    Exact: request i adds one pair to every x in c_i + 1 .. c_i + o_i, done as a difference array.
    """
    c = np.asarray(context_tokens, dtype=np.int64)
    o = np.asarray(output_tokens, dtype=np.int64)
    size = int((c + o).max()) + 2
    diff = np.bincount(c + 1, minlength=size) - np.bincount(c + o + 1, minlength=size)
    return np.cumsum(diff)[:-1]


def decode_weighted_quantiles(context_tokens: np.ndarray, output_tokens: np.ndarray,
                              num_quantiles: int = DEFAULT_NUM_QUANTILES) -> np.ndarray:
    """Exact quantiles of the decode-weighted kv_len at probabilities k / (num_quantiles - 1).

    quantile(p) = smallest x with at least max(1, ceil(p * pairs)) pairs of kv_len <= x. Integer
    arithmetic throughout, so the result does not depend on the machine. Returns int64
    [num_quantiles], non-decreasing, first = smallest kv_len, last = largest.
    """
    if isinstance(num_quantiles, bool) or not isinstance(num_quantiles, int) or num_quantiles < 2:
        raise ValueError(f"num_quantiles: {num_quantiles!r}; allowed: an integer >= 2")
    cumulative = np.cumsum(decode_kv_len_counts(context_tokens, output_tokens))
    pairs = int(cumulative[-1])
    if pairs == 0:
        raise ValueError("output_tokens: all zero, no request decodes")
    last = num_quantiles - 1
    need = np.array([max(1, -(-k * pairs // last)) for k in range(num_quantiles)], dtype=np.int64)
    return np.searchsorted(cumulative, need, side="left").astype(np.int64)


def build_trace_quantiles(traces_dir: str | os.PathLike,
                          num_quantiles: int = DEFAULT_NUM_QUANTILES) -> dict:
    """The quantile table of every BUILTIN_TRACES name, from the trace files in `traces_dir`.

    Returns a JSON-ready dict: method, num_quantiles, and per name the source, license,
    attribution, file, input_sha256, rows, decode_steps, kv_len p50/p90/p99 and kv_len_quantiles.
    """
    folder = Path(traces_dir)
    if not folder.is_dir():
        raise ValueError(f"traces_dir: {os.fspath(traces_dir)!r} is not a folder")
    traces = {}
    for name, origin in BUILTIN_TRACES.items():
        path = folder / origin.file
        trace = read_trace(path)
        quantiles = decode_weighted_quantiles(trace.context_tokens, trace.output_tokens,
                                              num_quantiles)
        probs = np.linspace(0.0, 1.0, num_quantiles)
        traces[name] = {
            "source": origin.source,
            "license": origin.license,
            "attribution": origin.attribution,
            "file": origin.file,
            "input_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "rows": trace.rows,
            "decode_steps": trace.decode_steps,
            **{f"kv_len_p{p}": int(_lookup(probs, quantiles, p / 100)) for p in (50, 90, 99)},
            "kv_len_quantiles": [int(q) for q in quantiles],
        }
    return {
        "description": "Quantiles of the decode-weighted kv_len (tokens) of public serving traces",
        "generated_by": "python -m workloads.traces build-quantiles <traces folder>",
        "method": QUANTILE_METHOD,
        "num_quantiles": num_quantiles,
        "traces": traces,
    }


def _lookup(probs: np.ndarray, quantiles: np.ndarray, p: float) -> int:
    return int(quantiles[int(np.argmin(np.abs(probs - p)))])


def write_trace_quantiles(table: dict, path: str | os.PathLike = TRACE_QUANTILES_PATH) -> None:
    """Write `table` as JSON, each list of quantiles on one line so the file stays short."""
    text = json.dumps(table, indent=2)
    text = re.sub(r"\[[\d,\s]+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(0)[1:-1].split(",")) + "]",
                  text)
    Path(path).write_text(text + "\n", encoding="utf-8")


@functools.lru_cache(maxsize=4)
def load_trace_quantiles(path: str | os.PathLike = TRACE_QUANTILES_PATH) -> dict:
    """The quantile table at `path` as {name: {"probabilities": [n], "quantiles": [n], ...}}.

    Raises ValueError naming the file for malformed JSON or a table that breaks its invariants
    (wrong length, decreasing quantiles, a kv_len < 1).
    """
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))
        n = int(table["num_quantiles"])
        entries = table["traces"]
        out = {}
        for name, entry in entries.items():
            q = np.asarray(entry["kv_len_quantiles"], dtype=np.int64)
            if q.shape != (n,) or (np.diff(q) < 0).any() or q[0] < 1:
                raise ValueError(f"{name}: kv_len_quantiles must be {n} non-decreasing values >= 1")
            q.flags.writeable = False
            out[name] = {**{k: v for k, v in entry.items() if k != "kv_len_quantiles"},
                         "quantiles": q}
        probs = np.linspace(0.0, 1.0, n)
        probs.flags.writeable = False
        for entry in out.values():
            entry["probabilities"] = probs
        return out
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"trace_quantiles: {os.fspath(path)!r} is not a valid table ({exc})") from None


def builtin_trace_names() -> list[str]:
    return list(BUILTIN_TRACES)


def sample_builtin_kv_lens(name: str, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """kv_lens of `batch_size` requests from built-in trace `name` by inverse CDF of its table.

    u uniform in [0, 1), kv_len = round(interp(u, probabilities, quantiles)), at least 1.
    Returns int64 [batch_size] tokens.
    """
    table = load_trace_quantiles()
    if name not in table:
        raise ValueError(f"distribution: {name!r} is not a built-in trace; allowed: "
                         f"{', '.join(table)}")
    entry = table[name]
    u = rng.random(batch_size)
    kv = np.rint(np.interp(u, entry["probabilities"], entry["quantiles"])).astype(np.int64)
    return np.maximum(kv, 1)


__all__ = [
    "BUILTIN_TRACES",
    "TRACE_FORMATS",
    "TRACE_QUANTILES_PATH",
    "TraceLengths",
    "TraceOrigin",
    "build_trace_quantiles",
    "builtin_trace_names",
    "decode_kv_len_counts",
    "decode_weighted_quantiles",
    "detect_trace_format",
    "load_trace_quantiles",
    "read_trace",
    "sample_builtin_kv_lens",
    "sample_decode_kv_lens",
    "write_trace_quantiles",
]



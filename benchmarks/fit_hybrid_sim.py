"""Fit the hybrid simulator's constants to a GPU run of benchmarks/bench_hybrid.py.

    python benchmarks/fit_hybrid_sim.py RESULTS.json [--json OUT.json]
        [--held-out OTHER.json ...] [--by-source]

RESULTS.json is bench_hybrid.py's output (its cases, each variant's median_us, the device). The
cases are rebuilt from their case ids (workloads.hybrid.HybridCase, deterministic), every variant
is planned again with its policy and simulated (harness/sim_hybrid.py) on the run's device.

Fit, three 1-D searches of the median log error, each on the rows that constant sets:
1. `prefill_efficiency` (the fraction of the tensor-core peak a prefill tile reaches) on the
   `prefill-alone` rows (a prefill batch alone is compute-bound: its time is the one number that
   constant sets);
2. then `decode_cta_rate_cap_bytes_per_s` (the most bytes/s one decode program of the hybrid
   kernel streams) on the two-launch rows (serial, streams, decode-alone) of the
   continuous-batching cases (case param source=continuous) whose decodes ran those programs
   (rows recorded with decode_kernel true ran kernels/decode.py instead). Why those: only
   there does one long unsplit decode outlast the rest of the step, so that one program's rate
   sets the time;
   the sweep's many equal decodes get shares of the bandwidth below any cap from about 18 GB/s
   up, so they cannot fix it (they are checked, held out). Two-launch only: a one-launch
   kernel adds one_launch_decode_efficiency, colocated its co-location limit
   (harness/sim_hybrid.py), so either would be fitted into the cap. Skipped, with a line saying
   so, where the run has none;
3. then `one_launch_decode_efficiency` (the share of the bandwidth a decode task keeps in a
   one-launch kernel that also holds prefill tiles) on the `fused` rows (the only constant a
   fused launch adds; after the cap, since a fused decode task keeps that cap); skipped, with a
   line saying so, where the run has no fused rows.
With --fp8, RESULTS.json is benchmarks/bench_hybrid_fp8.py's output (bf16, fp8 and fp8-tile
rows of the serial and colocated policies) and the fit is of the two fp8 terms instead, each a
1-D search of the same kind on the serial rows: `fp8_decode_efficiency` on the `serial fp8`
rows whose decodes ran the hybrid kernel's items (recorded before kernels/decode.py took
single-token decodes) and the `serial fp8-items` rows (the step with the 16-bit copy of its
prefill pages: its decode items are the fp8 part left), then `fp8_tile_prefill_efficiency` on
the `serial fp8-tile` rows (no copy). Held out: the colocated rows, and the bf16 rows, which
neither term may move.
Held out: everything else (pod, partitioned, colocated, the tuned grid, the sweep's serial,
streams and decode-alone rows) and every row of another run given to --held-out; --by-source
splits each table by case source, so that the sweep's rows can be checked apart.
Prints the median and worst relative error per variant before (the defaults) and after;
nothing is written into the project (set the defaults in harness/sim_hybrid.py from what it
prints, with the run named there).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from kvtune.harness.sim_hybrid import HybridSimConstants, simulate_hybrid
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape, DeviceSpec
from kvtune.workloads.batch import AttentionBatch
from kvtune.workloads.hybrid import HybridCase

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hybrid import TRITON_VARIANTS, sub_batch  # noqa: E402  (the run's variant table)

# The variants as bench_hybrid.py ran them (its table), and the two halves it timed with the
# serial policy on their own.
VARIANT_POLICIES = {**TRITON_VARIANTS, "prefill-alone": ("hybrid-serial", {}),
                    "decode-alone": ("hybrid-serial", {})}


def case_from_id(case_id: str, shape: AttentionShape) -> HybridCase:
    """The HybridCase of an id like hybrid:B16:seed0:chunk_tokens=512,context_tokens=4096."""
    _, b, seed, *rest = case_id.split(":")
    params = {}
    for kv in (rest[0].split(",") if rest else []):
        k, v = kv.split("=")
        params[k] = v if k == "source" else int(v)
    return HybridCase(params, int(b[1:]), shape, int(seed[4:]))


def variant_batch(batch: AttentionBatch, name: str) -> AttentionBatch | None:
    """The batch a variant ran: the whole one, or bench_hybrid's prefill / decode half."""
    if name == "prefill-alone":
        return sub_batch(batch, batch.is_prefill)
    if name == "decode-alone":
        return sub_batch(batch, ~batch.is_prefill)
    return batch


def rows(results: dict) -> list[dict]:
    """(case, variant, plan, shape, gpu us, continuous) of every ok variant with a time;
    continuous: the case is a continuous-batching step (param source=continuous)."""
    shape = AttentionShape(**results["shape"])
    device = DeviceSpec(**results["device"])
    out = []
    for entry in results["cases"]:
        case = case_from_id(entry["case_id"], shape)
        batch = case.batch()
        for name, r in entry["variants"].items():
            if not r.get("ok") or not r.get("median_us") or name.startswith("flashinfer"):
                continue
            if name in VARIANT_POLICIES:
                pol, kw = VARIANT_POLICIES[name]
            elif name.startswith("tuned") and isinstance(r.get("params"), dict):
                pol, kw = "hybrid-parametric", r["params"]
            else:
                continue
            sub = variant_batch(batch, name)
            if sub is None:
                continue
            plan = policies.get(pol, **kw).plan_hybrid(sub.q_lens, sub.kv_lens, shape, device)
            out.append({"case": entry["case_id"], "variant": name.rstrip("0123456789"),
                        "plan": plan, "shape": shape, "device": device,
                        "gpu_us": float(r["median_us"]),
                        "continuous": case.params["source"] == "continuous",
                        # Rows without the field ran every decode through the hybrid kernel's
                        # items (before kernels/decode.py took single-token decodes).
                        "decode_kernel": r.get("decode_kernel", False)})
    return out


def errors(data: list[dict], hybrid: HybridSimConstants, by_source: bool = False) -> dict:
    """{variant: [sim / gpu - 1 per row]}; by_source: keyed "variant (sweep|continuous)"."""
    by = {}
    for d in data:
        sim = simulate_hybrid(d["plan"], d["shape"], d["device"], hybrid=hybrid,
                              widen_prefill=d.get("widen_prefill"),
                              decode_kernel=d.get("decode_kernel")).time_us
        key = d["variant"]
        if by_source:
            key += " (continuous)" if d["continuous"] else " (sweep)"
        by.setdefault(key, []).append(sim / d["gpu_us"] - 1.0)
    return by


# Search grids: the efficiencies 0.10 .. 1.00 (step 0.01); the decode program's cap 5 .. 60 GB/s
# (step 0.5 GB/s), around the 14-17 GB/s the H200's longest decode task averaged over its step.
FRACTION_GRID = np.round(np.arange(0.10, 1.0001, 0.01), 2)
CAP_GRID_BYTES_PER_S = np.arange(5, 60.001, 0.5) * 1e9
# The variants whose decode launch is a plain grid of the hybrid kernel's decode items and
# nothing else: the rows that fit the decode program's cap (on continuous-batching cases).
CAP_VARIANTS = ("serial", "streams", "decode-alone")


def _fit_one(train: list[dict], start: HybridSimConstants, field: str,
             grid: np.ndarray) -> HybridSimConstants:
    """`field` on `grid` minimising |median log(sim / gpu)| over all rows of `train`; ties go to
    the smallest value."""

    def loss(value: float) -> float:
        by = errors(train, replace(start, **{field: float(value)}))
        e = np.concatenate([np.asarray(v) for v in by.values()])
        return abs(float(np.median(np.log1p(e))))

    return replace(start, **{field: float(min(grid, key=loss))})


def cap_rows(data: list[dict]) -> list[dict]:
    """The rows that fit decode_cta_rate_cap_bytes_per_s (module docstring, step 2)."""
    return [d for d in data if d["continuous"] and d["variant"] in CAP_VARIANTS
            and not d.get("decode_kernel")]


def fit(data: list[dict], start: HybridSimConstants) -> HybridSimConstants:
    """prefill_efficiency on the prefill-alone rows, then decode_cta_rate_cap_bytes_per_s on
    cap_rows, then one_launch_decode_efficiency on the fused rows (each of the last two kept at
    start's value where its rows are missing)."""
    train = [d for d in data if d["variant"] == "prefill-alone"]
    if not train:
        raise ValueError("results: no prefill-alone rows to fit prefill_efficiency on")
    out = _fit_one(train, start, "prefill_efficiency", FRACTION_GRID)
    if cap_rows(data):
        out = _fit_one(cap_rows(data), out, "decode_cta_rate_cap_bytes_per_s",
                       CAP_GRID_BYTES_PER_S)
    fused = [d for d in data if d["variant"] == "fused"]
    if fused:
        out = _fit_one(fused, out, "one_launch_decode_efficiency", FRACTION_GRID)
    return out


def table(by: dict) -> list[str]:
    lines = ["| variant | rows | median error | worst |", "|---|---|---|---|"]
    for name, e in sorted(by.items()):
        e = np.asarray(e)
        worst = e[np.argmax(np.abs(e))]
        lines.append(f"| {name} | {e.size} | {np.median(e):+.1%} | {worst:+.1%} |")
    return lines


def start_constants(items: list[str]) -> HybridSimConstants:
    """HybridSimConstants() with each FIELD=VALUE of `items` replaced (ValueError naming it)."""
    fields = set(HybridSimConstants.__dataclass_fields__)
    kw = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in fields:
            raise ValueError(f"--start: {name!r} unknown; allowed: {sorted(fields)}")
        try:
            kw[name] = float(value)
        except ValueError:
            raise ValueError(f"--start {name}: {value!r} is not a number") from None
    return HybridSimConstants(**kw)


# The fitted constants, in the order fit() searches them.
FITTED = ("prefill_efficiency", "decode_cta_rate_cap_bytes_per_s",
          "one_launch_decode_efficiency")


FITTED_FP8 = ("fp8_decode_efficiency", "fp8_tile_prefill_efficiency")


def load_rows(path: str) -> list[dict]:
    with open(path) as f:
        return rows(json.load(f))


def fp8_rows(results: dict) -> list[dict]:
    """bench_hybrid_fp8.py's rows as fit rows, variant "POLICY KIND" (e.g. "serial fp8-tile"):
    its batches rebuilt (the `hybrid` suite's generator, llama3-8b, bf16 queries), fp8-tile rows
    simulated without the 16-bit copy."""
    device = DeviceSpec(**results["device"])
    out = []
    for r in results["rows"]:
        if r["variant"] not in ("bf16", "fp8", "fp8-tile", "bf16-items", "fp8-items") \
                or not r.get("ok") \
                or not r.get("median_us"):
            continue
        shape = AttentionShape(dtype="bf16", kv_dtype="bf16" if r["variant"].startswith("bf16")
                               else "fp8_e4m3")
        b = HybridCase({"context_tokens": r["context"], "chunk_tokens": r["chunk"]},
                       r["decodes"], shape).batch()
        plan = policies.get(r["policy"]).plan_hybrid(b.q_lens, b.kv_lens, shape, device)
        out.append({"case": f"{r['context']},{r['chunk']},{r['decodes']}",
                    "variant": f"{r['policy'].removeprefix('hybrid-')} {r['variant']}",
                    "plan": plan, "shape": shape, "device": device,
                    "gpu_us": float(r["median_us"]), "continuous": False,
                    "widen_prefill": False if r["variant"] == "fp8-tile" else None,
                    # Rows without the field ran before single-token decodes of serial steps
                    # went through kernels/decode.py: the hybrid kernel's items.
                    "decode_kernel": r.get("decode_kernel", False)
                    and not r["variant"].endswith("-items")})
    return out


def fit_fp8(data: list[dict], start: HybridSimConstants) -> HybridSimConstants:
    """fp8_decode_efficiency on the `serial fp8` rows, then fp8_tile_prefill_efficiency on the
    `serial fp8-tile` rows (module docstring, --fp8)."""
    out = start
    for field, variant in (("fp8_decode_efficiency", "serial fp8"),
                           ("fp8_tile_prefill_efficiency", "serial fp8-tile")):
        train = [d for d in data if d["variant"] in (variant, variant + "-items")]
        if field == "fp8_decode_efficiency":
            # Only steps whose decodes ran the hybrid kernel's items say anything about them.
            train = [d for d in train if not d.get("decode_kernel")]
        if not train:
            raise ValueError(f"results: no '{variant}' rows to fit {field} on")
        out = _fit_one(train, out, field, FRACTION_GRID)
    return out


def _plain(by: dict) -> dict:
    return {k: list(map(float, v)) for k, v in by.items()}


def fit_lines(data: list[dict], before: HybridSimConstants,
              after: HybridSimConstants) -> list[str]:
    """One line per fitted constant: before -> after, and the rows it was fitted on (or why
    not)."""
    n_pre = sum(d["variant"] == "prefill-alone" for d in data)
    n_cap = len(cap_rows(data))
    n_fused = sum(d["variant"] == "fused" for d in data)
    how = {"prefill_efficiency": f"(fitted on {n_pre} prefill-alone rows)",
           "decode_cta_rate_cap_bytes_per_s":
               f"(fitted on {n_cap} continuous-batching {'/'.join(CAP_VARIANTS)} rows)" if n_cap
               else "(not fitted: no continuous-batching two-launch rows)",
           "one_launch_decode_efficiency": f"(fitted on {n_fused} fused rows)" if n_fused
               else "(not fitted: no fused rows)"}
    return [f"{name}: {_show(name, getattr(before, name))} -> "
            f"{_show(name, getattr(after, name))} {how[name]}" for name in FITTED]


def _show(name: str, value: float) -> str:
    return f"{value / 1e9:g} GB/s" if name.endswith("_bytes_per_s") else f"{value:g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--json", help="write the fitted constants and both tables here")
    ap.add_argument("--held-out", action="append", default=[], metavar="RESULTS.json",
                    help="another run of bench_hybrid.py (same device): print its errors before "
                         "and after too, never fitted on")
    ap.add_argument("--by-source", action="store_true",
                    help="also print each run's errors split by case source (sweep, continuous)")
    ap.add_argument("--fp8", action="store_true",
                    help="RESULTS.json is bench_hybrid_fp8.py's: fit the two fp8 terms")
    ap.add_argument("--start", action="append", default=[], metavar="FIELD=VALUE",
                    help="a HybridSimConstants field for the 'before' model (default: the "
                         "defaults), e.g. one_launch_decode_efficiency=1 for the model without it")
    args = ap.parse_args(argv)
    try:
        before = start_constants(args.start)
    except ValueError as e:
        ap.error(str(e))  # one line, exit 2
    if args.fp8:
        with open(args.results) as f:
            data = fp8_rows(json.load(f))
        try:
            after = fit_fp8(data, before)
        except ValueError as e:
            ap.error(str(e))  # one line, exit 2
        fitted = FITTED_FP8
        for name in fitted:
            print(f"{name}: {getattr(before, name)} -> {getattr(after, name)}")
    else:
        data = load_rows(args.results)
        after = fit(data, before)
        fitted = FITTED
        for line in fit_lines(data, before, after):
            print(line)
    b, a = errors(data, before), errors(data, after)
    print("\nbefore\n" + "\n".join(table(b)) + "\n\nafter\n" + "\n".join(table(a)))
    held = {}
    for path in args.held_out:
        other = load_rows(path)
        held[path] = {"before": errors(other, before), "after": errors(other, after)}
        print(f"\nheld out: {path}\nbefore\n" + "\n".join(table(held[path]["before"]))
              + "\n\nafter\n" + "\n".join(table(held[path]["after"])))
    if args.by_source:
        for path, d in ((args.results, data), *((p, load_rows(p)) for p in args.held_out)):
            print(f"\nby source: {path}\nbefore\n" + "\n".join(table(errors(d, before, True)))
                  + "\n\nafter\n" + "\n".join(table(errors(d, after, True))))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**{name: getattr(after, name) for name in fitted},
                       "before": _plain(b), "after": _plain(a),
                       "held_out": {p: {k: _plain(v) for k, v in h.items()}
                                    for p, h in held.items()}}, f, indent=1)
    return 0 if all(math.isfinite(x) for v in a.values() for x in v) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Fit the hybrid simulator's constants to a GPU run of benchmarks/bench_hybrid.py.

    python benchmarks/fit_hybrid_sim.py RESULTS.json [--json OUT.json]

RESULTS.json is bench_hybrid.py's output (its cases, each variant's median_us, the device). The
cases are rebuilt from their case ids (workloads.hybrid.HybridCase, deterministic), every variant
is planned again with its policy and simulated (harness/sim_hybrid.py) on the run's device.

Fit, two 1-D searches of the median log error, each on one variant's rows only:
1. `prefill_efficiency` (the fraction of the tensor-core peak a prefill tile reaches) on the
   `prefill-alone` rows (a prefill batch alone is compute-bound: its time is the one number that
   constant sets);
2. then `one_launch_decode_efficiency` (the rate a decode task keeps in a one-launch kernel that
   also holds prefill tiles) on the `fused` rows (the only constant a fused launch adds); skipped,
   with a line saying so, where the run has no fused rows.
Held out: everything else (serial, streams, pod, partitioned, the tuned grid, decode-alone).
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
    """(case, variant, plan, shape, gpu us) of every ok variant with a time."""
    shape = AttentionShape(**results["shape"])
    device = DeviceSpec(**results["device"])
    out = []
    for entry in results["cases"]:
        batch = case_from_id(entry["case_id"], shape).batch()
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
                        "gpu_us": float(r["median_us"])})
    return out


def errors(data: list[dict], hybrid: HybridSimConstants) -> dict:
    by = {}
    for d in data:
        sim = simulate_hybrid(d["plan"], d["shape"], d["device"], hybrid=hybrid).time_us
        by.setdefault(d["variant"], []).append(sim / d["gpu_us"] - 1.0)
    return by


def _fit_one(train: list[dict], variant: str, start: HybridSimConstants,
             field: str) -> HybridSimConstants:
    """`field` on the grid 0.10 .. 1.00 (step 0.01) minimising |median log(sim / gpu)| over
    `train` (the rows of `variant`); ties go to the smallest value."""

    def loss(value: float) -> float:
        e = errors(train, replace(start, **{field: float(value)}))[variant]
        return abs(float(np.median(np.log1p(e))))

    grid = np.round(np.arange(0.10, 1.0001, 0.01), 2)
    return replace(start, **{field: float(min(grid, key=loss))})


def fit(data: list[dict], start: HybridSimConstants) -> HybridSimConstants:
    """prefill_efficiency on the prefill-alone rows, then one_launch_decode_efficiency on the
    fused rows (kept at start's value where there are none)."""
    train = [d for d in data if d["variant"] == "prefill-alone"]
    if not train:
        raise ValueError("results: no prefill-alone rows to fit prefill_efficiency on")
    out = _fit_one(train, "prefill-alone", start, "prefill_efficiency")
    fused = [d for d in data if d["variant"] == "fused"]
    if fused:
        out = _fit_one(fused, "fused", out, "one_launch_decode_efficiency")
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--json", help="write the fitted constants and both tables here")
    ap.add_argument("--start", action="append", default=[], metavar="FIELD=VALUE",
                    help="a HybridSimConstants field for the 'before' model (default: the "
                         "defaults), e.g. one_launch_decode_efficiency=1 for the model without it")
    args = ap.parse_args(argv)
    try:
        before = start_constants(args.start)
    except ValueError as e:
        ap.error(str(e))  # one line, exit 2
    with open(args.results) as f:
        results = json.load(f)
    data = rows(results)
    after = fit(data, before)
    b, a = errors(data, before), errors(data, after)
    n_fused = len(b.get("fused", []))
    print(f"prefill_efficiency: {before.prefill_efficiency} -> {after.prefill_efficiency} "
          f"(fitted on {len(b.get('prefill-alone', []))} prefill-alone rows)")
    print(f"one_launch_decode_efficiency: {before.one_launch_decode_efficiency} -> "
          f"{after.one_launch_decode_efficiency} "
          + (f"(fitted on {n_fused} fused rows)" if n_fused else "(not fitted: no fused rows)"))
    print("\nbefore\n" + "\n".join(table(b)) + "\n\nafter\n" + "\n".join(table(a)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"prefill_efficiency": after.prefill_efficiency,
                       "one_launch_decode_efficiency": after.one_launch_decode_efficiency,
                       "before": {k: list(map(float, v)) for k, v in b.items()},
                       "after": {k: list(map(float, v)) for k, v in a.items()}}, f, indent=1)
    return 0 if all(math.isfinite(x) for v in a.values() for x in v) else 1


if __name__ == "__main__":
    raise SystemExit(main())

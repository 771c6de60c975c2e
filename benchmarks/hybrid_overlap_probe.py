"""Probe: can two concurrent launches (prefill and decode on two CUDA streams) share SMs?

    python3 benchmarks/hybrid_overlap_probe.py --out $OUT [--dry-run] [--reps 10]

Issue 15's two-launch `streams` schedule measured about as slow as `serial` on an H200: the decode
kernel, launched first, takes every SM's shared memory and registers, so the prefill CTAs wait.
This probe times, on the cases of benchmarks/bench_hybrid.py (the paper's sweep), the `streams`
plan with the prefill launch first and smaller footprints, so that one prefill CTA and a decode
CTA fit one SM (228 KB of shared memory, 64 K registers): prefill tiles of 64 or 128 rows (4 or 8
warps), decode pipelines of 1-2 stages. Serial and the default streams launch are the baselines
of the same call, and prefill alone / decode alone give the max(prefill, decode) bound. Every
variant's output is checked against the float64 reference before it is timed; the device copy
bandwidth is measured in the same process. Writes OUT/overlap_probe.json and prints a table.
An experiment, not a schedule of the product: what it finds decides whether `streams` gets
these knobs (docs/KERNEL_NOTES.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hybrid import (  # noqa: E402  (the benchmark's cases, data, check and timers)
    BatchData,
    EventTimer,
    WallTimer,
    check_launch,
    copy_bandwidth,
    dry_cases,
    geomean,
    gpu_cases,
    sub_batch,
    time_launch,
)

from kvtune.kernels import policies  # noqa: E402
from kvtune.kernels.hybrid import prepare_hybrid  # noqa: E402
from kvtune.kernels.plan import AttentionShape, DeviceSpec  # noqa: E402

# (label, hybrid policy kwargs, HybridConfig overrides)
VARIANTS = [
    ("serial", ("hybrid-serial", {}), {}),
    ("streams", ("hybrid-streams", {}), {}),
    ("pf128-d2", ("hybrid-streams", {"prefill_block_m": 128}), {"prefill_first": True, "num_stages": 2}),
    ("pf64-d2", ("hybrid-streams", {"prefill_block_m": 64}), {"prefill_first": True, "num_stages": 2}),
    ("pf64-d1", ("hybrid-streams", {"prefill_block_m": 64}), {"prefill_first": True, "num_stages": 1}),
    ("pf64-s2-d2", ("hybrid-streams", {"prefill_block_m": 64}),
     {"prefill_first": True, "num_stages": 2, "prefill_stages": 2}),
    # Co-location (eighth session): one kind as a persistent grid of k programs per SM,
    # launched first, so that it holds only part of every SM; the other kind's grid fills the
    # rest. Footprints from a local sm_90 compile: 64-row prefill tile at 4 warps 32 K registers,
    # 80 KB (2 stages) / 112 KB (3 stages); decode item 14 K registers, 38 KB.
    ("coP1-s2", ("hybrid-streams", {"prefill_block_m": 64}),
     {"persistent_prefill_per_sm": 1, "prefill_stages": 2}),
    ("coP1-s3", ("hybrid-streams", {"prefill_block_m": 64}),
     {"persistent_prefill_per_sm": 1, "prefill_stages": 3}),
    ("coD2", ("hybrid-streams", {"prefill_block_m": 64}), {"persistent_decode_per_sm": 2}),
    ("coD1", ("hybrid-streams", {"prefill_block_m": 64}), {"persistent_decode_per_sm": 1}),
    # ... with a tail: as many prefill programs again, launched after the decodes on their
    # stream, share the prefill counter; and decodes through the page-ahead loop (aN sS: N keys
    # per step, S stages; 32 keys 4 stages: 10.5 K registers, 53 KB, two beside a 3-stage
    # prefill CTA; 64 keys 3 stages: 18 K, 70 KB, one beside it).
    ("coP1-s3-T1", ("hybrid-streams", {"prefill_block_m": 64}),
     {"persistent_prefill_per_sm": 1, "prefill_tail_per_sm": 1, "prefill_stages": 3}),
    ("coP1-s3-T1-a32s4", ("hybrid-streams", {"prefill_block_m": 64}),
     {"persistent_prefill_per_sm": 1, "prefill_tail_per_sm": 1, "prefill_stages": 3,
      "decode_ahead": True, "ahead_block_n": 32, "ahead_stages": 4}),
    ("coP1-s2-T1-a32s4", ("hybrid-streams", {"prefill_block_m": 64}),
     {"persistent_prefill_per_sm": 1, "prefill_tail_per_sm": 1, "prefill_stages": 2,
      "decode_ahead": True, "ahead_block_n": 32, "ahead_stages": 4}),
    ("coP1-s3-T1-a64s3", ("hybrid-streams", {"prefill_block_m": 64}),
     {"persistent_prefill_per_sm": 1, "prefill_tail_per_sm": 1, "prefill_stages": 3,
      "decode_ahead": True, "ahead_block_n": 64, "ahead_stages": 3}),
    # Eighth session, call 3: a 128-row prefill tile at 8 warps capped at R registers (200: 50 K
    # per CTA, 28 spill bytes in a local compile) and one page-ahead decode CTA of W warps
    # beside it; no tail (the capped tile alone holds a whole SM's warps once the decodes end).
    ("coP1-m128r200-a32s4w4", ("hybrid-streams", {"prefill_block_m": 128}),
     {"persistent_prefill_per_sm": 1, "prefill_maxnreg": 200, "prefill_stages": 3,
      "decode_ahead": True, "ahead_block_n": 32, "ahead_stages": 4}),
    ("coP1-m128r200-a32s4w2", ("hybrid-streams", {"prefill_block_m": 128}),
     {"persistent_prefill_per_sm": 1, "prefill_maxnreg": 200, "prefill_stages": 3,
      "decode_ahead": True, "ahead_block_n": 32, "ahead_stages": 4, "decode_warps": 2}),
    ("coP1-m128r200s2-a64s4w2", ("hybrid-streams", {"prefill_block_m": 128}),
     {"persistent_prefill_per_sm": 1, "prefill_maxnreg": 200, "prefill_stages": 2,
      "decode_ahead": True, "ahead_block_n": 64, "ahead_stages": 4, "decode_warps": 2}),
    ("coP1-m128r168-a32s4w4", ("hybrid-streams", {"prefill_block_m": 128}),
     {"persistent_prefill_per_sm": 1, "prefill_maxnreg": 168, "prefill_stages": 3,
      "decode_ahead": True, "ahead_block_n": 32, "ahead_stages": 4}),
    ("coP1-s3-T1-a32s4w2", ("hybrid-streams", {"prefill_block_m": 64}),
     {"persistent_prefill_per_sm": 1, "prefill_tail_per_sm": 1, "prefill_stages": 3,
      "decode_ahead": True, "ahead_block_n": 32, "ahead_stages": 4, "decode_warps": 2}),
    ("streams-a32s4", ("hybrid-streams", {}),
     {"decode_ahead": True, "ahead_block_n": 32, "ahead_stages": 4}),
    ("streams-a64s4", ("hybrid-streams", {}),
     {"decode_ahead": True, "ahead_block_n": 64, "ahead_stages": 4}),
]
VARIANT_NAMES = [v[0] for v in VARIANTS]


def run_variant(data: BatchData, spec, timer, policy, overrides: dict) -> dict:
    b = data.batch
    plan = policy.plan_hybrid(b.q_lens, b.kv_lens, b.shape, spec)
    launch = prepare_hybrid(plan, data.cache, b.q_lens)
    if overrides:
        # persistent_<kind>_per_sm: k programs per SM of the device the plan was made for
        fields = {(k.replace("_per_sm", "_programs") if k.endswith("_per_sm") else k):
                  (v * spec.sm_count if k.endswith("_per_sm") else v) for k, v in overrides.items()}
        launch = dataclasses.replace(launch, config=dataclasses.replace(launch.config, **fields))

    row = check_launch(launch, data)
    row.update({"prefill_block_m": plan.prefill_block_m,
                "config": dataclasses.asdict(launch.config)})
    if row["ok"]:
        row.update(time_launch(launch, data, timer))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "overlap_probe_out"))
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--variants", default=",".join(VARIANT_NAMES),
                    help="comma-separated labels (serial is always run: the baseline)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    dry = args.dry_run or not torch.cuda.is_available()
    if dry:
        shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=16,
                               dtype="fp16")
        dtype, device, timer = torch.float16, "cpu", WallTimer()
        spec = DeviceSpec("interpreter", sm_count=4, l2_bytes=0, hbm_bytes_per_s=1e11)
        cases = dry_cases(shape)
    else:
        from kvtune.harness.device import live_device

        shape, dtype, device = AttentionShape(), torch.bfloat16, "cuda"
        spec, timer, cases = live_device(), EventTimer(args.reps), gpu_cases(shape)[:8]
    wanted = set(args.variants.split(","))
    results = {"device": spec.to_dict(), "dry_run": dry, "timer": timer.name,
               "copy": copy_bandwidth(timer, device), "cases": []}
    for case in cases:
        batch = case.batch()
        data = BatchData(batch, device, dtype)
        entry = {"case_id": case.case_id, "variants": {}}
        for label, (name, kw), overrides in VARIANTS:
            if label != "serial" and label not in wanted:
                continue
            entry["variants"][label] = run_variant(data, spec, timer, policies.get(name, **kw),
                                                   overrides)
        for label, mask in (("prefill-alone", batch.is_prefill), ("decode-alone", ~batch.is_prefill)):
            sub = sub_batch(batch, mask)
            if sub is not None:
                entry["variants"][label] = run_variant(BatchData(sub, device, dtype), spec, timer,
                                                       policies.get("hybrid-serial"), {})
        results["cases"].append(entry)
        line = " ".join(f"{k}={v.get('median_us', float('nan')):.1f}{'' if v['ok'] else '(FAIL)'}"
                        for k, v in entry["variants"].items())
        print(f"{case.case_id}: {line}", flush=True)
        with open(os.path.join(args.out, "overlap_probe.json"), "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    # Speed-up over serial per variant (geomean over the cases where both ran and were checked).
    for label, _, _ in VARIANTS[1:]:
        if label not in wanted:
            continue
        r = [e["variants"]["serial"]["median_us"] / e["variants"][label]["median_us"]
             for e in results["cases"]
             if e["variants"][label].get("median_us") and e["variants"]["serial"].get("median_us")]
        print(f"{label}: x{geomean(r):.3f} over serial (geomean of {len(r)} cases)")
    bound = [e["variants"]["serial"]["median_us"]
             / max(e["variants"]["prefill-alone"]["median_us"], e["variants"]["decode-alone"]["median_us"])
             for e in results["cases"] if all(e["variants"].get(k, {}).get("median_us")
                                              for k in ("serial", "prefill-alone", "decode-alone"))]
    print(f"bound max(prefill, decode): x{geomean(bound):.3f} over serial")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Probe: which prefill tile configuration of the hybrid kernel runs a prefill chunk fastest?

    python3 benchmarks/prefill_tile_probe.py --out $OUT [--dry-run] [--reps 10] [--flashinfer]

Issue 15's prefill-only batches run 1.36x slower than FlashInfer's BatchPrefill on an H200
(eighth session: 761 vs 560 us), and every hybrid step carries a prefill part. The hybrid
kernel's prefill tile (kernels/hybrid.py `_prefill_task`) is set by the plan's
`prefill_block_m` (query rows: tokens x G) and by HybridConfig's `block_np` (keys per step),
`prefill_warps` and `prefill_stages` (hybrid_config: 64 keys, 8 warps for 128 rows and 4 for 64,
3 stages at head_dim <= 128). This probe times prefill-only batches under other values of those
four (TILES), against the default of the same call and, with --flashinfer, FlashInfer's
BatchPrefill on the same pages (after every tile of every batch: its JIT is built then, in this
process). Every variant's output
is checked against the float64 causal reference (NaN-poisoned output) before it is timed; a
variant that fails to compile or check is recorded and never timed. Timer: bench_hybrid's
(CUDA events around one call, L2 flushed outside them, median of --reps). The copy bandwidth of
the same process is recorded; rows give TFLOP/s of the causal FLOPs. Writes
OUT/prefill_tile_probe.json and prints a table. An experiment: what it finds decides
hybrid_config's prefill entries (docs/KERNEL_NOTES.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hybrid import (  # noqa: E402  (data and timers of the hybrid benchmark)
    BatchData,
    EventTimer,
    WallTimer,
    copy_bandwidth,
    time_flashinfer,
)
from hybrid_overlap_probe import run_variant  # noqa: E402  (plan, override, check, time)

from kvtune.kernels import policies  # noqa: E402
from kvtune.kernels.plan import AttentionShape, DeviceSpec  # noqa: E402
from kvtune.workloads.batch import AttentionBatch  # noqa: E402

# (label, prefill_block_m, HybridConfig overrides); "default" is hybrid_config's own choice.
TILES = [
    ("default", 128, {}),
    # the Triton tile (kernels/hybrid.py _prefill_task) where the default is the Gluon one
    ("triton", 128, {"prefill_wgmma": False}),
    ("m128-n128-w8-s2", 128, {"block_np": 128, "prefill_warps": 8, "prefill_stages": 2,
                              "prefill_wgmma": False}),
    ("m128-n64-w8-s4", 128, {"block_np": 64, "prefill_warps": 8, "prefill_stages": 4,
                             "prefill_wgmma": False}),
    ("m128-n64-w8-s2", 128, {"block_np": 64, "prefill_warps": 8, "prefill_stages": 2,
                             "prefill_wgmma": False}),
    ("m128-n64-w4-s3", 128, {"block_np": 64, "prefill_warps": 4, "prefill_stages": 3,
                             "prefill_wgmma": False}),
    ("m128-n32-w8-s4", 128, {"block_np": 32, "prefill_warps": 8, "prefill_stages": 4,
                             "prefill_wgmma": False}),
    ("m64-default", 64, {"prefill_wgmma": False}),
    ("m64-n128-w4-s2", 64, {"block_np": 128, "prefill_warps": 4, "prefill_stages": 2,
                            "prefill_wgmma": False}),
    ("m64-n64-w4-s4", 64, {"block_np": 64, "prefill_warps": 4, "prefill_stages": 4,
                           "prefill_wgmma": False}),
    # kernels/prefill_wgmma.py (Gluon, sm_90): asynchronous products beside the softmax
    ("wgmma-n64-s3", 128, {"prefill_wgmma": True, "wgmma_block_n": 64, "wgmma_stages": 3}),
    ("wgmma-n64-s2", 128, {"prefill_wgmma": True, "wgmma_block_n": 64, "wgmma_stages": 2}),
    ("wgmma-n64-s4", 128, {"prefill_wgmma": True, "wgmma_block_n": 64, "wgmma_stages": 4}),
    ("wgmma-n128-s2", 128, {"prefill_wgmma": True, "wgmma_block_n": 128, "wgmma_stages": 2}),
    ("wgmma-n128-s3", 128, {"prefill_wgmma": True, "wgmma_block_n": 128, "wgmma_stages": 3}),
    # 64-row tiles, one warpgroup: two programs per SM drift apart, so one's softmax can run
    # beside the other's products (FA3's ping-pong between warpgroups, by the block scheduler)
    ("wgmma-m64-n64-s2", 64, {"prefill_wgmma": True, "wgmma_block_n": 64, "wgmma_stages": 2}),
    ("wgmma-m64-n64-s3", 64, {"prefill_wgmma": True, "wgmma_block_n": 64, "wgmma_stages": 3}),
    ("wgmma-m64-n128-s2", 64, {"prefill_wgmma": True, "wgmma_block_n": 128, "wgmma_stages": 2}),
]
# Prefill-only batches: (chunk tokens, prefix tokens); kv_len = prefix + chunk, causal inside.
GPU_BATCHES = ((2048, 8192), (512, 4096), (2048, 16384), (1536, 12288))
DRY_BATCHES = ((40, 50),)


def run_tile(data: BatchData, spec, timer, block_m: int, overrides: dict) -> dict:
    """One tile configuration through the overlap probe's run_variant (plan, config overrides,
    check against the reference, time), with the tile's settings and TFLOP/s added."""
    row = run_variant(data, spec, timer, policies.get("hybrid-serial", prefill_block_m=block_m),
                      overrides)
    cfg = row["config"]
    row.update(block_np=cfg["block_np"], prefill_warps=cfg["prefill_warps"],
               prefill_stages=cfg["prefill_stages"], prefill_wgmma=cfg["prefill_wgmma"],
               wgmma_block_n=cfg["wgmma_block_n"], wgmma_stages=cfg["wgmma_stages"])
    if row["ok"]:
        row["tflops"] = data.batch.causal_flops / (row["median_us"] * 1e-6) / 1e12
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "prefill_tile_probe_out"))
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, a tiny batch")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--flashinfer", action="store_true",
                    help="also time FlashInfer's BatchPrefill on the same pages (JIT first)")
    ap.add_argument("--tiles", default=",".join(t[0] for t in TILES),
                    help="comma-separated labels of TILES (default: all)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    labels = [t[0] for t in TILES]
    wanted = args.tiles.split(",")
    unknown = [w for w in wanted if w not in labels]
    if unknown:
        print(f"prefill_tile_probe: error: --tiles: {', '.join(unknown)} unknown; allowed: "
              f"{', '.join(labels)}", file=sys.stderr)
        return 2
    dry = args.dry_run or not torch.cuda.is_available()
    if dry:
        shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=16,
                               dtype="fp16")
        dtype, device, timer, batches = torch.float16, "cpu", WallTimer(), DRY_BATCHES
        spec = DeviceSpec("interpreter", sm_count=4, l2_bytes=0, hbm_bytes_per_s=1e11)
    else:
        from kvtune.harness.device import live_device

        shape, dtype, device = AttentionShape(), torch.bfloat16, "cuda"
        spec, timer, batches = live_device(), EventTimer(args.reps), GPU_BATCHES
    results = {"device": spec.to_dict(), "dry_run": dry, "timer": timer.name,
               "shape": shape.to_dict(), "copy": copy_bandwidth(timer, device), "cases": [],
               "skipped": []}
    for chunk, prefix in batches:
        batch = AttentionBatch([chunk], [prefix + chunk], shape)
        data = BatchData(batch, device, dtype)
        entry = {"chunk_tokens": chunk, "prefix_tokens": prefix, "flops": batch.causal_flops,
                 "tiles": {}}
        for label, block_m, overrides in TILES:
            if label not in wanted and label != "default":
                continue
            if overrides.get("prefill_wgmma") and dry:
                # Gluon has no interpreter: the Gluon tile runs only on an sm_90 GPU.
                if label not in results["skipped"]:
                    results["skipped"].append(label)
                continue
            entry["tiles"][label] = run_tile(data, spec, timer, block_m, overrides)
        results["cases"].append(entry)
        base = entry["tiles"]["default"].get("median_us")
        line = " ".join(
            f"{k}={v.get('median_us', float('nan')):.1f}"
            + ("" if v.get("ok") else "(FAIL)")
            + (f"[x{base / v['median_us']:.2f}]" if base and v.get("median_us") else "")
            for k, v in entry["tiles"].items())
        print(f"prefill {chunk} after {prefix}: {line}", flush=True)
        with open(os.path.join(args.out, "prefill_tile_probe.json"), "w") as fh:
            json.dump(results, fh, indent=1, default=str)
        del data
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    # FlashInfer after every Triton tile (its JIT, minutes on a fresh machine, must not cost the
    # tiles their time), on the same batches rebuilt from the same seed.
    if args.flashinfer and not dry:
        for entry in results["cases"]:
            chunk, prefix = entry["chunk_tokens"], entry["prefix_tokens"]
            batch = AttentionBatch([chunk], [prefix + chunk], shape)
            r = time_flashinfer(BatchData(batch, device, dtype), "serial", timer)
            if r.get("ok"):
                r["tflops"] = batch.causal_flops / (r["median_us"] * 1e-6) / 1e12
                r["default_over_flashinfer"] = (entry["tiles"]["default"].get("median_us",
                                                                              float("nan"))
                                                / r["median_us"])
            entry["tiles"]["flashinfer-prefill"] = r
            print(f"prefill {chunk} after {prefix}: flashinfer-prefill="
                  f"{r.get('median_us', float('nan')):.1f}{'' if r.get('ok') else '(FAIL)'}",
                  flush=True)
            with open(os.path.join(args.out, "prefill_tile_probe.json"), "w") as fh:
                json.dump(results, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

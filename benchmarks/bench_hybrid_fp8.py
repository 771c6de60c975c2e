"""GPU benchmark: the Triton hybrid kernel on fp8 (e4m3) pages beside 16-bit pages of one batch.

For each case (a prefill chunk after a context, beside decodes of that context: the `hybrid`
suite's batches) and each named hybrid policy (serial, colocated by default), in one process:
  bf16       the batch on bf16 pages;
  fp8        the same batch on e4m3 pages as the product runs it: prefill tiles read a 16-bit copy
             of their requests' pages, widened by one launch at the start of the step
             (kernels/hybrid.py PrefillPages);
  fp8-tile   the same fp8 launch without the copy: prefill tiles widen each K/V tile where they
             load it (the path above hybrid_plan.PREFILL_WIDEN_MAX_BYTES, and the only path
             before the copy existed);
  widen      the copy's launch alone (part of `fp8`);
  bf16-items, fp8-items   where the step's single-token decodes run kernels/decode.py (serial,
             streams), the same step with them as the hybrid kernel's decode items instead
             (prepare_hybrid(decode_kernel=False); every step ran so before this variant existed);
  bf16-dk, fp8-dk   where they do not by default but can (colocated), the same step with its
             decodes through kernels/decode.py (prepare_hybrid(decode_kernel=True)).
Every variant's output is checked against the float64 reference of its own cache (the
dequantised values for fp8) before it is timed; a failed check is recorded and never timed.
Timer: bench_hybrid.py's CUDA-event pairs, L2 flushed before each, median of --reps.

  PYTHONPATH=/tmp/site python3 benchmarks/bench_hybrid_fp8.py --out $OUT
  python benchmarks/bench_hybrid_fp8.py --dry-run --out /tmp/hfp8     # CPU, interpreter
Writes results.json and results.md to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import traceback

if "--dry-run" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from bench_hybrid import (BatchData, EventTimer, WallTimer, check_and_time,  # noqa: E402
                          copy_bandwidth)
from kvtune.kernels import policies  # noqa: E402
from kvtune.kernels.hybrid import prepare_hybrid, widen_prefill_pages  # noqa: E402
from kvtune.kernels.hybrid_plan import decode_kernel_allowed  # noqa: E402
from kvtune.kernels.plan import AttentionShape, DeviceSpec  # noqa: E402
from kvtune.workloads.hybrid import HybridCase  # noqa: E402

# (context tokens, chunk tokens, decodes): the suite's sweep corners and middle.
GPU_CASES = [(8192, 1024, 16), (8192, 1024, 64), (4096, 512, 128), (8192, 2048, 128),
             (16384, 2048, 32), (20480, 1024, 8)]
DRY_CASES = [(48, 24, 3)]


def parse_cases(text: str) -> list[tuple[int, int, int]]:
    """'8192x1024x16;4096x512x128' -> [(8192, 1024, 16), (4096, 512, 128)]."""
    cases = []
    for part in filter(None, text.split(";")):
        try:
            ctx, chunk, b = (int(x) for x in part.split("x"))
        except ValueError:
            raise ValueError(f"--cases: {part!r} is not CONTEXTxCHUNKxDECODES (three integers)")
        if min(ctx, chunk, b) < 1:
            raise ValueError(f"--cases: {part!r}: every number must be >= 1")
        cases.append((ctx, chunk, b))
    return cases


def run_case(params, device, spec, timer, policy_names, dry) -> list[dict]:
    """The rows of one (context, chunk, decodes) case: every policy x variant."""
    ctx, chunk, b = params
    rows = []
    for kv in ("bf16", "fp8_e4m3"):
        if dry:
            shape = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=16,
                                   dtype="bf16", kv_dtype=kv)
        else:
            shape = AttentionShape(dtype="bf16", kv_dtype=kv)  # llama3-8b, page 16
        batch = HybridCase({"context_tokens": ctx, "chunk_tokens": chunk}, b, shape).batch()
        # The reference is of the cache's own values (the dequantised ones for fp8).
        data = BatchData(batch, device, torch.bfloat16)
        cache = data.cache
        for name in policy_names:
            plan = policies.get(name).plan_hybrid(batch.q_lens, batch.kv_lens, shape, spec)
            launch = prepare_hybrid(plan, cache, batch.q_lens)
            base = "bf16" if kv == "bf16" else "fp8"
            variants = {base: launch}
            if kv != "bf16" and launch.prefill_pages is not None:
                variants["fp8-tile"] = dataclasses.replace(launch, prefill_pages=None)
            if launch.decode_kernel is not None:  # the decodes as the hybrid kernel's items
                variants[f"{base}-items"] = prepare_hybrid(plan, cache, batch.q_lens,
                                                           decode_kernel=False)
            elif decode_kernel_allowed(plan):  # colocated: the decodes through decode.py
                variants[f"{base}-dk"] = prepare_hybrid(plan, cache, batch.q_lens,
                                                        decode_kernel=True)
            for variant, lch in variants.items():
                rows.append({"context": ctx, "chunk": chunk, "decodes": b, "policy": name,
                             "variant": variant, "launches": lch.num_launches,
                             **check_and_time(lch, data, timer)})
            if kv != "bf16" and launch.prefill_pages is not None and name == policy_names[0]:
                pages = launch.prefill_pages
                row = {"context": ctx, "chunk": chunk, "decodes": b, "policy": "-",
                       "variant": "widen", "ok": True, "pages": int(pages.k.shape[0]),
                       "bytes": int(pages.k.numel() * 2 * (1 + pages.k.element_size()))}
                row.update(timer(lambda p=pages, c=cache: widen_prefill_pages(p, c)))
                src = pages.src_pages.long()
                row["ok"] = bool(torch.equal(pages.k, cache.k_pages[src].to(pages.k.dtype)))
                rows.append(row)
        del data, cache
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def markdown(results: dict) -> str:
    """One line per (case, policy): bf16, fp8, fp8-tile latencies and their ratios."""
    by = {}
    widen = {}
    for r in results["rows"]:
        key = (r["context"], r["chunk"], r["decodes"])
        if r["variant"] == "widen":
            widen[key] = r
            continue
        by.setdefault(key + (r["policy"],), {})[r["variant"]] = r
    lines = [f"copy bandwidth {results['copy']['bytes_per_s'] / 1e12:.3f} TB/s; "
             f"timer: {results['timer']}", "",
             "| case (context, chunk, decodes) | policy | bf16 us | fp8 us | fp8-tile us | "
             "fp8 / bf16 | fp8-tile / fp8 | widen us (GB/s) | bf16-items / bf16 | "
             "fp8-items / fp8 | bf16-dk / bf16 | fp8-dk / fp8 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def us(r):
        return r.get("median_us", math.nan) if r and r.get("ok") else math.nan
    for key, v in by.items():
        b, f, t = us(v.get("bf16")), us(v.get("fp8")), us(v.get("fp8-tile"))
        w = widen.get(key[:3])
        wtxt = (f"{w['median_us']:.1f} ({w['bytes'] / w['median_us'] / 1e3:.0f})"
                if w and w.get("median_us") else "-")
        bi, fi = us(v.get("bf16-items")), us(v.get("fp8-items"))
        bd, fd = us(v.get("bf16-dk")), us(v.get("fp8-dk"))
        lines.append(f"| {key[0]}, {key[1]}, {key[2]} | {key[3]} | {b:.1f} | {f:.1f} | {t:.1f} | "
                     f"{f / b:.3f} | {t / f:.3f} | {wtxt} | {bi / b:.3f} | {fi / f:.3f} | "
                     f"{bd / b:.3f} | {fd / f:.3f} |")
    bad = [r for r in results["rows"] if not r.get("ok")]
    lines += ["", f"{len(results['rows'])} rows, {len(bad)} not ok"
              + "".join(f"\n- {r['policy']} {r['variant']}: {r.get('message')}" for r in bad)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_hybrid_fp8_out"))
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, a tiny case")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--policies", default="hybrid-serial,hybrid-colocated")
    ap.add_argument("--cases", default=None, help="CONTEXTxCHUNKxDECODES;... (default: "
                    "GPU_CASES)")
    args = ap.parse_args(argv)
    dry = args.dry_run or not torch.cuda.is_available()
    try:
        cases = parse_cases(args.cases) if args.cases else (DRY_CASES if dry else GPU_CASES)
        names = [n for n in args.policies.split(",") if n]
        for n in names:
            policies.get(n).plan_hybrid  # noqa: B018 - an unknown name fails here, not later
    except (ValueError, KeyError, AttributeError) as exc:
        print(f"bench_hybrid_fp8: error: {exc}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    device = "cpu" if dry else "cuda"
    if dry:
        spec = DeviceSpec("interpreter", sm_count=4, l2_bytes=0, hbm_bytes_per_s=1e11)
        timer = WallTimer()
    else:
        from kvtune.harness.device import live_device

        spec = live_device()
        timer = EventTimer(args.reps)
    results = {"device": spec.to_dict(), "dry_run": dry, "timer": timer.name,
               "torch": torch.__version__, "rows": [], "skipped": []}
    results["copy"] = copy_bandwidth(timer, device)
    t0 = time.time()
    for params in cases:
        if time.time() - t0 > args.budget_s:
            results["skipped"].append(list(params))
            continue
        try:
            results["rows"] += run_case(params, device, spec, timer, names, dry)
        except Exception as exc:  # noqa: BLE001 - one case's failure is recorded, the run goes on
            results["rows"].append({"context": params[0], "chunk": params[1],
                                    "decodes": params[2], "policy": "-", "variant": "error",
                                    "ok": False, "message": f"{type(exc).__name__}: {exc}"})
            traceback.print_exc()
        print(f"[{time.time() - t0:6.1f}s] case {params}: {len(results['rows'])} rows", flush=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=float)
    md = markdown(results)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=float)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU check of kernels/prefill_wgmma.py (the Gluon prefill tile) over shapes, dtypes, pages and
batch kinds: every case runs the hybrid-serial plan twice, once with the Triton prefill tile and
once with the Gluon one (HybridConfig.prefill_wgmma), each into a NaN-filled output checked
against the float64 causal reference (bench_hybrid's bound), and records the two errors and the
largest difference between the two outputs. --policy hybrid-colocated checks the persistent
Gluon grid of the colocated schedule instead (HybridConfig.colocated_wgmma: the dynamic counter,
the ordered launch's roles, 64-row tiles) against its Triton grid. Needs an sm_90 GPU; prints
one line per case and writes OUT/prefill_wgmma_check.json. Exit status 1 if any Gluon run fails
its check, or (colocated) leaves the counters nonzero.

    python3 benchmarks/prefill_wgmma_check.py --out $OUT
    python3 benchmarks/prefill_wgmma_check.py --policy hybrid-colocated --block-n 64 --out $OUT
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
from bench_hybrid import BatchData, check_launch  # noqa: E402

from kvtune.kernels import policies  # noqa: E402
from kvtune.kernels.hybrid import prefill_wgmma_ok, prepare_hybrid  # noqa: E402
from kvtune.kernels.plan import AttentionShape  # noqa: E402
from kvtune.workloads.batch import AttentionBatch  # noqa: E402

# (label, shape kwargs, q_lens, kv_lens): prefill chunks (q_len > 16) beside decodes and
# speculative decodes; ragged chunk ends, chunks shorter than a key block, a prefix that is not
# a multiple of the page, one long chunk split over several tasks.
CASES = [
    ("8b-2048after8k", {}, [2048], [10240]),
    ("8b-chunk+decodes", {}, [512, 1, 1, 4, 1], [4608, 3000, 17, 900, 4096]),
    ("8b-ragged", {}, [77, 300, 1], [1000, 301, 5]),
    ("8b-short-after-long", {}, [40], [16424]),
    ("8b-fp16", {"dtype": "fp16"}, [333, 2], [2333, 50]),
    ("g8-70b", {"num_qo_heads": 8, "num_kv_heads": 1}, [1000, 1], [5000, 70]),
    ("g1-mha", {"num_qo_heads": 8, "num_kv_heads": 8}, [257, 3], [1290, 30]),
    ("g16", {"num_qo_heads": 32, "num_kv_heads": 2}, [129, 1], [4000, 12]),
    ("g7-qwen", {"num_qo_heads": 28, "num_kv_heads": 4}, [200, 1], [700, 900]),
    ("hd64", {"num_qo_heads": 16, "num_kv_heads": 8, "head_dim": 64}, [700, 1], [3000, 200]),
    ("page1", {"page_size": 1}, [300, 1], [1300, 77]),
    ("page64", {"page_size": 64}, [300, 1], [1333, 77]),
    ("fp8-cache", {"kv_dtype": "fp8_e4m3"}, [512, 1], [4608, 1000]),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "prefill_wgmma_check_out"))
    ap.add_argument("--policy", default="hybrid-serial",
                    choices=("hybrid-serial", "hybrid-colocated"))
    ap.add_argument("--block-m", type=int, default=None, choices=(64, 128),
                    help="prefill tile rows (default: the policy's prefill_block_m)")
    ap.add_argument("--block-n", type=int, default=None, help="keys per step (default: config's)")
    ap.add_argument("--stages", type=int, default=None, help="K/V buffers (default: config's)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    from kvtune.harness.device import live_device

    spec = live_device()
    rows, failed = [], 0
    for label, kw, q_lens, kv_lens in CASES:
        shape = AttentionShape(**kw)
        dtype = torch.float16 if shape.dtype == "fp16" else torch.bfloat16
        batch = AttentionBatch(q_lens, kv_lens, shape, seed=7)
        data = BatchData(batch, "cuda", dtype)
        kw_policy = {"prefill_block_m": args.block_m} if args.block_m else {}
        policy = policies.get(args.policy, **kw_policy)
        plan = policy.plan_hybrid(batch.q_lens, batch.kv_lens, shape, spec)
        launch = prepare_hybrid(plan, data.cache, batch.q_lens)
        row = {"case": label, "shape": shape.to_dict(), "q_lens": q_lens, "kv_lens": kv_lens,
               "prefill_tasks": plan.num_prefill_tasks,
               "eligible": prefill_wgmma_ok(plan, data.cache, "cuda")}
        out_t = torch.empty_like(data.q)
        out_g = torch.empty_like(data.q)
        slow = dataclasses.replace(launch, config=dataclasses.replace(
            launch.config, prefill_wgmma=False, colocated_wgmma=False))
        row["triton"] = check_launch(slow, data, out_t)
        persistent = args.policy == "hybrid-colocated"
        prefix = "colocated_wgmma" if persistent else "wgmma"
        knobs = {"colocated_wgmma" if persistent else "prefill_wgmma": True}
        if args.block_n:
            knobs[f"{prefix}_block_n"] = args.block_n
        if args.stages:
            knobs[f"{prefix}_stages"] = args.stages
        fast = dataclasses.replace(launch, config=dataclasses.replace(launch.config, **knobs))
        row["gluon"] = check_launch(fast, data, out_g)
        # The persistent grid's last program resets the counters for the next step.
        torch.cuda.synchronize()
        row["counter_zero"] = bool((fast.counter == 0).all())
        row["max_abs_diff"] = float((out_t.float() - out_g.float()).abs().max())
        row["same_bits"] = bool(torch.equal(out_t, out_g))
        failed += not (row["gluon"]["ok"] and row["counter_zero"])
        rows.append(row)
        print(f"{label}: tasks={row['prefill_tasks']} eligible={row['eligible']} "
              f"triton ok={row['triton']['ok']} err={row['triton']['rel_error']:.2e} "
              f"gluon ok={row['gluon']['ok']} err={row['gluon']['rel_error']:.2e} "
              f"{row['gluon']['message']} maxdiff={row['max_abs_diff']:.2e} "
              f"same_bits={row['same_bits']} counter_zero={row['counter_zero']}", flush=True)
        with open(os.path.join(args.out, "prefill_wgmma_check.json"), "w") as fh:
            json.dump({"device": spec.to_dict(), "cases": rows}, fh, indent=1, default=str)
    print(f"{len(rows) - failed} of {len(rows)} Gluon runs ok")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

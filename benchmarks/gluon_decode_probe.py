"""Probe: decode stage 1 through the Gluon tile of kernels/prefill_wgmma.py (issue 16).

Question: does a decode stage 1 whose K/V tiles are gathered with cp.async into a deeper ring of
shared-memory buffers (Gluon: the copies and waits are the kernel's own, not the pipeliner's)
stream more of the copy bandwidth than kernels/decode.py's stage 1 where the Triton kernel
falls short (llama3-70b-tp8: one KV head, 0.63-0.73 of copy with about two programs per SM)?

Each decode work item of a Plan (request, kv range) x KV head becomes one task of
kernels/hybrid.py's FIELDS layout (kind 1, one token, causal position kv_len - 1, so every key
is seen); the Gluon kernel runs it as a 64-row tile with G real rows (G query heads of the KV
head) and writes the final row, or a float32 partial row and its base-2 lse. The partials are
merged here in float64 for the check (the product's merge is not part of this probe: it is
timed beside as decode.py's own stage 2). Every variant is checked against the float64
reference before it is timed.

Timer: bench_kernels.Timer (CUDA events, L2 flushed before each run, interference guard),
30 pairs. Copy ceiling: a 4 GiB device copy in the same process. Prints one line per variant
and writes OUT/gluon_decode_probe.json.

    python3 benchmarks/gluon_decode_probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import (BOUND, matrix_case, min_bytes, probe_start,  # noqa: E402
                           write_probe_rows)

from kvtune.kernels.decode import prepare_decode, run_decode  # noqa: E402
from kvtune.kernels.paged import PagedKVCache, make_queries  # noqa: E402
from kvtune.kernels.reference import decode_reference, relative_error  # noqa: E402

LOG2_E = 1.4426950408889634


def decode_tasks(plan, cache) -> tuple[np.ndarray, int, np.ndarray]:
    """(tasks int32 [items x heads, 9], partial rows, item -> partial row or -1) of a decode Plan:
    one task per (item, KV head), heads outer so that a head's items stay in plan order."""
    split = plan.splits[plan.work_request] > 1
    part_of_item = np.where(split, np.cumsum(split) - 1, -1)
    n_part = int(split.sum())
    kv_lens = np.asarray(plan.kv_lens)
    rows = []
    for head in range(plan.num_kv_heads):
        for i in range(plan.num_items):
            b = int(plan.work_request[i])
            rows.append((1, b, b, 1, int(kv_lens[b]) - 1, int(plan.work_kv_start[i]),
                         int(plan.work_kv_end[i]), int(part_of_item[i]), head))
    return np.asarray(rows, dtype=np.int32), n_part, part_of_item


def merge_float64(plan, part_o, part_lse, part_of_item, out) -> torch.Tensor:
    """out with every split request's row replaced by the lse-weighted sum of its partials."""
    res = out.double().clone()
    po, pl = part_o.double(), part_lse.double()
    for b in np.flatnonzero(plan.splits > 1):
        parts = part_of_item[np.flatnonzero(plan.work_request == b)]
        lse = pl[parts]  # [n, heads]
        w = torch.softmax(lse * math.log(2.0), dim=0)
        res[b] = (w.unsqueeze(-1) * po[parts]).sum(0)
    return res


class GluonStage1:
    """The Gluon kernel over a decode plan's tasks: grid mode (one program per task) or
    persistent (programs_per_sm x SMs programs on the task counter)."""

    def __init__(self, plan, cache, q, block_n: int, stages: int, persistent_per_sm: int = 0):
        from kvtune.kernels.prefill_wgmma import num_warps_for, prefill_wgmma_kernel

        shape = cache.shape
        self.kernel = prefill_wgmma_kernel
        tasks, n_part, self.part_of_item = decode_tasks(plan, cache)
        self.tasks = torch.as_tensor(tasks, device="cuda")
        self.num_tasks = tasks.shape[0]
        hq, hd = shape.num_qo_heads, shape.head_dim
        self.part_o = torch.empty((max(n_part, 1), hq, hd), device="cuda", dtype=torch.float32)
        self.part_lse = torch.empty((max(n_part, 1), hq), device="cuda", dtype=torch.float32)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.sms = sms
        self.counter = torch.zeros(sms + 4, device="cuda", dtype=torch.int32)
        self.ctr_pad = 1 << (sms + 4 - 1).bit_length()
        self.persistent = persistent_per_sm > 0
        self.grid = (persistent_per_sm * sms,) if self.persistent else (self.num_tasks,)
        self.block_n, self.stages, self.block_m = block_n, stages, 64
        self.num_warps = num_warps_for(64)
        self.q, self.cache = q, cache
        self.scale = 1.0 / math.sqrt(hd) * LOG2_E * cache.k_scale

    def __call__(self, out):
        c, q = self.cache, self.q
        self.kernel[self.grid](
            q, c.k_pages, c.v_pages, out, self.part_o, self.part_lse, c.page_indptr,
            c.page_indices, self.tasks, self.counter, self.num_tasks, self.grid[0], self.scale,
            c.v_scale, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            c.k_pages.stride(0), c.k_pages.stride(1),
            NUM_QO_HEADS=c.shape.num_qo_heads, G=c.shape.group_size, HEAD_DIM=c.shape.head_dim,
            PAGE_SIZE=c.shape.page_size, BLOCK_M=self.block_m, BLOCK_N=self.block_n,
            STAGES=self.stages, num_warps=self.num_warps, PERSISTENT=self.persistent,
            NUM_SMS=self.sms, CTR_PAD=self.ctr_pad)


def run_case(variant, dist, batch, plan_name, configs, timer, ceiling, spec, log) -> list[dict]:
    shape, kv_lens, plan, chunk = matrix_case(variant, dist, batch, plan_name, spec)
    cache = PagedKVCache.from_lengths(kv_lens, shape, device="cuda", seed=0)
    q = make_queries(len(kv_lens), shape, device="cuda", seed=0)
    ref = decode_reference(q, cache)
    nbytes = min_bytes(kv_lens, shape)
    case = f"{variant[0]} {dist} B={batch} {plan_name} ({plan.num_tasks} tasks)"
    rows = []

    def record(label, fn, out, check_out):
        err = relative_error(check_out(), ref)
        ok = bool(math.isfinite(err) and err <= BOUND[torch.bfloat16])
        row = {"case": case, "variant": label, "rel_error": err, "ok": ok,
               "tasks": plan.num_tasks, "chunk": chunk}
        if ok:
            row.update(timer(fn))
            row["fraction_of_copy"] = nbytes / (row["median_us"] * 1e-6) / ceiling
        rows.append(row)
        log(f"{case:52s} {label:26s} ok={ok} err={err:.1e} "
            + (f"{row['median_us']:8.1f} us {row['fraction_of_copy']:.3f} of copy" if ok else ""))

    launch = prepare_decode(plan, cache)
    out = torch.full_like(q, float("nan"))
    record(f"decode.py {launch.config}", lambda: run_decode(launch, q, cache, out=out), out,
           lambda: (run_decode(launch, q, cache, out=out), out)[1])
    stage1 = dataclasses.replace(launch, merge_requests=launch.merge_requests[:0],
                                 chunked_merge=None, tail_merge=None)
    out1 = torch.full_like(q, float("nan"))

    def check_stage1():  # the float64 merge of decode.py's own partials
        run_decode(stage1, q, cache, out=out1)
        if not int(launch.merge_requests.shape[0]):
            return out1
        full = torch.full_like(q, float("nan"))
        run_decode(launch, q, cache, out=full)
        return full
    record("decode.py stage 1", lambda: run_decode(stage1, q, cache, out=out1), out1,
           check_stage1)
    for block_n, stages, per_sm in configs:
        try:
            g = GluonStage1(plan, cache, q, block_n, stages, per_sm)
            outg = torch.full_like(q, float("nan"))

            def check(g=g, outg=outg):
                g(outg)
                torch.cuda.synchronize()
                return merge_float64(plan, g.part_o, g.part_lse, g.part_of_item, outg)
            label = f"gluon bn{block_n}-s{stages}" + (f"-p{per_sm}" if per_sm else "")
            record(label, lambda g=g, outg=outg: g(outg), outg, check)
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a row
            rows.append({"case": case, "variant": f"bn{block_n}-s{stages}-p{per_sm}",
                         "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            log(f"{case} bn{block_n}-s{stages}-p{per_sm}: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else ''}")
    return rows


CASES = (
    (("llama3-70b-tp8", "bf16", "bf16", 16), "uniform", 256, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "uniform", 64, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "skew80", 64, "balanced-2x"),
    (("llama3-70b-tp8", "bf16", "bf16", 16), "uniform", 256, "fixed-2048"),
    (("llama3-8b", "bf16", "bf16", 16), "uniform", 64, "balanced-2x"),
)
# (keys per step, K/V buffers, persistent programs per SM or 0 for one program per task). Local
# sm_90 compile (Triton 3.6): 166 registers at 64 keys, 125 at 32 (four programs per SM at
# most), 248 at 128; shared memory 16 KB of Q plus 32 KB (64 keys) or 16 KB (32 keys) per
# buffer, so bn64-s2, bn64-s3, bn32-s4 and bn32-s6 fit two programs per SM, bn32-s3 three,
# bn128-s2 and bn64-s5 one.
CONFIGS = ((64, 2, 0), (64, 3, 0), (32, 3, 0), (32, 4, 0), (32, 6, 0), (128, 2, 0), (64, 5, 0),
           (64, 3, 2), (64, 5, 1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gluon_decode_probe_out"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--max-cases", type=int, default=len(CASES))
    ap.add_argument("--configs", default="", metavar="N:S[:P],...",
                    help="Gluon variants: keys per step, K/V buffers, persistent programs per "
                         "SM (0 or absent: one program per task); default: CONFIGS")
    ap.add_argument("--cases", default="", metavar="SHAPE:DIST:B:PLAN,...",
                    help="cases instead of CASES, e.g. llama3-70b-tp8:uniform:256:balanced-2x")
    args = ap.parse_args(argv)
    configs = tuple(tuple(int(v) for v in (c.split(":") + ["0"])[:3])
                    for c in args.configs.split(",") if c.strip()) or CONFIGS
    cases = tuple(((sh, "bf16", "bf16", 16), d, int(b), pl) for sh, d, b, pl in
                  (c.split(":") for c in args.cases.split(",") if c.strip())) or CASES
    os.makedirs(args.out, exist_ok=True)
    timer, cp, spec = probe_start(args.reps)
    ceiling = cp["bytes_per_s"]
    rows = []
    for variant, dist, batch, plan_name in cases[: args.max_cases]:
        rows += run_case(variant, dist, batch, plan_name, configs, timer, ceiling, spec,
                         lambda s: print(s, flush=True))
        write_probe_rows(os.path.join(args.out, "gluon_decode_probe.json"), cp, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One decode case of the Triton stage-1 kernel, checked, then launched a few times: a target for
Nsight Compute (benchmarks/profile_gpu.sh) and a quick timing of one configuration.

Not a test: it needs a CUDA GPU. The case: a named shape (workloads/shapes.py), KV type, page
size, distribution (uniform or skew80, --total-tokens split over --batch requests) and the
fixed-split plan of --chunk tokens; --config overrides the stage-1 configuration by label
(bn128-w4-s3-pa, suffixes -pf -pa -vw -vp -ws4 -r168 -fl2; default: the table's). The output is
checked against the float64 reference before anything else runs, and the case refuses to run on
a failed check, so
a profile is never of a wrong kernel. Then --iters plain launches (what ncu picks from: give it
--launch-skip 2 --launch-count 1 and a kernel filter on _attend_kernel), then, with --time, the
median of 30 CUDA-event pairs with the L2 flushed before each (the bench_kernels Timer), as a
fraction of the copy bandwidth measured in the same process.

    PYTHONPATH=/tmp/site python3 benchmarks/profile_decode.py --shape llama3-8b \
        --kv-dtype fp8_e4m3 --dist uniform --batch 64 --chunk 2048 [--config bn128-w4-s3-pa] \
        [--iters 4] [--time]
Prints one JSON line (case, config, error, and the timing with --time). With --time
--split-cost the row also has stage 1 alone (the same launch with no merge) and the merge alone
(stage 2 over stage 1's partials), each the median of 30 event pairs with the L2 flushed: where a
split plan's time goes beyond the bytes it reads (the merge alone: kernels/merge.py's, then the
other settings and kernels/merge_chunked.py in one launch and by level). --merge blocks runs the
case's stage 2 through kernels/merge.py instead of the default kernels/merge_chunked.py (tail:
kernels/merge_tail.py, no stage 2); --merge-pdl on launches the chunked merge as stage 1's
programmatic dependent (sm_90+), and --time then also times the same launch without it
(no_pdl_median_us); --versus MERGE times the case with another merge beside it (versus_*, checked
too); --versus-order ORDER times the same launch with its tasks handed out in another order
(prepare_decode's launch_order; versus_order_*, checked too), --launch-order sets the case's own
(default the product's: longest first for static plans; so --launch-order plan --versus-order
longest-first compares the two). --rounds N alternates the two N times (the row's medians are the last round's, "rounds"
has each), so a disturbed period shows as rounds apart, not as a difference between them.
--graph replays the case's launches from a CUDA graph and checks them bit for bit against the
eager launch (with --time, the replay is timed too).

    ... --configs bn64-w4-s4-pa,bn64-w4-s3-pa-ws4 [--flashinfer] [--chunk balanced]
times several configurations on the same case in one process, each twice: through the Triton
backend exactly as the shape matrix does (harness timer: CUDA events, cold L2, the matrix's
stopping rule; the backend verifies against the float64 reference first) and with --time's
30-pair event loop; --flashinfer adds FlashInfer's tensor-core decode on the same plan, measured
the matrix's way. One JSON line per configuration (and one for FlashInfer). --chunk balanced is
the matrix's balanced-2x chunk (about two programs per SM).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys

import torch

from kvtune.kernels.decode import (LAUNCH_ORDERS, MERGES, default_config, prepare_decode,
                                   run_decode)
from kvtune.kernels.decode_config import KernelConfig
from kvtune.kernels import merge as merge_mod
from kvtune.kernels.merge import launch_merge
from kvtune.kernels.merge_chunked import launch_chunked_merge, prepare_chunked_merge
from kvtune.kernels.paged import PagedKVCache, make_queries
from kvtune.kernels.reference import decode_reference, relative_error

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench_kernels  # noqa: E402  - the timer, copy ceiling and byte count of the kernel bench

ERROR_BOUND = 2e-2  # bench_kernels.BOUND for 16-bit outputs


def build_case(args):
    # A shape name, or QO/KV/HD for a shape outside the named ones (bench_kernels --heads).
    shape = bench_kernels.variant_shape((args.shape, args.dtype, args.kv_dtype or args.dtype,
                                         args.page))
    kv = bench_kernels.matrix_kv_lens(args.dist, args.batch, args.total_tokens)
    cache = PagedKVCache.from_lengths(kv, shape, device="cuda", seed=args.seed)
    q = make_queries(args.batch, shape, device="cuda", seed=args.seed)
    return shape, kv, cache, q


def make_plan(args, kv, shape):
    """The fixed-split plan of --chunk tokens, or of the matrix's balanced-2x chunk."""
    return bench_kernels.fixed_split_plan(kv, shape, bench_kernels.device_spec(), args.chunk)[0]


def sweep(args) -> int:
    """--configs: each configuration timed the matrix's way and with the event loop, and
    FlashInfer on the same plan; one JSON line each."""
    from kvtune.workloads.batch import DecodeBatch

    timer = bench_kernels.Timer(30)
    ceiling = bench_kernels.copy_bandwidth(timer)["bytes_per_s"]
    runner = bench_kernels.MatrixRunner(False, ceiling, lambda msg: print(msg, file=sys.stderr))
    shape, kv, cache, q = build_case(args)
    batch = DecodeBatch(kv, shape, seed=args.seed, distribution=args.dist)
    case = {"shape": args.shape, "dtype": args.dtype, "kv_dtype": shape.kv_dtype,
            "page": args.page, "dist": args.dist, "batch": args.batch, "chunk": args.chunk,
            "copy_bytes_per_s": ceiling, "gpu": torch.cuda.get_device_name(0)}
    nbytes = bench_kernels.min_bytes(kv, shape)
    ref = decode_reference(q, cache)
    if args.settle_s > 0:
        case["settle"] = bench_kernels.settle(args.settle_s)

    def flashinfer_row(when: str) -> None:
        # Measured before and after the configurations: a slow window that moves one of the two
        # readings shows as a disagreement between them.
        if not args.flashinfer or runner.flashinfer is None:
            return
        plan = make_plan(args, kv, shape)
        fi = bench_kernels._measure(runner.flashinfer, batch, plan)
        print(json.dumps({**case, "backend": "flashinfer", "when": when,
                          "num_tasks": plan.num_tasks, "status": fi.status,
                          "matrix_us": fi.latency_us,
                          "fraction_of_copy": bench_kernels._frac(fi, ceiling),
                          **bench_kernels._quiet_fields("matrix", fi),
                          "message": fi.message[:200]}), flush=True)

    flashinfer_row("before")
    first_out = first_label = None
    for label in args.configs.split(","):
        # "product": prepare_decode's own choice (twins and side split), as the matrix runs it
        config = None if label == "product" else KernelConfig.from_label(label)
        plan = make_plan(args, kv, shape)
        row = {**case, "backend": "triton", "config": label, "num_tasks": plan.num_tasks}
        backend = runner.make_triton(config)
        meas = bench_kernels._measure(backend, batch, plan)
        backend.close()
        row.update(status=meas.status, matrix_us=meas.latency_us,
                   fraction_of_copy=bench_kernels._frac(meas, ceiling), message=meas.message[:200],
                   **bench_kernels._quiet_fields("matrix", meas))
        if meas.status == "ok":
            launch = prepare_decode(plan, cache, config=config)  # None: the product's, split too
            row["launch_config"] = launch.config_label
            err, ok = bench_kernels.checked_run(launch, q, cache, ref, q.dtype)
            if ok:
                out = torch.empty_like(q)
                t = timer(lambda: run_decode(launch, q, cache, out=out))
                row.update(loop_us=t["median_us"], loop_p10_us=t["p10_us"],
                           loop_p90_us=t["p90_us"],
                           loop_fraction_of_copy=nbytes / (t["median_us"] * 1e-6) / ceiling)
                # Bitwise against the first configuration's output: stage-only twins
                # (decode_config.SHALLOW_TWIN) must agree exactly, or the wave-fill choice would
                # make a request's result depend on the batch.
                if first_out is None:
                    first_out, first_label = out.clone(), label
                row.update(same_bits_as=first_label, same_bits=bool(torch.equal(out, first_out)))
            row["loop_rel_error"] = err
        print(json.dumps(row), flush=True)
    flashinfer_row("after")
    runner.close()
    return 0


def split_cost(launch, q, cache, out, timer, nbytes: int, ceiling: float) -> dict:
    """Stage 1 alone (the launch without its merge requests: split rows still go to the
    partials) and the merge alone, in us, and stage 1's fraction of copy."""
    stage1 = dataclasses.replace(launch, merge_requests=launch.merge_requests[:0],
                                 chunked_merge=None, tail_merge=None)
    t1 = timer(lambda: run_decode(stage1, q, cache, out=out))
    row = {"stage1_us": t1["median_us"],
           "stage1_fraction_of_copy": nbytes / (t1["median_us"] * 1e-6) / ceiling,
           "split_requests": int(launch.merge_requests.shape[0])}
    if row["split_requests"]:
        t2 = timer(functools.partial(launch_merge, launch.partial_out, launch.partial_lse,
                                     launch.merge_requests, launch.merge_row0,
                                     launch.merge_count, out))
        row["merge_us"] = t2["median_us"]
        ref = out.clone()
        for block_s, warps in MERGE_VARIANTS:
            row[f"merge_s{block_s}_w{warps}"] = _timed_beside(
                functools.partial(merge_variant, launch, out, block_s, warps), out, ref, timer)
        # kernels/merge_chunked.py, the product's merge: 16-row chunks at 2 warps, in one launch
        # (fused) and one launch per level; both give the same bits.
        shape = launch.partial_out.shape
        for key, fused in (("merge_chunked", True), ("merge_chunked_levels", False)):
            chunked = prepare_chunked_merge(
                launch.merge_requests.cpu().numpy(), launch.merge_row0.cpu().numpy(),
                launch.merge_count.cpu().numpy(), shape[1], shape[2], out.device, fused=fused)
            row[key] = {**_timed_beside(functools.partial(
                launch_chunked_merge, launch.partial_out, launch.partial_lse, chunked, out), out,
                ref, timer), "launches": chunked.num_launches, "levels": chunked.num_levels}
        out.copy_(ref)
    return row


def _timed_beside(merge_fn, out, ref, timer) -> dict:
    """{us, vs_product}: another merge run once into `out` and checked against the product's
    output `ref` to a tolerance (another block of rows may round differently, so not bitwise),
    then timed."""
    merge_fn()
    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    return {"us": timer(merge_fn)["median_us"], "vs_product": err}


# (rows per step, warps) of other merge configurations timed beside the product's (64 rows at
# head_dim <= 128, 4 warps). Fourteenth session, H100: 16 rows at 2 warps (56 registers, all
# programs resident) merged 256 two-way splits in 7.6 us against 15.0, but a request split
# 100 ways in 22.5 us against 11.3 (docs/PERFORMANCE.md).
MERGE_VARIANTS = ((16, 2), (16, 4), (32, 2))


def merge_variant(launch, out, block_s: int, warps: int) -> None:
    """kernels/merge.py's kernel with another block of rows and warp count."""
    num_qo_heads, head_dim = launch.partial_out.shape[1], launch.partial_out.shape[2]
    merge_mod._merge_kernel[(launch.merge_requests.shape[0], num_qo_heads)](
        launch.partial_out, launch.partial_lse, launch.merge_requests, launch.merge_row0,
        launch.merge_count, out, out.stride(0), out.stride(1), NUM_QO_HEADS=num_qo_heads,
        HEAD_DIM=head_dim, BLOCK_S=block_s, num_warps=warps)


def graph_replay_check(launch, q, cache, out):
    """Capture run_decode(launch) in a CUDA graph (after a warm-up on a side stream, as torch
    asks), replay it five times over a NaN-filled output, and compare with the eager output of
    the same launch: (graph, bit-for-bit equal). Where the merge is a programmatic dependent
    launch, this checks that the capture keeps its wait on stage 1."""
    eager = out.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run_decode(launch, q, cache, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_decode(launch, q, cache, out=out)
    equal = True
    for _ in range(5):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        equal = equal and torch.equal(out, eager)
    return graph, bool(equal)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama3-8b", help="a shape name or QO/KV/HD, e.g. 8/1/256")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--kv-dtype", default=None)
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--dist", choices=("uniform", "skew80"), default="uniform")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--total-tokens", type=int, default=bench_kernels.TOTAL_TOKENS)
    ap.add_argument("--chunk", default="2048", help="tokens per split, or 'balanced'")
    ap.add_argument("--config", default=None,
                    help="a configuration label; 'product': the one the product's launch runs "
                         "(kernels/decode.py launch_config: the table entry or its twin); "
                         "default: the table entry")
    ap.add_argument("--configs", default=None, help="comma-separated labels: time each")
    ap.add_argument("--flashinfer", action="store_true",
                    help="with --configs: FlashInfer's decode on the same plan as the baseline")
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--merge", choices=MERGES, default="chunked",
                    help="stage 2 of the single case: kernels/merge_chunked.py (chunked, the "
                         "product's), kernels/merge.py (blocks) or kernels/merge_tail.py (tail: "
                         "in stage 1's tail, no stage 2)")
    ap.add_argument("--merge-pdl", choices=("off", "on"), default="on",
                    help="the chunked merge as stage 1's programmatic dependent where the GPU "
                         "has it (on, the product's) or as an ordinary launch (off)")
    ap.add_argument("--versus", choices=MERGES, default=None,
                    help="with --time: also time the same case with this merge (checked too), "
                         "alternating with the case's own launch over --rounds rounds")
    ap.add_argument("--launch-order", choices=LAUNCH_ORDERS, default=None,
                    help="stage 1's launch order (kernels/decode.py LAUNCH_ORDERS): the plan's, "
                         "or longest item first with the KV heads inner; default the "
                         "product's (product_launch_order)")
    ap.add_argument("--versus-order", choices=LAUNCH_ORDERS, default=None,
                    help="with --time: also time the same case with this launch order (checked "
                         "too), alternating with the case's own launch over --rounds rounds")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --time: rounds of the case's launch and the one beside it "
                         "(--versus, or the ordinary launch under --merge-pdl on), alternated; "
                         "the row keeps each round's medians")
    ap.add_argument("--split-cost", action="store_true",
                    help="with --time: stage 1 alone and the merge alone, too (and other merges: "
                         "MERGE_VARIANTS and kernels/merge_chunked.py)")
    ap.add_argument("--graph", action="store_true",
                    help="also capture the case's launches in a CUDA graph, replay it and compare "
                         "its output bit for bit with the eager launch's (graph_bitwise_equal); "
                         "with --time, time the replay too (graph_median_us)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settle-s", type=float, default=0.0,
                    help="--configs: first wait up to this long for a quiet machine (the guard's "
                         "latency probe; bench_kernels --settle-s)")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds < 1:
        print(f"profile_decode: error: --rounds: {args.rounds} not allowed; allowed: >= 1",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("profile_decode: needs a CUDA GPU", file=sys.stderr)
        return 2

    if args.configs:
        return sweep(args)
    shape, kv, cache, q = build_case(args)
    plan = make_plan(args, kv, shape)
    # "product": prepare_decode's own choice (config None), side split included
    config = (None if args.config == "product"
              else KernelConfig.from_label(args.config) if args.config
              else default_config(shape.head_dim, cache.kv_dtype, shape.page_size,
                                  plan.ctas_per_sm, num_kv_heads=shape.num_kv_heads,
                                  group_size=shape.group_size))
    launch = prepare_decode(plan, cache, config=config, merge=args.merge,
                            merge_pdl=args.merge_pdl == "on", launch_order=args.launch_order)
    config = launch.config
    ref = decode_reference(q, cache)
    out = torch.full_like(q, float("nan"))
    # The launch timed beside this one (--versus, or the ordinary merge launch under PDL), and
    # its key prefix in the row; it is checked like the case itself.
    versus, versus_key = None, None
    if args.versus and args.versus_order:
        print("profile_decode: give --versus or --versus-order, not both", file=sys.stderr)
        return 2
    if args.versus or args.versus_order:
        versus = (prepare_decode(plan, cache, config=config, merge=args.versus)
                  if args.versus else
                  prepare_decode(plan, cache, config=config, merge=args.merge,
                                 merge_pdl=args.merge_pdl == "on",
                                 launch_order=args.versus_order))
        versus_key = "versus" if args.versus else "versus_order"
        run_decode(versus, q, cache, out=out)
        torch.cuda.synchronize()
        versus_err = relative_error(out, ref)
        out.fill_(float("nan"))
    elif launch.merge_pdl:
        versus, versus_key = dataclasses.replace(launch, merge_pdl=False), "no_pdl"
    run_decode(launch, q, cache, out=out)
    torch.cuda.synchronize()
    err = relative_error(out, ref)
    row = {"shape": args.shape, "dtype": args.dtype, "kv_dtype": shape.kv_dtype,
           "page": args.page, "dist": args.dist, "batch": args.batch, "chunk": args.chunk,
           "config": launch.config_label, "merge": args.merge, "merge_pdl": launch.merge_pdl,
           "launch_order": launch.launch_order,
           "num_tasks": plan.num_tasks,
           "programs_per_sm": plan.num_tasks / bench_kernels.device_spec().sm_count,
           "rel_error": err}
    if args.versus or args.versus_order:
        row.update({"versus_merge": args.versus} if args.versus
                   else {"versus_order": args.versus_order}, versus_rel_error=versus_err)
        err = max(err, versus_err)
    if not (math.isfinite(err) and err <= ERROR_BOUND):
        row["ok"] = False
        print(json.dumps(row))
        return 1
    row["ok"] = True
    del ref
    for _ in range(args.iters):
        run_decode(launch, q, cache, out=out)
    torch.cuda.synchronize()
    graph = None
    if args.graph:
        graph, row["graph_bitwise_equal"] = graph_replay_check(launch, q, cache, out)
        if not row["graph_bitwise_equal"]:
            row["ok"] = False
            print(json.dumps(row))
            return 1
    if args.time:
        timer = bench_kernels.Timer(30)
        ceiling = bench_kernels.copy_bandwidth(timer)["bytes_per_s"]
        rounds = []
        for _ in range(args.rounds):
            # Alternated, so a disturbed period shows as rounds apart rather than as a
            # difference between the two launches.
            t = timer(lambda: run_decode(launch, q, cache, out=out))
            entry = {"us": t["median_us"]}
            if versus is not None:
                t0 = timer(lambda: run_decode(versus, q, cache, out=out))
                entry[f"{versus_key}_us"] = t0["median_us"]
            rounds.append(entry)
        nbytes = bench_kernels.min_bytes(kv, shape)
        row.update(median_us=t["median_us"], p10_us=t["p10_us"], p90_us=t["p90_us"],
                   copy_bytes_per_s=ceiling,
                   fraction_of_copy=nbytes / (t["median_us"] * 1e-6) / ceiling,
                   gpu=torch.cuda.get_device_name(0))
        if versus is not None:
            row.update({f"{versus_key}_median_us": t0["median_us"],
                        f"{versus_key}_p10_us": t0["p10_us"],
                        f"{versus_key}_p90_us": t0["p90_us"]})
        if args.rounds > 1:
            row["rounds"] = rounds
        if graph is not None:
            row["graph_median_us"] = timer(graph.replay)["median_us"]
        if args.split_cost:
            row.update(split_cost(launch, q, cache, out, timer, nbytes, ceiling))
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

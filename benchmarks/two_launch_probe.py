"""Probe (GPU, not a test): does a skewed decode batch finish sooner when its long tasks and its
short tasks run as two concurrent launches, each with its own occupancy, than as one launch?

The case issue 16 leaves below FlashInfer: llama3-70b-tp8 (one KV head) skew80 B=64 at
--total-tokens, fixed split of --chunk tokens: 102 full 2,048-key tasks of the long request and
64 short ones (the long request's remainder and 63 requests of 832 keys). In one launch at one
program per SM the short tasks queue three deep on the 30 SMs the long ones leave (about 1.22x
a long task); FlashInfer, with several CTAs per SM, runs it faster (docs/PERFORMANCE.md).

The probe builds the long request and the short requests as two caches of the same shape (the
same bytes as the one batch) and times, with the bench_kernels Timer (paced CUDA events, cold
L2): the whole batch in one launch (the product's configuration), each part alone, and both parts
launched together on two CUDA streams (the long part with --long-config, the short part with each
of --short-configs), and FlashInfer's decode on the whole batch with the same plan. Every
launch's output is checked against the float64 reference before it is timed. One JSON line per
timing.

    PYTHONPATH=/tmp/site python3 benchmarks/two_launch_probe.py --shape llama3-70b-tp8 \
        --long-config bn128-w8-s3-pa --short-configs bn128-w8-s2-pa,bn64-w4-s4-pa
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from kvtune.kernels.decode import prepare_decode, run_decode
from kvtune.kernels.decode_config import KernelConfig
from kvtune.kernels.paged import PagedKVCache, make_queries
from kvtune.kernels.reference import decode_reference
from kvtune.workloads.shapes import get_shape

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench_kernels  # noqa: E402


def part(kv, shape, seed, config, chunk, side_launch=True, cache=None, q=None):
    """(launch, q, cache, out, tasks, rel error) of one part (on `cache` and `q` where given,
    else new ones of `kv`), checked against float64 (exits if not ok)."""
    if cache is None:
        cache = PagedKVCache.from_lengths(kv, shape, device="cuda", seed=seed)
        q = make_queries(len(kv), shape, device="cuda", seed=seed)
    plan = bench_kernels.fixed_split_plan(kv, shape, bench_kernels.device_spec(), chunk)[0]
    launch = prepare_decode(plan, cache, config=config, side_launch=side_launch)
    err, ok = bench_kernels.checked_run(launch, q, cache, decode_reference(q, cache), q.dtype)
    if not ok:
        raise SystemExit(f"check failed: {len(kv)} requests, {config}, rel error {err}")
    return launch, q, cache, torch.empty_like(q), plan.num_tasks, err


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="llama3-70b-tp8")
    p.add_argument("--kv-dtype", default="bf16")
    p.add_argument("--page", type=int, default=16)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--skew", type=int, default=80, help="percent of the tokens in one request")
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--total-tokens", type=int, default=bench_kernels.TOTAL_TOKENS)
    p.add_argument("--long-config", default="bn128-w8-s3-pa")
    p.add_argument("--short-configs", default="bn128-w8-s2-pa")
    args = p.parse_args(argv)

    shape = get_shape(args.shape, page_size=args.page, dtype="bf16", kv_dtype=args.kv_dtype)
    from kvtune.workloads.distributions import fixed_total_kv_lens

    kv = [int(x) for x in fixed_total_kv_lens(args.batch, args.total_tokens, (args.skew,))]
    longest = max(kv)
    long_kv = [longest]
    short_kv = [x for x in kv if x != longest] or [1]
    timer = bench_kernels.Timer(30)
    ceiling = bench_kernels.copy_bandwidth(timer)["bytes_per_s"]
    nbytes = bench_kernels.min_bytes(kv, shape)
    base = {"shape": args.shape, "kv_dtype": shape.kv_dtype, "page": args.page,
            "batch": args.batch, "skew": args.skew, "total_tokens": args.total_tokens,
            "chunk": args.chunk, "copy_bytes_per_s": ceiling,
            "gpu": torch.cuda.get_device_name(0)}

    def emit(what, t, **extra):
        print(json.dumps({**base, "what": what, "median_us": t["median_us"],
                          "p10_us": t["p10_us"], "p90_us": t["p90_us"],
                          "fraction_of_copy": nbytes / (t["median_us"] * 1e-6) / ceiling,
                          **extra}), flush=True)

    # The whole batch, one launch, the product's configuration without its side split; then
    # the product's own launch (the side split where decode_config.side_launch_split takes it);
    # FlashInfer on the same plan.
    whole = part(kv, shape, 0, None, args.chunk, side_launch=False)
    w_launch, w_q, w_cache, w_out, w_tasks, w_err = whole
    emit("one-launch", timer(lambda: run_decode(w_launch, w_q, w_cache, out=w_out)),
         config=w_launch.config_label, tasks=w_tasks, rel_error=w_err)
    prod = part(kv, shape, 0, None, args.chunk, cache=w_cache, q=w_q)
    emit("product", timer(lambda: run_decode(prod[0], w_q, w_cache, out=w_out)),
         config=prod[0].config_label, tasks=prod[4], rel_error=prod[5])
    runner = bench_kernels.MatrixRunner(False, ceiling, lambda msg: print(msg, file=sys.stderr))
    if runner.flashinfer is not None:
        from kvtune.workloads.batch import DecodeBatch

        batch = DecodeBatch(kv, shape, seed=0, distribution=f"skew{args.skew}")
        plan = bench_kernels.fixed_split_plan(kv, shape, bench_kernels.device_spec(),
                                              args.chunk)[0]
        fi = bench_kernels._measure(runner.flashinfer, batch, plan)
        print(json.dumps({**base, "what": "flashinfer", "median_us": fi.latency_us,
                          "status": fi.status, "message": fi.message[:160]}), flush=True)

    long_cfg = KernelConfig.from_label(args.long_config)
    L = part(long_kv, shape, 1, long_cfg, args.chunk)
    emit("long-alone", timer(lambda: run_decode(L[0], L[1], L[2], out=L[3])),
         config=args.long_config, tasks=L[4], rel_error=L[5])
    side = torch.cuda.Stream()
    for label in args.short_configs.split(","):
        S = part(short_kv, shape, 2, KernelConfig.from_label(label), args.chunk)
        emit("short-alone", timer(lambda: run_decode(S[0], S[1], S[2], out=S[3])),
             config=label, tasks=S[4], rel_error=S[5])

        def both():
            main_stream = torch.cuda.current_stream()
            side.wait_stream(main_stream)
            run_decode(L[0], L[1], L[2], out=L[3])
            with torch.cuda.stream(side):
                run_decode(S[0], S[1], S[2], out=S[3])
            main_stream.wait_stream(side)

        both()
        torch.cuda.synchronize()
        emit("two-streams", timer(both), long_config=args.long_config, short_config=label,
             tasks=L[4] + S[4])
    runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

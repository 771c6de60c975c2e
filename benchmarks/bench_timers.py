"""GPU benchmark of kvtune's timers (harness/timing.py): do events, cupti and graph agree?

Not a test: it needs a CUDA GPU. One invocation checks the issue's three claims and prints a table:
  agree    a decode of >= 200 us (kernels/decode.py; a memory-bound torch add when the Triton kernel
           cannot run) timed cold under events, cupti and graph: medians within 3% of each other;
  repeat   the same decode measured 5 times in a row (cupti, then events): the medians spread
           (max - min) / min by less than 1%;
  small    two small decodes (~5 us and ~10-25 us), hot and cold, under each timer: graph and
           cupti are not inflated by launch overhead the way events are (ratio to cupti);
  flush    cold cupti runs repeated with a write-only L2 flush (l2_cache.READ_BACK off), to show
           what the dirty lines it leaves cost the timed kernel;
  rotate   the cold graph run of the small decode poisons every input copy's output with NaN first
           and checks afterwards that every copy was written (each copy touched).
It also records the environment and the device-to-device copy bandwidth.

Usage (from the repository root, on the GPU machine):
  PYTHONPATH=$PWD python benchmarks/bench_timers.py [--out DIR]
Writes bench_timers.json and bench_timers.md to --out (default: $OUT, else ./bench_out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import time
import traceback
import warnings

import numpy as np
import torch

from kvtune.harness import l2_cache
from kvtune.harness.environment import environment_record, measure_copy_bandwidth
from kvtune.harness.l2_cache import copies_needed, tensor_bytes
from kvtune.harness.stopping import StoppingRule
from kvtune.harness.timing import TimerUnavailable, measure_callable, resolve_timer

TIMERS = ("events", "cupti", "graph")
AGREE_TOL = 0.03
REPEAT_TOL = 0.01
RULE = StoppingRule()  # nvbench defaults: 10 samples, 50 ms, 0.5%, 5 s


# ------------------------------------------------------------------------------------ workloads

class DecodeWork:
    """One Triton decode batch (stage 1 + merge) and a way to make rotated input copies."""

    kind = "triton decode"

    def __init__(self, kv_lens, chunk_tokens: int, seed: int) -> None:
        from kvtune.kernels.decode import prepare_decode, run_decode
        from kvtune.kernels.paged import PagedKVCache, make_queries
        from kvtune.kernels.plan import AttentionShape, build_plan
        from kvtune.kernels.reference import decode_reference, relative_error

        self._run = run_decode
        self._cache_cls, self._queries = PagedKVCache, make_queries
        self.shape = AttentionShape()  # 32 q heads, 8 KV heads, head_dim 128, page 16, bf16
        self.kv_lens = np.asarray(kv_lens, dtype=np.int64)
        plan = build_plan(self.kv_lens, chunk_tokens, num_kv_heads=self.shape.num_kv_heads,
                          page_size=self.shape.page_size)
        first = self.make_input(seed)
        self.launch = prepare_decode(plan, first["cache"])
        self.fn(first)
        torch.cuda.synchronize()
        ref = decode_reference(first["q"], first["cache"])
        self.rel_error = relative_error(first["out"], ref)
        if not (math.isfinite(self.rel_error) and self.rel_error <= 1e-2):
            raise RuntimeError(f"decode output wrong: rel_error {self.rel_error}")
        self.first = first
        self.label = (f"decode B={len(self.kv_lens)} tokens={int(self.kv_lens.sum())} "
                      f"items={plan.num_items} launches={self.launch.num_launches}")
        self.bytes_moved = (int(self.kv_lens.sum()) * self.shape.num_kv_heads
                            * self.shape.kv_bytes_per_token_per_head)

    def make_input(self, seed: int) -> dict:
        cache = self._cache_cls.from_lengths(self.kv_lens, self.shape, device="cuda", seed=seed)
        q = self._queries(len(self.kv_lens), self.shape, device="cuda", seed=seed)
        return {"q": q, "cache": cache, "out": torch.full_like(q, float("nan"))}

    def fn(self, inp: dict) -> None:
        self._run(self.launch, inp["q"], inp["cache"], out=inp["out"])


class AddWork:
    """Fallback: c = a + b over float32 vectors of n elements (reads 2n, writes n)."""

    kind = "torch add"

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.first = self.make_input(seed)
        self.fn(self.first)
        torch.cuda.synchronize()
        self.rel_error = 0.0
        self.label = f"add n={n}"
        self.bytes_moved = 12 * n

    def make_input(self, seed: int) -> dict:
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        a = torch.rand(self.n, device="cuda", generator=gen) + 1.0
        b = torch.rand(self.n, device="cuda", generator=gen) + 1.0
        return {"a": a, "b": b, "out": torch.full_like(a, float("nan"))}

    def fn(self, inp: dict) -> None:
        torch.add(inp["a"], inp["b"], out=inp["out"])


def make_work(size: str, log: list[str]):
    """The big (>= 200 us) or a small (~5 us) workload: the Triton decode if it runs, else torch add."""
    try:
        if size == "big":  # 64 x 4096 tokens = 1 GiB of K/V, two splits per request, 2 launches
            return DecodeWork([4096] * 64, chunk_tokens=2048, seed=11)
        if size == "small":  # 16 x 128 tokens = 8 MiB of K/V, 128 CTAs, one launch
            return DecodeWork([128] * 16, chunk_tokens=128, seed=12)
        return DecodeWork([512] * 8, chunk_tokens=512, seed=14)  # 16 MiB, 64 CTAs, one launch
    except Exception as exc:  # noqa: BLE001 - fall back, but say why
        log.append(f"{size}: Triton decode unavailable ({type(exc).__name__}: {exc}); torch add used")
        return AddWork(96 << 20 if size == "big" else 1 << 18, seed=13)


def write_only_flush(work, timer: str) -> dict:
    """The same cold measurement with the flush left write-only (dirty lines in L2)."""
    l2_cache.READ_BACK = False
    try:
        row = measure(work, timer, True)
    finally:
        l2_cache.READ_BACK = True
    row["flush"] = "write-only"
    return row


def copies_for(work, cold: bool) -> list[dict]:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n = copies_needed(l2, tensor_bytes(work.first), cold_l2=cold)
    return [work.first] + [work.make_input(1000 + k) for k in range(n - 1)]


# ------------------------------------------------------------------------------------ measuring

def measure(work, timer: str, cold: bool, inputs=None) -> dict:
    row = {"work": work.label, "timer_requested": timer, "l2": "cold" if cold else "hot"}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = measure_callable(work.fn, inputs=inputs or [work.first], timer=timer, cold_l2=cold,
                                 stopping=RULE)
    except TimerUnavailable as exc:
        row.update(status="unavailable", message=str(exc))
        print(f"  {row}", flush=True)
        return row
    except Exception as exc:  # noqa: BLE001 - one broken timer must not lose the other rows
        row.update(status="error", message=f"{type(exc).__name__}: {exc}".splitlines()[0],
                   traceback=traceback.format_exc())
        print(f"  {row['work']} {timer} {row['l2']}: ERROR {row['message']}", flush=True)
        return row
    row.update(
        status="ok", timer=r.timer_used, median_us=r.median_us, p10_us=r.p10_us, p90_us=r.p90_us,
        mean_us=r.mean_us, std_us=r.std_us, samples=r.samples, noise_met=r.noise_met,
        rel_stderr=r.rel_stderr, stop_reason=r.stop_reason, warmup_runs=r.warmup_runs,
        launches_per_sample=r.launches_per_sample, input_copies=r.input_copies,
        wall_s=r.wall_time_s, warnings="; ".join(r.warnings + tuple(str(w.message) for w in caught)),
        flagged=r.telemetry.get("flagged"), flag_reasons=r.telemetry.get("flag_reasons"),
        sm_clock_mhz=r.telemetry.get("sm_clock_mhz_min"), power_w_max=r.telemetry.get("power_w_max"),
        gbps=work.bytes_moved / (r.median_us * 1e-6) / 1e9,
    )
    print(f"  {row['work']} | {row['l2']} | {r.timer_used}: median {r.median_us:.2f} us, "
          f"{r.samples} samples, noise {r.rel_stderr:.2%} ({r.stop_reason}), "
          f"{r.launches_per_sample} launches/sample, {r.input_copies} copies", flush=True)
    return row


def spread(values) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return (max(values) - min(values)) / min(values) if len(values) > 1 else float("nan")


def run(out_dir: str) -> int:
    os.makedirs(out_dir, exist_ok=True)
    log: list[str] = []
    results: dict = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
    t0 = time.time()
    bw = measure_copy_bandwidth()
    results["env"] = environment_record(timer="various", cold_l2=None, stopping=RULE,
                                        copy_bandwidth_bytes_per_s=bw)
    try:
        choice = resolve_timer("auto")
        results["auto_timer"] = {"name": choice.name, "fallback_reason": choice.fallback_reason}
    except TimerUnavailable as exc:
        results["auto_timer"] = {"name": None, "fallback_reason": str(exc)}
    rows: list[dict] = []
    checks: dict = {}

    big = make_work("big", log)
    big_copies = copies_for(big, cold=True)
    agree = [measure(big, t, True, big_copies if t == "graph" else None) for t in TIMERS]
    rows += agree
    checks["agree_spread"] = spread([r.get("median_us") for r in agree])
    checks["agree_ok"] = checks["agree_spread"] < AGREE_TOL
    rows.append(write_only_flush(big, "cupti"))
    cupti_big = next((r.get("median_us") for r in agree if r.get("timer") == "cupti"), None)
    if cupti_big and rows[-1].get("median_us"):
        checks["big_cupti_write_only_flush_over_read_back"] = rows[-1]["median_us"] / cupti_big

    for timer in ("cupti", "events"):
        repeat = [measure(big, timer, True) for _ in range(5)]
        for i, r in enumerate(repeat):
            r["repeat"] = i + 1
        rows += repeat
        checks[f"repeat_{timer}_spread"] = spread([r.get("median_us") for r in repeat])
        checks[f"repeat_{timer}_ok"] = checks[f"repeat_{timer}_spread"] < REPEAT_TOL

    for size in ("small", "small2"):
        small = make_work(size, log)
        for cold in (False, True):
            inputs = copies_for(small, cold=True) if cold else None
            if inputs:
                for inp in inputs:  # poison: a copy the rotation skipped would stay NaN
                    inp["out"].fill_(float("nan"))
            group = [measure(small, t, cold, inputs if t == "graph" else None) for t in TIMERS]
            rows += group
            by_timer = {r.get("timer"): r.get("median_us") for r in group if r["status"] == "ok"}
            ref = by_timer.get("cupti")
            tag = f"{size}_{'cold' if cold else 'hot'}"
            for t in ("events", "graph"):
                checks[f"{tag}_{t}_over_cupti"] = (by_timer[t] / ref) if ref and t in by_timer else None
            if cold and inputs:
                written = [bool(torch.isfinite(inp["out"]).all()) for inp in inputs]
                checks[f"{size}_rotation_copies"] = len(inputs)
                checks[f"{size}_rotation_all_copies_touched"] = all(written)
                rows.append(write_only_flush(small, "cupti"))

    results.update(rows=rows, checks=checks, log=log, elapsed_s=time.time() - t0)
    with open(os.path.join(out_dir, "bench_timers.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    table = render(results)
    with open(os.path.join(out_dir, "bench_timers.md"), "w") as f:
        f.write(table)
    print(table)
    return 0


def render(results: dict) -> str:
    env = results["env"]
    bw = env.get("copy_bandwidth_bytes_per_s")
    lines = [
        (f"# bench_timers {results['date']}: {env.get('gpu_name')} ({env.get('sm_count')} SMs, "
         f"L2 {(env.get('l2_bytes') or 0) / 2**20:.0f} MiB), driver {env.get('driver_version')}, "
         f"CUDA {env.get('cuda_runtime_version')}, torch {env.get('torch_version')}, triton "
         f"{env.get('triton_version')}, cupti-python {env.get('cupti_python_version')}"),
        f"copy bandwidth (read+write): {bw / 1e12:.2f} TB/s" if bw else "copy bandwidth: n/a",
        f"auto timer -> {results['auto_timer']}",
        f"stopping: {RULE.to_dict()}",
        "",
        ("| work | L2 | timer | rep | median us | p10 | p90 | samples | noise | stop | launches/sample "
         "| copies | GB/s | host us/sample | flagged | warnings |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        if r["status"] != "ok":
            lines.append(f"| {r['work']} | {r['l2']} | {r['timer_requested']} | | {r['status']}: "
                         f"{r.get('message', '')} ||||||||||||")
            continue
        l2 = r["l2"] + (" (write-only flush)" if r.get("flush") else "")
        lines.append(
            f"| {r['work']} | {l2} | {r['timer']} | {r.get('repeat', '')} | {r['median_us']:.2f} "
            f"| {r['p10_us']:.2f} | {r['p90_us']:.2f} | {r['samples']} | {r['rel_stderr']:.2%} "
            f"| {r['stop_reason']} | {r['launches_per_sample']} | {r['input_copies']} "
            f"| {r['gbps']:.0f} | {1e6 * r['wall_s'] / max(r['samples'], 1):.0f} | {r['flagged']} {r['flag_reasons'] or ''} | {r['warnings'][:80]} |"
        )
    lines += ["", "checks:"]
    lines += [f"  {k}: {fmt(v)}" for k, v in results["checks"].items()]
    lines += [f"  note: {m}" for m in results["log"]]
    lines.append(f"elapsed {results['elapsed_s']:.1f} s")
    return "\n".join(lines) + "\n"


def fmt(v) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "bench_out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_timers: no CUDA GPU here; this benchmark needs one", file=sys.stderr)
        return 2
    try:
        return run(args.out)
    except Exception:  # leave the traceback where $OUT brings it back
        with open(os.path.join(args.out, "bench_timers_error.txt"), "w") as f:
            traceback.print_exc(file=f)
        raise


if __name__ == "__main__":
    sys.exit(main())

"""`kvtune bench`, `kvtune plan` and `kvtune info`."""

from __future__ import annotations

import sys
import traceback

DEFAULT_POLICIES = "flashinfer-tensor-core,fa3,trtllm-oversub,no-split"
DEFAULT_RESULTS_DIR = "results"


def add_suite_arguments(p) -> None:
    """The arguments that choose cases: a named suite, or one distribution at some batch sizes."""
    from workloads.shapes import DEFAULT_SHAPE_NAME

    p.add_argument("--suite", help="named suite: threshold, prod-mix, traces, smoke")
    p.add_argument("--distribution", help="one distribution instead of a suite (see `kvtune info`)")
    p.add_argument("--batch-sizes", help="with --distribution: comma-separated batch sizes")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="distribution parameter (repeatable)")
    p.add_argument("--seeds", default="0", help="with --distribution: comma-separated seeds (default 0)")
    p.add_argument("--shape", default=DEFAULT_SHAPE_NAME, help=f"attention shape (default {DEFAULT_SHAPE_NAME})")
    p.add_argument("--page-size", type=int, help="tokens per KV page (default 16)")
    p.add_argument("--dtype", help="bf16 or fp16 (default bf16)")
    add_head_arguments(p)


def add_head_arguments(p) -> None:
    p.add_argument("--num-qo-heads", type=int, help="override the shape's query heads")
    p.add_argument("--num-kv-heads", type=int, help="override the shape's KV heads")
    p.add_argument("--head-dim", type=int, help="override the shape's head_dim (64, 128, 256)")


def add_backend_arguments(p) -> None:
    p.add_argument("--backend", default="auto", help="auto, simulator, triton, flashinfer (default auto)")
    p.add_argument("--device-model", help="simulator device model: h100, h200, a100, h20, b200, l40s")
    p.add_argument("--timer", default="auto", help="GPU timer: auto, cupti, events, graph (default auto)")
    p.add_argument("--warm-l2", action="store_true", help="time with a hot L2 (default: flushed before each run)")
    p.add_argument("--stopping", metavar="KEY=VALUE,...",
                   help="GPU stopping rule (default nvbench's: min_samples=10,min_time_ms=50,"
                        "max_noise=0.005,timeout_s=5)")


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure policies on a suite of decode batches")
    add_suite_arguments(p)
    p.add_argument("--policies", default=DEFAULT_POLICIES,
                   help="comma-separated policies, each NAME or NAME:key=value:... "
                        f"(default {DEFAULT_POLICIES})")
    add_backend_arguments(p)
    p.add_argument("--out", default=DEFAULT_RESULTS_DIR, help="results folder (default results/)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=run_bench)


def add_plan_parser(sub) -> None:
    p = sub.add_parser("plan", help="print the plan a policy makes for given kv_lens")
    p.add_argument("--policy", help="policy name, or NAME:key=value:...")
    p.add_argument("--kv-lens", required=True, help="comma-separated kv_len per request")
    p.add_argument("--device-model", default="h100", help="device model (default h100)")
    p.add_argument("--shape", help="attention shape (default llama3-8b, or the heuristic file's shape)")
    p.add_argument("--page-size", type=int)
    p.add_argument("--dtype")
    add_head_arguments(p)
    p.add_argument("--heuristic", help="a tuned heuristic JSON (from `kvtune export`) instead of --policy")
    p.set_defaults(handler=run_plan)


def add_info_parser(sub) -> None:
    p = sub.add_parser("info", help="device, backends, timers, versions, policies, distributions")
    p.set_defaults(handler=run_info)


def resolve_shape(args):
    """The named shape with --page-size/--dtype/--num-qo-heads/--num-kv-heads/--head-dim applied."""
    from dataclasses import replace

    from workloads.shapes import DEFAULT_SHAPE_NAME, get_shape

    shape = get_shape(args.shape or DEFAULT_SHAPE_NAME, page_size=args.page_size, dtype=args.dtype)
    heads = {k: getattr(args, k, None) for k in ("num_qo_heads", "num_kv_heads", "head_dim")}
    heads = {k: v for k, v in heads.items() if v is not None}
    return replace(shape, **heads) if heads else shape


def resolve_suite(args, shape):
    """The Suite chosen by --suite or --distribution/--batch-sizes; ValueError for bad input."""
    from harness.cli import parse_assignments, parse_int_list
    from workloads.suites import get_suite, make_suite

    if args.suite and args.distribution:
        raise ValueError("suite: give --suite or --distribution, not both")
    if args.distribution:
        if not args.batch_sizes:
            raise ValueError("batch-sizes: --distribution needs --batch-sizes, e.g. 1,8,64")
        seeds = parse_int_list(args.seeds, "seeds")
        return make_suite(args.distribution, args.batch_sizes, parse_assignments(args.param, "param"),
                          seeds=seeds, shape=shape)
    if args.param or args.batch_sizes:
        raise ValueError("param: --param and --batch-sizes go with --distribution, not --suite")
    return get_suite(args.suite or "smoke", shape=shape)


def resolve_policies(text: str):
    from harness.cli import parse_policy_spec

    specs = [s for s in text.split(",") if s.strip()]
    if not specs:
        raise ValueError("policies: empty; give at least one policy name")
    return [parse_policy_spec(s) for s in specs]


def run_bench(args) -> int:
    from tqdm import tqdm

    from harness.backends.select import check_choices, open_backend
    from harness.runner import CaseRun, Runner
    from harness.store import RunWriter

    # Everything that can be checked is checked before a folder is created.
    shape = resolve_shape(args)
    suite = resolve_suite(args, shape)
    policies = resolve_policies(args.policies)
    check_choices(args.backend, args.device_model, args.timer, args.stopping)
    cases = [CaseRun(c.case_id, c.batch()) for c in suite.cases]
    opened = open_backend(args.backend, device_model_name=args.device_model, timer=args.timer,
                          cold_l2=not args.warm_l2, stopping=args.stopping)
    print(f"kvtune bench: {opened.notice}", file=sys.stderr)
    manifest = {
        "kind": "bench",
        "command": args.command_line,
        "suite": suite.name,
        "suite_description": suite.description,
        "cases": [c.to_dict() for c in suite.cases],
        "policies": [{"name": p.name, "params": p.params()} for p in policies],
        "backend": opened.backend.name,
        "device": opened.device.to_dict(),
        "simulated": not opened.device.live,
        "ceiling_bytes_per_s": opened.ceiling_bytes_per_s,
        "ceiling_kind": opened.ceiling_kind,
        "environment": opened.environment,
        "shape": shape.to_dict(),
    }
    writer = RunWriter.create(args.out, manifest, kind="bench")
    rows: list[dict] = []

    def keep(row):
        rows.append(row)
        if len(rows) % 50 == 0:
            writer.write_rows(rows)  # a crash loses at most the last few rows

    runner = Runner(opened.backend, opened.device, opened.ceiling_bytes_per_s, run_id=writer.run_id, on_row=keep)
    total = len(cases) * len(policies)
    try:
        with tqdm(total=total, desc="bench", unit="cfg", disable=args.no_progress or None, file=sys.stderr) as bar:
            runner.run(cases, policies, progress=bar)
        writer.write_rows(rows)
    except BaseException as exc:
        if rows:
            writer.write_rows(rows)
        writer.finish("failed", error=" ".join(f"{type(exc).__name__}: {exc}".split()), rows=len(rows))
        if not isinstance(exc, (KeyboardInterrupt, ValueError)):
            traceback.print_exc()
        raise
    finally:
        opened.backend.close()
    failed = sum(1 for r in rows if r["status"] != "ok")
    writer.finish("complete", rows=len(rows), failed_rows=failed)
    print(format_table(rows))
    label = "simulated" if not opened.device.live else "measured"
    print(f"\n{len(rows)} rows ({label}, {opened.backend.name}, {opened.device.name}); "
          f"{failed} not ok. Results: {writer.root}/measurements.parquet, manifest: {writer.root}/manifest.json")
    return 0


def format_table(rows: list[dict]) -> str:
    """Latency (us) per case and policy, compact; `!` marks rows that failed or were unsupported."""
    import pandas as pd

    if not rows:
        return "(no rows)"
    frame = pd.DataFrame(rows)
    frame["cell"] = [
        f"{r.latency_us:,.1f}" if r.status == "ok" else f"!{r.status}" for r in frame.itertuples()
    ]
    table = frame.pivot_table(index=["distribution", "batch_size", "seed"], columns="policy",
                              values="cell", aggfunc="first", sort=False)
    table = table[[p for p in dict.fromkeys(frame["policy"])]]
    with pd.option_context("display.max_rows", 500, "display.width", 200):
        return "latency_us\n" + table.to_string()


def run_plan(args) -> int:
    from harness.cli import parse_int_list, parse_policy_spec
    from harness.device import device_model
    from kernels import policies

    device = device_model(args.device_model)
    kv_lens = parse_int_list(args.kv_lens, "kv-lens")
    if args.heuristic:
        from harness.export import load_heuristic

        policy = load_heuristic(args.heuristic)
        # A tuned file is for one shape: plan for it unless the user names another (then refused).
        shape = resolve_shape(args) if _shape_given(args) else policy.shape
    elif args.policy:
        policy = parse_policy_spec(args.policy)
        shape = resolve_shape(args)
    else:
        raise ValueError("policy: give --policy NAME or --heuristic FILE")
    plan = policy.plan(kv_lens, shape, device)
    info = policies.describe_plan(plan, device)
    print(f"policy {policy.name} on {device.name} ({device.sm_count} SMs), shape {shape.to_dict()}")
    notes = plan.notes
    if "bucket_min_batch" in notes:
        print(f"  bucket: {notes['bucket_min_batch']}..{notes['bucket_max_batch']} "
              f"(batch size {plan.batch_size})")
    for key, value in info.items():
        print(f"  {key}: {value}")
    return 0


def _shape_given(args) -> bool:
    return any(getattr(args, k, None) is not None
               for k in ("shape", "page_size", "dtype", "num_qo_heads", "num_kv_heads", "head_dim"))


def run_info(args) -> int:
    from harness.backends import BACKEND_MODULES, BackendUnavailable, backend_class
    from harness.device import DEVICE_MODELS, cuda_available, live_device
    from harness.environment import environment_record
    from kernels import policies
    from workloads.distributions import describe_distributions
    from workloads.suites import suite_names

    if cuda_available():
        dev = live_device()
        print(f"device: {dev.name}, {dev.sm_count} SMs, L2 {dev.l2_bytes / 2**20:.0f} MiB")
    else:
        print("device: no CUDA GPU found; the simulator backend runs (numbers are a model)")
    print("backends:")
    for name in BACKEND_MODULES:
        try:
            backend_class(name)
            state = "available"
            if name != "simulator" and not cuda_available():
                state = "installed, needs a CUDA GPU"
        except BackendUnavailable as exc:
            state = f"not available: {exc}"
        print(f"  {name}: {state}")
    try:
        from harness.timing import cupti_unavailable_reason

        reason = cupti_unavailable_reason()
    except ImportError as exc:  # pragma: no cover
        reason = str(exc)
    gpu = cuda_available()
    print("timers:")
    print(f"  cupti: {'available' if gpu and not reason else 'not available: ' + (reason or 'no GPU')}")
    for timer in ("events", "graph"):
        print(f"  {timer}: {'available' if gpu else 'needs a CUDA GPU'}")
    print("device models: " + ", ".join(DEVICE_MODELS))
    print("policies: " + ", ".join(policies.names()))
    print("suites: " + ", ".join(suite_names()))
    print("distributions:")
    for name, params in describe_distributions().items():
        print(f"  {name}: {params}")
    env = environment_record(None)
    print("versions: " + ", ".join(f"{k.removesuffix('_version')} {v}" for k, v in env.items()
                                    if k.endswith("_version") and v))
    return 0



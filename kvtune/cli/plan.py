"""`kvtune plan`: the plan a policy (or a tuned heuristic file) makes for given kv_lens."""

from __future__ import annotations

from kvtune.cli.common import add_command, add_head_arguments, print_json


def add_parser(sub) -> None:
    from kvtune.harness.device import DEVICE_MODELS
    from kvtune.workloads.shapes import SHAPES

    p = add_command(sub, "plan", "print the plan a policy makes for given kv_lens", [
        "kvtune plan --policy flashinfer-tensor-core --kv-lens 65536,1024,1024 --device-model h100",
        "kvtune plan --heuristic tuned.json --kv-lens 131072,2048,2048 --json",
        "kvtune plan --policy pod --kv-lens 6144,8192,8192 --q-lens 2048,1,1 --device-model h200",
    ], "Splits per request, work items, CTAs and waves of one policy's plan; no kernel runs. "
       "With --q-lens, the hybrid plan (prefill tiles beside split decodes) of a hybrid policy.")
    p.add_argument("--policy", help="policy name, or NAME:key=value:... (see `kvtune info`)")
    p.add_argument("--heuristic", help="a tuned heuristic JSON (from `kvtune export`) instead of --policy")
    p.add_argument("--kv-lens", required=True, help="comma-separated kv_len per request, tokens")
    p.add_argument("--q-lens", help="comma-separated new query tokens per request (1: a decode, "
                   "2..16: a speculative verify, more: a prefill chunk; each <= its kv_len): plan "
                   "the hybrid batch with a hybrid policy (hybrid-serial, pod, "
                   "hybrid-tuned:path=FILE, ...)")
    p.add_argument("--device-model", default="h100",
                   help="device model to plan for: " + ", ".join(DEVICE_MODELS) + " (default h100)")
    p.add_argument("--shape", help=f"attention shape: {', '.join(SHAPES)} (default llama3-8b, or "
                   "the heuristic file's shape)")
    p.add_argument("--page-size", type=int, help="tokens per KV page, a power of two 1..128 (default 16)")
    p.add_argument("--dtype", help="query/output and KV element type: bf16 or fp16 (default bf16)")
    p.add_argument("--kv-dtype", help="KV cache element type: bf16, fp16 or fp8_e4m3 "
                   "(default: --dtype, or the heuristic file's)")
    add_head_arguments(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from kvtune.harness.device import device_model
    from kvtune.kernels import policies
    from kvtune.kernels.plan import MAX_BATCH, MAX_KV_LEN_TOKENS
    from kvtune.kernels.specs import parse_int_list
    from kvtune.workloads.selection import CaseSettings, resolve_shape

    settings = CaseSettings(shape=args.shape, page_size=args.page_size, dtype=args.dtype,
                            kv_dtype=args.kv_dtype, num_qo_heads=args.num_qo_heads, num_kv_heads=args.num_kv_heads,
                            head_dim=args.head_dim)
    if args.policy and args.heuristic:
        raise ValueError("policy: give --policy NAME or --heuristic FILE, not both")
    device = device_model(args.device_model)
    kv_lens = parse_int_list(args.kv_lens, "kv-lens", 1, MAX_KV_LEN_TOKENS)
    if len(kv_lens) > MAX_BATCH:
        raise ValueError(f"kv-lens: {len(kv_lens)} requests; allowed: 1..{MAX_BATCH}")
    if args.heuristic:
        from kvtune.studies.export import load_heuristic

        policy = load_heuristic(args.heuristic)
        # A tuned file is for one shape: plan for it unless the user names another (then refused).
        shape = resolve_shape(settings) if settings.shape_given() else policy.shape
    elif args.policy:
        policy = policies.from_spec(args.policy)
        shape = resolve_shape(settings)
    else:
        raise ValueError("policy: give --policy NAME or --heuristic FILE")
    if args.q_lens is not None:
        return _run_hybrid(args, policy, kv_lens, shape, device)
    plan = policy.plan(kv_lens, shape, device)
    info = policies.describe_plan(plan, device)
    notes = plan.notes
    if args.json:
        print_json({"policy": policy.name, "params": policy.params(), "device": device.to_dict(),
                    "shape": shape.to_dict(), "plan": info})
        return 0
    print(f"policy {policy.name} on {device.name} ({device.sm_count} SMs), shape {shape.to_dict()}")
    if "bucket_min_batch" in notes:
        print(f"  bucket: {notes['bucket_min_batch']}..{notes['bucket_max_batch']} "
              f"(batch size {plan.batch_size})")
    if notes.get("family") == "defer":
        print("  family: defer: the engine's own planner plans this batch (shown below: FlashInfer's "
              "tensor-core plan, fixed_split_size=None)")
    elif notes.get("family"):
        print(f"  family: {notes['family']}")
    for key, value in info.items():
        print(f"  {key}: {value}")
    return 0


def _run_hybrid(args, policy, kv_lens, shape, device) -> int:
    """`--q-lens`: the HybridPlan of a hybrid policy (kernels/hybrid_policies.py)."""
    from kvtune.kernels.hybrid_policies import check_lengths
    from kvtune.kernels.plan import MAX_KV_LEN_TOKENS
    from kvtune.kernels.specs import parse_int_list

    if args.heuristic:
        raise ValueError("q-lens: a tuned decode heuristic plans decodes only; plan a hybrid batch "
                         "with --policy hybrid-tuned:path=FILE (a `kvtune tune --suite hybrid` "
                         "file) or another hybrid policy")
    if not hasattr(policy, "plan_hybrid"):
        raise ValueError(f"policy: {policy.name} plans decode batches only; with --q-lens use a "
                         "hybrid policy (hybrid-serial, hybrid-streams, hybrid-fused, "
                         "hybrid-colocated, hybrid-parametric, pod, hybrid-tuned:path=FILE)")
    q_lens = parse_int_list(args.q_lens, "q-lens", 1, MAX_KV_LEN_TOKENS)
    q, kv = check_lengths(q_lens, kv_lens)
    plan = policy.plan_hybrid(q, kv, shape, device)
    info = {**plan.summary(), "q_lens": [int(x) for x in q],
            "splits_per_request": [int(x) for x in plan.splits],
            "waves": plan.waves(device.sm_count),
            # numpy scalars in the notes print as plain numbers (and serialise as JSON)
            "notes": {k: v.item() if hasattr(v, "item") else v for k, v in plan.notes.items()}}
    if args.json:
        print_json({"policy": policy.name, "params": policy.params(), "device": device.to_dict(),
                    "shape": shape.to_dict(), "plan": info})
        return 0
    print(f"policy {policy.name} on {device.name} ({device.sm_count} SMs), shape {shape.to_dict()}")
    for key, value in info.items():
        print(f"  {key}: {value}")
    return 0

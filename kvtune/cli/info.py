"""`kvtune info`: device, backends, timers, versions, policies, suites, distributions."""

from __future__ import annotations

from kvtune.cli.common import add_command, print_json


def add_parser(sub) -> None:
    p = add_command(sub, "info", "device, backends, timers, versions, policies, distributions", [
        "kvtune info",
        "kvtune info --json | jq .distributions",
    ], "What this machine can run: the GPU (or that the simulator stands in), which backends and "
       "timers work, the device models, policies, suites and distributions, and versions.")
    p.add_argument("--json", action="store_true", help="print everything as one JSON document")
    p.set_defaults(handler=run)


def collect_info() -> dict:
    """Everything `kvtune info` shows, as plain data."""
    from kvtune.harness.backends import BACKEND_MODULES, BackendUnavailable, backend_class
    from kvtune.harness.device import DEVICE_MODELS, cuda_available, live_device
    from kvtune.harness.environment import environment_record
    from kvtune.kernels import policies
    from kvtune.workloads.distributions import describe_distributions
    from kvtune.workloads.suites import suite_names

    gpu = cuda_available()
    if gpu:
        dev = live_device()
        device = {"name": dev.name, "sm_count": dev.sm_count, "l2_bytes": dev.l2_bytes, "live": True}
    else:
        device = {"name": None, "live": False,
                  "note": "no CUDA GPU found; the simulator backend runs (numbers are a model)"}
    backends = {}
    for name in BACKEND_MODULES:
        try:
            backend_class(name)
            state = "available" if name == "simulator" or gpu else "installed, needs a CUDA GPU"
        except BackendUnavailable as exc:
            state = f"not available: {exc}"
        backends[name] = state
    try:
        from kvtune.harness.timing import cupti_unavailable_reason

        reason = cupti_unavailable_reason()
    except ImportError as exc:  # pragma: no cover
        reason = str(exc)
    timers = {"cupti": "available" if gpu and not reason else "not available: " + (reason or "no GPU")}
    timers.update({t: "available" if gpu else "needs a CUDA GPU" for t in ("events", "graph")})
    env = environment_record(None)
    versions = {k.removesuffix("_version"): v for k, v in env.items() if k.endswith("_version") and v}
    from kvtune.harness.device import SIM_KERNELS, shipped_calibration

    calibrated = {m: [k for k in SIM_KERNELS if shipped_calibration(m, k)] for m in DEVICE_MODELS}
    return {"device": device, "backends": backends, "timers": timers,
            "device_models": list(DEVICE_MODELS), "calibrated_models": calibrated,
            "policies": policies.names(),
            "suites": suite_names(), "distributions": describe_distributions(),
            "versions": versions}


def run(args) -> int:
    info = collect_info()
    if args.json:
        print_json(info)
        return 0
    dev = info["device"]
    if dev["live"]:
        print(f"device: {dev['name']}, {dev['sm_count']} SMs, L2 {dev['l2_bytes'] / 2**20:.0f} MiB")
    else:
        print(f"device: {dev['note']}")
    print("backends:")
    for name, state in info["backends"].items():
        print(f"  {name}: {state}")
    print("timers:")
    for name, state in info["timers"].items():
        print(f"  {name}: {state}")
    print("device models:")
    for m, k in info["calibrated_models"].items():
        print(f"  {m}: " + (f"calibrated for {', '.join(k)}" if k else "uncalibrated"))
    _wrapped("policies", info["policies"])
    _wrapped("suites", info["suites"])
    print("distributions (parameters=default; `kvtune info --json` has units and ranges):")
    for name, d in info["distributions"].items():
        params = " ".join(f"{p}={_short(s['default'])}" for p, s in d["params"].items()) or "-"
        print(f"  {name:<15} {_clip(params, 80)}")
    _wrapped("versions", [f"{k} {v}" for k, v in info["versions"].items()])
    return 0


def _wrapped(label: str, items, width: int = 100) -> None:
    """`label: a, b, c` folded at `width` characters, continuation lines indented."""
    import textwrap

    print(textwrap.fill(", ".join(items), width=width, initial_indent=f"{label}: ",
                        subsequent_indent="  ", break_on_hyphens=False))


def _short(value) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{v}" for k, v in value.items()) + "}"
    return str(value)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."

"""What every `kvtune` subcommand shares: the parser class, flag groups, and flags -> settings.

Only kvtune.cli knows argparse. Each subcommand module adds its parser (`add_parser(sub)`) and a
handler that turns the parsed flags into a plain settings object of a lower layer
(CaseSettings, BackendSettings, BenchSettings, TuneConfig, ...) and calls that layer.
"""

from __future__ import annotations

import argparse
import textwrap
import shlex
import sys

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input found by the CLI itself; printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse's own errors become one line and exit 2, like ours."""

    def error(self, message):
        raise CliError(f"{self.prog}: {message}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples of a description as written, and wraps argument help at spaces only:
    policy and shape names hold hyphens, and a name cut at one could not be copied back."""

    def _split_lines(self, text, width):
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)


def add_command(sub, name: str, summary: str, examples: list[str], description: str = ""):
    """A subcommand parser with a description and examples in its --help."""
    text = (description or summary) + "\n\nexamples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=summary, description=text, formatter_class=HelpFormatter)


def command_line(argv=None) -> str:
    """The command as a user would type it again: `kvtune <args>`, whatever started the process
    (the console script, `python -m kvtune`, or a test calling main), with secrets in storage
    URLs removed."""
    from kvtune.harness.redact import redact_text

    args = sys.argv[1:] if argv is None else list(argv)
    return redact_text("kvtune " + " ".join(shlex.quote(redact_text(a)) for a in args))


def add_suite_arguments(p) -> None:
    """The arguments that choose cases: a named suite, or one distribution at some batch sizes."""
    from kvtune.workloads.shapes import DEFAULT_SHAPE_NAME, SHAPES
    from kvtune.workloads.suites import suite_names

    p.add_argument("--suite", help="named suite: " + ", ".join(suite_names()) + " (default smoke)")
    p.add_argument("--distribution", help="one distribution instead of a suite (see `kvtune info`)")
    p.add_argument("--batch-sizes", help="with --distribution: comma-separated batch sizes")
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="distribution parameter (repeatable)")
    p.add_argument("--seeds", default="0", help="with --distribution: comma-separated seeds (default 0)")
    p.add_argument("--shape", help=f"attention shape: {', '.join(SHAPES)} (default {DEFAULT_SHAPE_NAME})")
    p.add_argument("--page-size", type=int, help="tokens per KV page, a power of two 1..128 (default 16)")
    p.add_argument("--dtype", help="query/output and KV element type: bf16 or fp16 (default bf16)")
    p.add_argument("--kv-dtype", help="KV cache element type: bf16, fp16 or fp8_e4m3 (e4m3 pages "
                   "with per-tensor scales, 1 byte per element; default: --dtype)")
    p.add_argument("--q-len", type=int, metavar="K",
                   help="query tokens per decode, 1..16 (2..16: speculative decode batches; with "
                        "--distribution hybrid it sets decode_q_len)")
    add_head_arguments(p)


def add_head_arguments(p) -> None:
    p.add_argument("--num-qo-heads", type=int, help="override the shape's query heads")
    p.add_argument("--num-kv-heads", type=int, help="override the shape's KV heads")
    p.add_argument("--head-dim", type=int, help="override the shape's head_dim (64, 128, 256)")


def add_backend_arguments(p) -> None:
    from kvtune.harness.backends.select import DEFAULT_DEVICE_MODEL
    from kvtune.harness.device import DEVICE_MODELS

    p.add_argument("--backend", default="auto", help="auto, simulator, triton, flashinfer (default "
                   "auto: triton on a CUDA GPU, else the simulator)")
    from kvtune.harness.device import SIM_KERNELS

    p.add_argument("--device-model", help="the simulator's device model: " + ", ".join(DEVICE_MODELS)
                   + " or a calibration file from `kvtune calibrate` (.json)"
                   + f" (default: the preset of the GPU present, else {DEFAULT_DEVICE_MODEL})")
    p.add_argument("--sim-kernel", help="the kernel the simulator stands in for: "
                   + ", ".join(SIM_KERNELS) + " (default triton, or the calibration file's)")
    p.add_argument("--timer", default="auto", help="GPU timer: auto, cupti, events, graph (default auto)")
    p.add_argument("--warm-l2", action="store_true", help="time with a hot L2 (default: flushed before each run)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="flashinfer backend: wrappers with use_cuda_graph=True (padded grid, "
                        "split-KV always on), as serving engines decode")
    p.add_argument("--launch-order", default=None,
                   help="triton backend: the order stage 1 hands out its tasks, plan or "
                        "longest-first (default: the product's, longest first for a static plan, "
                        "the decodes of hybrid steps too)")
    p.add_argument("--stopping", metavar="KEY=VALUE,...",
                   help="GPU stopping rule (default nvbench's: min_samples=10,min_time_ms=50,"
                        "max_noise=0.005,timeout_s=5; and quiet_retries=5: measurements taken "
                        "again while the interference guard reads the GPU disturbed)")


def case_settings(args):
    """--suite/--distribution/... -> kvtune.workloads.selection.CaseSettings."""
    from kvtune.workloads.selection import CaseSettings

    return CaseSettings(suite=args.suite, distribution=args.distribution,
                        batch_sizes=args.batch_sizes, params=tuple(args.param or ()),
                        seeds=args.seeds, shape=args.shape, page_size=args.page_size,
                        dtype=args.dtype, kv_dtype=args.kv_dtype,
                        num_qo_heads=args.num_qo_heads,
                        num_kv_heads=args.num_kv_heads, head_dim=args.head_dim,
                        q_len=getattr(args, "q_len", None))


def backend_settings(args):
    """--backend/--device-model/--timer/--warm-l2/--stopping -> BackendSettings."""
    from kvtune.harness.bench import BackendSettings

    return BackendSettings(backend=args.backend, device_model=args.device_model,
                           sim_kernel=getattr(args, "sim_kernel", None), timer=args.timer,
                           warm_l2=args.warm_l2, stopping=args.stopping,
                           cuda_graph=bool(getattr(args, "cuda_graph", False)),
                           launch_order=getattr(args, "launch_order", None))


def print_json(value) -> None:
    """One JSON document on stdout (numpy values as plain numbers)."""
    import json

    from kvtune.harness.store import json_default

    print(json.dumps(value, indent=2, default=json_default))

"""Compile the stage-1 decode kernel for sm_90 on a machine without a GPU and count what it became.

For each (shape, KV type, configuration) this builds `kernels/decode.py:_attend_kernel` through
`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 128))` with the integer/pointer
divisibility hints the JIT would give it on a GPU (16-byte aligned pointers, strides that are
multiples of 16), then reports from the compiled artefacts:

  regs, spill bytes (ptxas), shared memory bytes, and from the PTX: conversions (`cvt.*`, by
  type pair), `mma`, `ldmatrix`, `ld.shared` / `st.shared` (in all and by width:
  `ld.shared.b8` is one byte per load), `cp.async`, `prmt` (byte shuffles) and all
  instructions, static counts, plus data conversions (cvt to or from e4m3/f16/bf16) per K/V
  element loaded per step (their static count x threads / (2 x block_n x head_dim): what one
  element costs, if the loop body holds all of them; the query and output conversions, once per
  task, count too).

No GPU, no timing: this is what the generated code looks like, to be read next to a GPU run.
The local Triton may be newer than the GPU's (3.9 here, 3.6 there); the lowering of the
conversions is the same family of rules, but counts are of the local compiler.

    python benchmarks/compile_survey.py [--out DIR]          # the default survey
    python benchmarks/compile_survey.py --head-dim 128 --group 8 --kv fp8 --configs bn128-w4-s3-pa
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compile, even without a GPU (kernels.triton_mode keeps it)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kvtune.kernels import decode as decode_mod  # noqa: E402
from kvtune.kernels import decode_flat as decode_flat_mod  # noqa: E402
from kvtune.kernels.decode_config import KernelConfig  # noqa: E402

TARGET = GPUTarget("cuda", 90, 128)
_Q_TYPES = {"bf16": ("*bf16", tl.bfloat16), "fp16": ("*fp16", tl.float16)}
_KV_TYPES = {"bf16": None, "fp16": None, "fp8": "*fp8e4nv"}


def parse_label(label: str) -> KernelConfig:
    """bn128-w4-s3-pa -> KernelConfig(128, 4, 3, page_ahead=True) (KernelConfig.from_label)."""
    return KernelConfig.from_label(label)


def compile_kernel(head_dim: int, group: int, q_type: str, kv_type: str, cfg: KernelConfig,
                   page_size: int = 16, mode: int = 0, num_kv_heads: int = 8,
                   tail_merge: bool = False):
    """The compiled kernel (triton CompiledKernel) for sm_90, without launching anything.
    tail_merge: the variant that merges split requests in its tail (kernels/merge_tail.py).
    A config with flat_per_sm builds kernels/decode_flat.py's flattened stage 1 instead."""
    flat = bool(cfg.flat_per_sm)
    fn = decode_flat_mod._attend_flat_kernel if flat else decode_mod._attend_kernel
    q_ptr, p_dtype = _Q_TYPES[q_type]
    kv_ptr = _KV_TYPES[kv_type] or q_ptr  # a 16-bit cache has the query type
    args = {
        "rows_ptr": "*i32", "first_ptr": "*i32", "tiles_ptr": "*i32",
        "q_ptr": q_ptr, "k_ptr": kv_ptr, "v_ptr": kv_ptr, "out_ptr": q_ptr,
        "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "page_indptr_ptr": "*i32",
        "page_indices_ptr": "*i32", "items_ptr": "*i32", "counter_ptr": "*i32",
        "num_items": "i32", "num_tasks": "i32", "num_programs": "i32",
        "qk_scale_log2": "fp32", "v_scale": "fp32",
        "stride_q_b": "i32", "stride_q_h": "i32", "stride_o_b": "i32", "stride_o_h": "i32",
        "stride_kv_page": "i32", "stride_kv_tok": "i32", "stride_part_row": "i32",
    }
    if tail_merge:
        args.update({n: "*i32" for n in ("row_job_ptr", "job_row0_ptr", "job_count_ptr",
                                         "job_dest_ptr", "job_parent_ptr", "ticket_ptr")})
    g_pad = max(16, triton.next_power_of_2(group))
    constexprs = {
        "NUM_QO_HEADS": group * num_kv_heads, "G": group, "G_PAD": g_pad, "HEAD_DIM": head_dim,
        "PAGE_SIZE": page_size, "BLOCK_N": cfg.block_n, "MODE": mode, "PREFETCH": cfg.prefetch,
        "PAGE_AHEAD": cfg.page_ahead, "DOT_PRECISION": "tf32", "UPCAST_DOT": False,
        "P_DTYPE": tl.float16 if kv_type == "fp8" else p_dtype, "KV_FP8": kv_type == "fp8",
        "Q_TO_FP16": kv_type == "fp8" and q_type == "bf16",
        "V_WIDE": cfg.v_widen and kv_type == "fp8", "ASM": True, "WARP_SPLIT": cfg.warp_split,
        "V_PAIRS": cfg.v_pairs and kv_type == "fp8", "TAIL_MERGE": tail_merge,
        "PAGE_IDS_L2": cfg.page_ids_l2,
        "ROW": decode_flat_mod.ROW_FIELDS,
    }
    constexprs = {n: v for n, v in constexprs.items() if n in fn.arg_names}
    args = {n: v for n, v in args.items() if n in fn.arg_names}
    signature = {name: args.get(name, "constexpr") for name in fn.arg_names}
    # What the JIT's specialisation would say on a GPU: torch allocations are 16-byte aligned,
    # and every stride here is a multiple of 16 elements (head_dim >= 64).
    aligned = [n for n in args if n.endswith("_ptr") or n.startswith("stride_")]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    if cfg.max_registers:  # as kernels/decode.py launches it: `.maxnreg` in the PTX
        options["maxnreg"] = cfg.max_registers
    return triton.compile(src, target=TARGET, options=options)


def ptx_counts(ptx: str) -> dict:
    """Static PTX instruction counts: cvt by type pair, mma, ldmatrix, shared loads and stores (in
    all and by width), async copies."""
    ops = Counter()
    cvts = Counter()
    # ld.shared / st.shared by width (ld.shared.b8 is one byte per load) and cp.async by bytes
    shared = Counter()
    for line in ptx.splitlines():
        s = line.strip()
        if not s or s.startswith(("//", ".", "{", "}", "$")) or s.endswith(":"):
            continue
        s = re.sub(r"^@!?%p\d+\s+", "", s)
        op = s.split()[0].rstrip(";")
        ops["all"] += 1
        base = op.split(".")[0]
        if base == "cvt":
            cvts[op] += 1
            ops["cvt"] += 1
            if re.search(r"e4m3|e5m2|f16|bf16", op):  # a data conversion, not index arithmetic
                ops["cvt_data"] += 1
        elif base in ("mma", "wgmma", "ldmatrix", "prmt", "cp", "stmatrix", "shfl"):
            ops[base if base != "cp" else "cp.async"] += 1
            size = re.search(r",\s*(0x[0-9a-f]+|\d+)\s*(?:,|;)", s)
            if op.startswith(("cp.async.ca", "cp.async.cg")) and size:
                shared[f"{op} {int(size[1], 0)}B"] += 1  # bytes per global -> shared copy
        elif op.startswith("ld.shared"):
            ops["ld.shared"] += 1
            shared[op] += 1
        elif op.startswith("st.shared"):
            ops["st.shared"] += 1
            shared[op] += 1
        elif op.startswith("ld.global"):
            ops["ld.global"] += 1
    # KernelConfig.page_ids_l2's prefetch.global.L2 sits inside an inline-asm { } block, which
    # the per-line count above skips.
    prefetches = len(re.findall(r"\bprefetch\.global", ptx))
    if prefetches:
        ops["prefetch"] = prefetches
    return {"ops": dict(ops), "cvt": dict(sorted(cvts.items(), key=lambda kv: -kv[1])),
            "shared": dict(sorted(shared.items(), key=lambda kv: -kv[1]))}


def ptxas_usage(ptx: str) -> tuple[int, int, dict]:
    """(registers per thread, spill store bytes, SASS opcode counts) from `ptxas -v` on the PTX
    for sm_90a, the target Triton builds for capability 90 (a CompiledKernel reads these only on
    a GPU), and `cuobjdump -sass` of the cubin where Triton ships it (else no SASS counts)."""
    from triton.backends.nvidia.compiler import get_ptxas
    ptxas = Path(get_ptxas(90).path)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        cubin = Path(tmp) / "k.cubin"
        path.write_text(ptx)
        res = subprocess.run([str(ptxas), "-v", "--gpu-name=sm_90a", str(path), "-o",
                              str(cubin)], capture_output=True, text=True, check=True)
        sass = Counter()
        cuobjdump = ptxas.parent / "cuobjdump"
        if cuobjdump.exists():
            dump = subprocess.run([str(cuobjdump), "-sass", str(cubin)], capture_output=True,
                                  text=True, check=True).stdout
            for m in re.finditer(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)",
                                 dump, re.M):
                sass["all"] += 1
                sass[m[1]] += 1
    regs = re.search(r"Used (\d+) registers", res.stderr)
    spills = re.search(r"(\d+) bytes spill stores", res.stderr)
    return int(regs[1]) if regs else -1, int(spills[1]) if spills else 0, dict(sass)


def survey_row(head_dim, group, q_type, kv_type, cfg, **kw) -> dict:
    k = compile_kernel(head_dim, group, q_type, kv_type, cfg, **kw)
    counts = ptx_counts(k.asm["ptx"])
    threads = 32 * cfg.num_warps
    elements = 2 * cfg.block_n * head_dim  # K and V of one step
    md = k.metadata
    regs, spills, sass = ptxas_usage(k.asm["ptx"])
    return {
        "head_dim": head_dim, "group": group, "q": q_type, "kv": kv_type, "config": cfg.label(),
        "tail_merge": bool(kw.get("tail_merge")), "page_size": kw.get("page_size", 16),
        "regs": regs, "spill_bytes": spills, "smem_bytes": md.shared,
        **{f"ptx_{n}": v for n, v in counts["ops"].items()},
        "cvt_data_per_kv_element": round(counts["ops"].get("cvt_data", 0) * threads / elements, 3),
        "cvt_kinds": counts["cvt"], "shared_kinds": counts["shared"],
        # SASS (static): all, and the shared-memory, conversion and mma opcodes
        "sass": {n: v for n, v in sorted(sass.items(), key=lambda kv: -kv[1])
                 if n == "all" or n.startswith(("LDS", "STS", "LDSM", "LDGSTS", "F2FP", "HMMA",
                                                "PRMT"))},
    }


# Head_dim-128 entries (fp8 and 16-bit) of the table's history and the fp8 alternatives swept.
DEFAULT = [
    (128, 8, "bf16", "fp8", "bn128-w4-s2"), (128, 8, "bf16", "fp8", "bn128-w4-s3-pa"),
    (128, 8, "bf16", "fp8", "bn128-w4-s4-pa"), (128, 8, "bf16", "fp8", "bn64-w4-s4-pa"),
    (128, 8, "bf16", "fp8", "bn128-w8-s3-pa"), (128, 8, "fp16", "fp8", "bn128-w4-s2"),
    (128, 4, "bf16", "bf16", "bn128-w4-s2"), (128, 16, "bf16", "bf16", "bn64-w4-s4-pa"),
    (128, 8, "bf16", "bf16", "bn128-w8-s3-pa"), (128, 8, "bf16", "bf16", "bn128-w8-s4-pa"),
    (64, 4, "bf16", "fp8", "bn128-w4-s4-pa"), (256, 2, "bf16", "fp8", "bn32-w4-s4-pa"),
    # fp8 V widened before the P.V product (-vw): no byte-wide shared-memory loads left.
    (128, 8, "bf16", "fp8", "bn128-w4-s3-pa-vw"), (128, 8, "bf16", "fp8", "bn64-w4-s4-pa-vw"),
    (128, 8, "bf16", "fp8", "bn128-w8-s3-pa-vw"), (64, 4, "bf16", "fp8", "bn128-w4-s4-pa-vw"),
    (256, 2, "bf16", "fp8", "bn32-w4-s4-pa-vw"),
    # fp8 V read as element pairs (-vp, the table's entries since the tenth session).
    (128, 4, "bf16", "fp8", "bn128-w4-s3-pa-vp"), (128, 8, "bf16", "fp8", "bn128-w4-s3-pa-vp"),
    (64, 4, "bf16", "fp8", "bn128-w4-s3-pa-vp"), (256, 2, "bf16", "fp8", "bn64-w4-s3-pa-vp"),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--group", type=int, default=8, help="query heads per KV head (G)")
    ap.add_argument("--q", default="bf16", choices=sorted(_Q_TYPES))
    ap.add_argument("--kv", default="fp8", choices=sorted(_KV_TYPES))
    ap.add_argument("--configs", default="", help="comma-separated labels, e.g. bn128-w4-s3-pa")
    ap.add_argument("--out", type=Path, help="folder for survey.json")
    ap.add_argument("--tail-merge", action="store_true",
                    help="the stage-1 variant that merges split requests in its tail")
    ap.add_argument("--page", type=int, default=16, help="tokens per page (a constexpr of the "
                    "kernel: registers and shared memory may differ by page size)")
    a = ap.parse_args(argv)
    if a.head_dim:
        cases = [(a.head_dim, a.group, a.q, a.kv, c) for c in a.configs.split(",") if c]
    else:
        cases = DEFAULT
    rows = []
    for hd, g, qt, kvt, label in cases:
        try:
            row = survey_row(hd, g, qt, kvt, parse_label(label), tail_merge=a.tail_merge,
                             page_size=a.page)
        except Exception as exc:  # a config that does not build is a result, not a crash
            row = {"head_dim": hd, "group": g, "q": qt, "kv": kvt, "config": label,
                   "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "survey.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

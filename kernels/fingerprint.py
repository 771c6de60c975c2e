"""What a tuned split rule depends on in kvtune's Triton decode kernel, as one hash.

A tuned heuristic's splits are chosen for the kernel it was measured with: a change to the
kernel's loops or to the rules that pick its configuration (kernels/decode_config.py: entries,
twins, residency) can move the best split. On an H100 the register-capped twins made FlashInfer's unsplit
plans of 320-448 programs 5-14% faster, and on an H100 and an H200 a file tuned before them lost
to FlashInfer's planner on one batch it had won (docs/KERNEL_NOTES.md, "The H200 matrix with
today's kernel"). The tune records
`decode_kernel_sha256()` with its run; `kvtune bench` names a file tuned with another one.

The hash is over the syntax trees of DECODE_KERNEL_MODULES with docstrings removed (ast.dump
without line numbers), so comments, docstrings and formatting do not change it; code and table
values do.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

# The modules of the decode launch whose code or values decide its speed: stage 1 and its
# launch, the device functions of its loops, the configuration rules, the persistent stage 1,
# the merge that runs after it by default, and the paged cache it reads.
DECODE_KERNEL_MODULES = ("decode.py", "decode_steps.py", "decode_config.py", "decode_flat.py",
                         "merge_chunked.py", "paged.py")
KERNELS_DIR = Path(__file__).resolve().parent
HASH_CHARS = 16


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """`tree` with the docstring of the module and of every class and function removed."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return tree


def decode_kernel_sha256(kernels_dir: Path = KERNELS_DIR) -> str | None:
    """The first HASH_CHARS hex digits of a sha256 over DECODE_KERNEL_MODULES under
    `kernels_dir` (module name and docstring-free syntax tree of each, in that order); None when
    a module is missing or does not parse. Never raises."""
    digest = hashlib.sha256()
    try:
        for name in DECODE_KERNEL_MODULES:
            tree = _without_docstrings(ast.parse((Path(kernels_dir) / name).read_text()))
            digest.update(name.encode() + b"\0")
            digest.update(ast.dump(tree, annotate_fields=True, include_attributes=False).encode())
    except (OSError, SyntaxError, ValueError):
        return None
    return digest.hexdigest()[:HASH_CHARS]


__all__ = ["DECODE_KERNEL_MODULES", "HASH_CHARS", "decode_kernel_sha256"]

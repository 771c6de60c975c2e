"""What a tuned split rule depends on in kvtune's Triton decode kernel, as one hash.

A tuned heuristic's splits are chosen for the kernel it was measured with: a change to the
kernel's loops or to the rules that pick its configuration (kernels/decode_config.py: entries,
twins, residency) can move the best split. On an H100 the register-capped twins made FlashInfer's unsplit
plans of 320-448 programs 5-14% faster, and on an H100 and an H200 a file tuned before them lost
to FlashInfer's planner on one batch it had won (docs/KERNEL_NOTES.md, "The H200 matrix with
today's kernel"). The tune records
`decode_kernel_sha256()` with its run; `kvtune bench` names a file tuned with another one.

The hash is over the syntax trees of DECODE_KERNEL_MODULES with docstrings removed, so comments,
docstrings and formatting do not change it; code and table values do. The trees are written out
by `_canonical`, not ast.dump: each Python release adds fields that are empty on this code (3.12
gave every function `type_params=[]`), so ast.dump hashed the same kernel differently under the
GPU machine's Python 3.12 and this machine's 3.11 (twenty-sixth session). Hashes of this format
start with HASH_FORMAT; a recorded hash without it is of the old, version-dependent format.
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
# The prefix of this format's hashes (see the module docstring).
HASH_FORMAT = "k2"


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """`tree` with the docstring of the module and of every class and function removed."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _canonical(node) -> str:
    """A syntax tree as text that is the same under every Python 3 release that parses it alike:
    node type and its fields in order, fields that are None or [] left out (the ones a newer
    release added are empty here), no line numbers."""
    if isinstance(node, ast.AST):
        fields = [(name, getattr(node, name, None)) for name in node._fields]
        inner = " ".join(f"{name}={_canonical(value)}" for name, value in fields
                         if value is not None and value != [])
        return f"({type(node).__name__} {inner})"
    if isinstance(node, list):
        return "[" + ",".join(_canonical(item) for item in node) + "]"
    return repr(node)


def decode_kernel_sha256(kernels_dir: Path = KERNELS_DIR) -> str | None:
    """HASH_FORMAT and the first HASH_CHARS hex digits of a sha256 over DECODE_KERNEL_MODULES
    under `kernels_dir` (module name and docstring-free syntax tree of each, in that order,
    written by _canonical); None when a module is missing or does not parse. Never raises."""
    digest = hashlib.sha256()
    try:
        for name in DECODE_KERNEL_MODULES:
            tree = _without_docstrings(ast.parse((Path(kernels_dir) / name).read_text()))
            digest.update(name.encode() + b"\0")
            digest.update(_canonical(tree).encode())
    except (OSError, SyntaxError, ValueError):
        return None
    return HASH_FORMAT + digest.hexdigest()[:HASH_CHARS]


__all__ = ["DECODE_KERNEL_MODULES", "HASH_CHARS", "HASH_FORMAT", "decode_kernel_sha256"]

"""Chooses Triton's interpreter where there is no CUDA GPU. Import this before `triton`.

`triton.jit` decides between a compiled and an interpreted function when a function is decorated,
and `import triton.language` decorates Triton's own library functions (tl.sum, tl.max, ...). So
TRITON_INTERPRET must be set before the first `import triton` of the process; otherwise an
interpreted kernel calls a compiled library function and fails ("Cannot call @triton.jit'd
outside of the scope of a kernel"). A value the user set is left alone.
"""

from __future__ import annotations

import os
import sys

import torch


def select_triton_mode() -> bool:
    """Set TRITON_INTERPRET=1 when torch sees no CUDA GPU; True when the interpreter is chosen."""
    if os.environ.get("TRITON_INTERPRET") is None and not torch.cuda.is_available():
        if "triton" in sys.modules:
            # Too late to switch: triton's library is already built for compilation.
            raise RuntimeError("kernels: triton was imported before kvtune could select its "
                               "interpreter on this machine without a GPU; set TRITON_INTERPRET=1")
        os.environ["TRITON_INTERPRET"] = "1"
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


INTERPRETER = select_triton_mode()

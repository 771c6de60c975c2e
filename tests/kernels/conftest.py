"""Kernel tests run Triton's interpreter on CPU tensors: no GPU is used.

TRITON_INTERPRET must be set before kernels.decode/kernels.merge decorate their kernels, so it
is set here, when pytest loads this directory's conftest (before any test module in it is
imported). kernels/merge.py also selects the interpreter by itself where torch sees no GPU, so a
module imported earlier elsewhere in the session still gets interpreted kernels on CPU machines.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

"""kvtune.workloads: kv_len distributions, traces, continuous batching, suites, shapes, batches.

Importing the package registers the `continuous` distribution (workloads/continuous.py builds
on the per-request distributions of workloads/distributions.py, which do not import it).
"""

from kvtune.workloads import continuous as _continuous  # noqa: F401 - registers `continuous`

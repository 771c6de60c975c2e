"""A CPU stand-in for the flashinfer backend in studies tests: the simulator's timings, with
FlashInfer's restrictions and study hooks.

It runs only what FlashInfer's batch decode can express (harness/backends/flashinfer_plan.py's
pure logic: static order, one fixed chunk for the whole batch) and declares what the real
FlashInferBackend declares: supported_schedules, fixed_split_params, split_policy and
split_rule "fixed-chunk". Tests register it as a backend module (BACKEND) so that `kvtune tune`
opens it by name.
"""

from __future__ import annotations

from kvtune.harness.backends import flashinfer_plan as fip
from kvtune.harness.backends.simulator import SimulatorBackend


class OneChunkBackend(SimulatorBackend):
    """The simulator, refusing every plan FlashInfer could not run (and counting the refusals)."""

    name = "one-chunk"
    supported_schedules = fip.SUPPORTED_SCHEDULES
    split_rule = "fixed-chunk"

    def __init__(self, device, *args, **kwargs) -> None:
        super().__init__(device, *args, **kwargs)
        self.fixed_split_params = fip.fixed_split_params(device)
        self.refused: list[str] = []

    def split_policy(self, params):
        return fip.chunk_policy(params)

    def unsupported_reason(self, plan):
        why = fip.unsupported_reason(plan)
        if why is not None:
            self.refused.append(why)
        return why


BACKEND = OneChunkBackend

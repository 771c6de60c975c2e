"""The simulator backend: predicts a plan's time with the model of harness/sim_model.py.

Its numbers are a MODEL, never a measurement: every Measurement says timer="simulated", comes from
the backend called "simulator", and names the device model, the kernel it stands in for and
whether its constants are calibrated (extra columns sim_model, sim_kernel, sim_calibrated, and
sim_constants: the constants as JSON).
"""

from __future__ import annotations

import json

import numpy as np

from kvtune.harness.backends import Measurement, Verification
from kvtune.harness.sim_model import DEFAULT_CONSTANTS, SimConstants, SimResult, simulate
from kvtune.kernels.plan import DeviceSpec, Plan
from kvtune.workloads.batch import DecodeBatch


class SimulatorBackend:
    """Backend that models a DeviceSpec on the CPU. It can model every valid plan."""

    name = "simulator"

    def __init__(self, device: DeviceSpec, constants: SimConstants = DEFAULT_CONSTANTS,
                 kernel: str = "triton", calibrated: bool = False) -> None:
        self.device = device
        self.constants = constants
        self.kernel = kernel
        self.calibrated = calibrated

    def unsupported_reason(self, plan: Plan) -> str | None:
        return None

    def verify(self, batch: DecodeBatch, plan: Plan) -> Verification:
        return Verification(ok=True, checked=False, message="simulated: no output to check")

    def simulate(self, batch: DecodeBatch, plan: Plan) -> SimResult:
        """The full model result (timeline included) of `plan` on `batch`."""
        _check_plan_matches(batch, plan)
        return simulate(plan, batch.shape, self.device, self.constants)

    def measure(self, batch: DecodeBatch, plan: Plan) -> Measurement:
        from kvtune.kernels.hybrid_plan import HybridPlan

        if isinstance(plan, HybridPlan):
            return self._measure_hybrid(batch, plan)
        result = self.simulate(batch, plan)
        t = result.time_us
        return Measurement(
            status="ok",
            latency_us=t,
            p10_us=t,
            p90_us=t,
            mean_us=t,
            std_us=0.0,
            samples=1,
            rel_spread=0.0,
            noise_met=True,
            timer="simulated",
            cold_l2=True,
            bytes_moved=batch.min_bytes,
            achieved_bytes_per_s=batch.min_bytes / (t * 1e-6),
            checked=False,
            message=f"simulated ({self.device.name}, {self.kernel})",
            extra={
                "sim_stage1_us": result.stage1_us,
                "sim_merge_us": result.merge_us,
                # The order the model handed the tasks out in, replayed so (harness/fidelity.py).
                "launch_order": result.launch_order,
                "sim_model": self.device.name,
                "sim_kernel": self.kernel,
                "sim_calibrated": self.calibrated,
                # The constants themselves, so a stored row can be replayed exactly.
                "sim_constants": json.dumps(self.constants.to_dict(), sort_keys=True),
            },
        )

    def _measure_hybrid(self, batch, plan) -> Measurement:
        """A HybridPlan through harness/sim_hybrid.py (prefill compute-bound, decode bandwidth)."""
        from kvtune.harness.sim_hybrid import simulate_hybrid
        from kvtune.workloads.batch import AttentionBatch

        if not isinstance(batch, AttentionBatch):
            batch = AttentionBatch.decode(batch)
        if not (np.array_equal(plan.q_lens, batch.q_lens)
                and np.array_equal(plan.kv_lens, batch.kv_lens)):
            raise ValueError("plan: its q_lens/kv_lens differ from the batch's; plan the batch "
                             "it is measured on")
        r = simulate_hybrid(plan, batch.shape, self.device, self.constants)
        t = r.time_us
        return Measurement(
            status="ok", latency_us=t, p10_us=t, p90_us=t, mean_us=t, std_us=0.0, samples=1,
            rel_spread=0.0, noise_met=True, timer="simulated", cold_l2=True,
            bytes_moved=batch.min_bytes, achieved_bytes_per_s=batch.min_bytes / (t * 1e-6),
            checked=False, message=f"simulated ({self.device.name})",
            extra={"sim_prefill_us": r.prefill_us, "sim_decode_us": r.decode_us,
                   "sim_merge_us": r.merge_us, "sim_model": self.device.name,
                   "sim_kernel": self.kernel, "sim_calibrated": self.calibrated,
                   # The constants, so a stored hybrid row replays exactly (the SM timeline).
                   "sim_constants": json.dumps(self.constants.to_dict(), sort_keys=True),
                   "flops": batch.causal_flops},
        )

    def close(self) -> None:
        pass


def _check_plan_matches(batch: DecodeBatch, plan: Plan) -> None:
    if plan.batch_size != batch.batch_size or not (plan.kv_lens == batch.kv_lens).all():
        raise ValueError(
            "plan: its kv_lens differ from the batch's; plan the batch it is measured on"
        )


BACKEND = SimulatorBackend

__all__ = ["BACKEND", "SimConstants", "SimResult", "SimulatorBackend", "simulate"]

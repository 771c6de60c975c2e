"""benchmarks/launch_order_model.py: the sharing model that chose what the GPU times for stage
1's launch order (a model, so these pin its arithmetic, not the GPU)."""

import subprocess
import sys

import numpy as np

from tests.benchmark_scripts import BENCHMARKS, load_benchmark

model = load_benchmark("launch_order_model")


def test_launch_keys_orders():
    items = np.array([2, 9, 4])
    assert model.launch_keys(items, 2, "plan").tolist() == [2, 9, 4, 2, 9, 4]
    assert model.launch_keys(items, 2, "longest-first").tolist() == [9, 9, 4, 4, 2, 2]


def test_equal_programs_in_whole_waves_keep_every_sm_busy():
    keys = np.full(4 * 3 * 2, 100)  # 4 SMs x 3 per SM, two waves
    assert abs(model.efficiency(keys, 4, 3, 1.0) - 1.0) < 1e-9


def test_a_long_task_entering_late_costs_its_tail_and_longest_first_recovers_it():
    # Three SMs, one program each, two KV heads of one long item and five short ones: in plan
    # order the second head's long program enters after the first head's short ones (ends at 34
    # keys' time); longest first both long programs start at once (ends at 30, the longest).
    items = np.array([30, 2, 2, 2, 2, 2])
    plan = model.efficiency(model.launch_keys(items, 2, "plan"), 3, 1, 1.0)
    longest = model.efficiency(model.launch_keys(items, 2, "longest-first"), 3, 1, 1.0)
    assert abs(plan - 80 / (3 * 34)) < 1e-9 and abs(longest - 80 / (3 * 30)) < 1e-9
    # A program alone streams at most its cap: a lone program at the end runs slower.
    assert model.efficiency(np.array([10, 10, 30]), 2, 1, 0.5) < \
        model.efficiency(np.array([10, 10, 30]), 2, 1, 1.0)


def test_the_script_runs_on_the_cpu():
    script = str(BENCHMARKS / "launch_order_model.py")
    out = subprocess.run([sys.executable, script, "--caps", "1.0"], capture_output=True,
                         text=True, check=True).stdout
    assert "llama3-8b skew80 B=64 balanced" in out and "longest-first" in out

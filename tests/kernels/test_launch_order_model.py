"""benchmarks/launch_order_model.py: the simulator's stage-1 times in the plan's launch order and
longest first on the matrix's plans (a model, so this pins what the script reports, not the
GPU)."""

import subprocess
import sys

from tests.benchmark_scripts import BENCHMARKS, load_benchmark

model = load_benchmark("launch_order_model")


def test_rows_cover_each_case_in_both_orders():
    rows = {r["case"]: r for r in model.case_rows()}
    assert len(rows) == len(model.CASES)
    uniform = rows["llama3-8b uniform B=64 balanced"]
    assert uniform["plan"] == uniform["longest-first"]  # equal items: the same launch
    skewed = rows["llama3-8b skew80 B=64 balanced"]
    assert skewed["programs"] == 720 and skewed["longest-first"] < skewed["plan"]
    one_head = rows["llama3-70b-tp8 skew80 B=64 2048"]  # one KV head: the orders coincide
    assert one_head["plan"] == one_head["longest-first"]


def test_the_script_runs_on_the_cpu_and_refuses_an_unknown_model_in_one_line():
    script = str(BENCHMARKS / "launch_order_model.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True,
                         check=True).stdout
    assert "a model, not a measurement" in out and "longest-first" in out
    bad = subprocess.run([sys.executable, script, "--device-model", "v100"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1

"""benchmarks/profile_rows.py: the one-line form of profile_decode.py's JSON rows in a GPU call's
log (configuration rows, FlashInfer's rows, errors passed through)."""

from tests.benchmark_scripts import load_benchmark


def test_rows_print_the_case_the_config_and_the_timings():
    rows = load_benchmark("profile_rows")
    line = rows.row_line('{"shape": "llama3-8b", "kv_dtype": "fp8_e4m3", "dist": "skew80", '
                         '"batch": 8, "chunk": "balanced", "config": "bn128-w4-s3-pa-vp-r168", '
                         '"num_tasks": 272, "matrix_us": 249.3, "loop_us": 250.1, '
                         '"fraction_of_copy": 0.71, "same_bits": true, "status": "ok"}')
    assert line == ("llama3-8b fp8_e4m3 skew80 8 balanced bn128-w4-s3-pa-vp-r168 272 249.3 250.1 "
                    "0.71 True ok")
    fi = rows.row_line('{"shape": "llama3-70b-tp8", "dist": "uniform", "batch": 8, '
                       '"chunk": "balanced", "when": "after", "matrix_us": 49.8}')
    assert fi.startswith("llama3-70b-tp8 uniform 8 balanced FI-after None 49.8")
    assert rows.row_line("RuntimeError: " + "x" * 300 + "\n") == ("RuntimeError: " + "x" * 300)[:200]

"""benchmarks/paged_read.py and gather_ceiling.py's CPU parts: the plan's tasks with their
page-table starts, the float64 sums the GPU check compares with, the Triton read and the stream
read under the interpreter (shuffled and in-order pages, fp8 pages dequantised, the direct
page-table start), and read_ceiling's check-then-time. The Gluon TMA read needs an sm_90 GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvtune.kernels.paged import PagedKVCache
from kvtune.kernels.plan import AttentionShape, build_plan

from tests.benchmark_scripts import load_benchmark

KV_LENS = np.array([5, 40, 17, 33])


def _shape(kv_dtype="bf16"):
    return AttentionShape(num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=4,
                          dtype="bf16", kv_dtype=kv_dtype)


def test_tasks_carry_each_request_page_table_start():
    probe = load_benchmark("paged_read")
    shape = _shape()
    plan = build_plan(KV_LENS, 16, num_kv_heads=2, page_size=4)
    cache = PagedKVCache.from_lengths(KV_LENS, shape, seed=0)
    tasks = probe.plan_tasks(plan, shape.page_size)
    assert tasks.shape == (plan.num_items * 2, 8) and tasks.dtype == np.int32
    indptr = cache.page_indptr.numpy()
    assert (tasks[:, 4] == indptr[tasks[:, 0]]).all()
    # heads outer, items in plan order, every key of every request once per head
    for head in range(2):
        rows = tasks[tasks[:, 3] == head]
        assert (rows[:, 0] == plan.work_request).all()
        covered = np.zeros(KV_LENS.sum(), dtype=int)
        starts = np.concatenate([[0], np.cumsum(KV_LENS)])
        for b, lo, hi in rows[:, :3]:
            covered[starts[b] + lo: starts[b] + hi] += 1
        assert (covered == 1).all()


def test_tasks_in_the_products_longest_first_order():
    """launch_order "longest-first": the tasks in kernels.plan.launch_tasks' order (longest item
    first, its KV heads together), the same task rows as the plan order, reordered."""
    from kvtune.kernels.plan import launch_tasks

    probe = load_benchmark("paged_read")
    plan = build_plan(KV_LENS, 16, num_kv_heads=2, page_size=4)
    plain = probe.plan_tasks(plan, 4)
    lf = probe.plan_tasks(plan, 4, "longest-first")
    items, heads = launch_tasks(plan, "longest-first")
    assert (lf[:, 0] == plan.work_request[items]).all() and (lf[:, 3] == heads).all()
    assert (lf[0::2, 3] == 0).all() and (lf[1::2, 3] == 1).all()
    keys = lf[:, 2] - lf[:, 1]
    assert (np.diff(keys[0::2]) <= 0).all()
    assert sorted(map(tuple, lf.tolist())) == sorted(map(tuple, plain.tolist()))


@pytest.mark.parametrize("labels, want", [("bn32-w4-s3", ((32, 4, 3),)),
                                          ("bn128-w8-s4, bn64-w4-s2", ((128, 8, 4), (64, 4, 2)))])
def test_read_config_labels(labels, want):
    assert load_benchmark("paged_read").parse_read_configs(labels) == want


@pytest.mark.parametrize("labels", ["bn48-w4-s3", "bn64-w3-s3", "bn64-w4-s0", "bn64-w4", ""])
def test_read_config_labels_refused(labels):
    with pytest.raises(ValueError, match="--read-configs"):
        load_benchmark("paged_read").parse_read_configs(labels)


def test_reference_sums_are_the_per_task_sums_of_k_plus_v():
    probe = load_benchmark("paged_read")
    shape = _shape()
    cache = PagedKVCache.from_lengths(KV_LENS, shape, seed=1)
    tasks = np.array([[1, 3, 29, 1, 0, 0, 0, 0], [3, 0, 33, 0, 0, 0, 0, 0]], dtype=np.int32)
    ref = probe.reference_sums(cache, tasks)
    for i, (b, lo, hi, h) in enumerate(tasks[:, :4]):
        k, v = cache.request_kv(int(b))
        want = (k[lo:hi, h].double() + v[lo:hi, h].double()).sum(0)
        torch.testing.assert_close(ref[i], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kv_dtype, shuffle, direct", [("bf16", True, False),
                                                         ("bf16", False, True),
                                                         ("fp8_e4m3", True, True)])
def test_triton_read_sums_every_key_once(kv_dtype, shuffle, direct):
    probe = load_benchmark("paged_read")
    shape = _shape(kv_dtype)
    plan = build_plan(KV_LENS, 16, num_kv_heads=2, page_size=4)
    cache = PagedKVCache.from_lengths(KV_LENS, shape, seed=2, shuffle_pages=shuffle)
    tasks_np = probe.plan_tasks(plan, shape.page_size)
    ref = probe.reference_sums(cache, tasks_np)
    out = torch.full((tasks_np.shape[0], shape.head_dim), float("nan"))
    (label, go), = probe.triton_launchers(cache, torch.as_tensor(tasks_np), out,
                                          ((16, 4, 2),), direct=direct)
    assert label == "bn16-w4-s2" + ("-direct" if direct else "")
    go()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-5  # float32 sums of at most 40 keys


def test_stream_blocks_cut_every_task_into_blocks_in_order():
    probe = load_benchmark("paged_read")
    tasks = np.array([[0, 0, 10, 1, 7, 0, 0, 0], [2, 8, 12, 0, 3, 0, 0, 0]], dtype=np.int32)
    blocks = probe.stream_blocks(tasks, 4)
    assert blocks.dtype == np.int32 and blocks.shape == (3 + 1 + 1, 8)
    assert [tuple(r[:5]) for r in blocks[:-1]] == [(0, 0, 10, 7, 1), (0, 4, 10, 7, 1),
                                                   (0, 8, 10, 7, 1), (1, 8, 12, 3, 0)]
    assert blocks[-1, 0] == -1


@pytest.mark.parametrize("programs_per_sm", [1, 3])
def test_stream_read_sums_every_key_once_across_program_boundaries(programs_per_sm):
    """Programs take equal runs of the block list, cutting tasks anywhere: their atomic adds
    still give each task's sum."""
    probe = load_benchmark("paged_read")
    shape = _shape()
    plan = build_plan(KV_LENS, 16, num_kv_heads=2, page_size=4)
    cache = PagedKVCache.from_lengths(KV_LENS, shape, seed=4)
    tasks_np = probe.plan_tasks(plan, shape.page_size)
    ref = probe.reference_sums(cache, tasks_np)
    out = torch.zeros((tasks_np.shape[0], shape.head_dim))
    # 7 "SMs": programs end in the middle of tasks
    (label, go), = probe.stream_launchers(cache, tasks_np, out, ((4, 4, 2, programs_per_sm),), 7)
    assert label == f"stream-bn4-w4-s2-x{programs_per_sm}"
    go()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-5


def test_read_ceiling_times_only_configurations_that_pass_the_check(monkeypatch):
    """A configuration whose sums are wrong is counted and not timed; the best of the rest is
    the ceiling."""
    probe = load_benchmark("paged_read")
    shape = _shape()
    plan = build_plan(KV_LENS, 16, num_kv_heads=2, page_size=4)
    cache = PagedKVCache.from_lengths(KV_LENS, shape, seed=5)
    real = probe.triton_launchers

    def launchers(cache, tasks, out, configs):
        for label, go in real(cache, tasks, out, configs):
            if label.startswith("bn8"):  # a broken read: leaves its sums at NaN
                yield label, lambda: None
            else:
                yield label, go
    monkeypatch.setattr(probe, "triton_launchers", launchers)
    times = {"bn16-w4-s2": 7.0, "bn4-w4-s2": 5.0}  # in the order the configurations come
    timed = []

    def timer(fn):
        label = list(times)[len(timed)]
        timed.append(label)
        return {"median_us": times[label]}
    best = probe.read_ceiling(cache, plan, timer, configs=((16, 4, 2), (8, 4, 2), (4, 4, 2)))
    assert timed == ["bn16-w4-s2", "bn4-w4-s2"]
    assert best == {"read_us": 5.0, "read_config": "bn4-w4-s2", "read_not_ok": 1}


def test_the_probes_matrix_case_and_checked_decode():
    """bench_kernels' helpers the probes share: matrix_case is the matrix's batch and plan (as
    rebuild_matrix_case rebuilds it), checked_decode runs decode.py once and checks it against the
    float64 reference (here under the interpreter, on the CPU)."""
    from kvtune.harness.device import device_model

    bench = load_benchmark("bench_kernels")
    h100 = device_model("h100")
    variant = bench.default_variants()[0]
    shape, kv_lens, plan, chunk = bench.matrix_case(variant, "skew80", 64, "balanced-2x", h100)
    assert int(np.sum(kv_lens)) == bench.TOTAL_TOKENS and len(kv_lens) == 64
    same_shape, same_plan = bench.rebuild_matrix_case(variant, "skew80", 64, "balanced-2x", h100,
                                                      chunk=chunk, tasks=plan.num_tasks)
    assert same_shape == shape and (same_plan.splits == plan.splits).all()
    small = _shape()
    small_plan = build_plan(KV_LENS, 16, num_kv_heads=2, page_size=4)
    cache, q, launch, out, err, ok = bench.checked_decode(small_plan, KV_LENS, small,
                                                          device="cpu")
    assert ok and err < 2e-2 and out.shape == q.shape and torch.isnan(out).all()
    assert cache.shape == small


def test_case_option_names_a_matrix_case():
    probe = load_benchmark("gather_ceiling")
    assert probe.parse_case("hd256:fp8_e4m3:4:uniform:64:balanced-2x") == (
        ("hd256", "bf16", "fp8_e4m3", 4), "uniform", 64, "balanced-2x")


@pytest.mark.parametrize("argv", [["--case", "hd256:fp8_e4m3:4:uniform:64"],
                                  ["--case", "hd256:fp8_e4m3:4:zipf:64:balanced-2x"],
                                  ["--read-configs", "bn64-w4"]])
def test_bad_case_or_configs_exit_2_before_any_gpu_work(argv, capsys, tmp_path):
    probe = load_benchmark("gather_ceiling")
    assert probe.main(argv + ["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gather_ceiling: error: --")
    assert not (tmp_path / "o").exists()

"""Property tests: every policy turns random batches into valid plans that respect its caps.

A Plan validates itself when built (coverage, page alignment, order, grid), so a policy that
returns at all returned a valid plan; the tests add each policy's own bounds on top. Batches have
1 to 2048 requests of 1 to 1,000,000 tokens; shapes have pages 1..128, 1..16 KV heads, G 1..16;
devices are the datasheet presets plus random ones. Hypothesis is derandomized: CI is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtune.harness.device import DEVICE_MODELS
from kvtune.kernels import policies
from kvtune.kernels.plan import MAX_BATCH, SCHEDULES, AttentionShape, DeviceSpec, Plan, SplitParams

MAX_TOKENS = 1_000_000
PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _generated_batch(size: int, seed: int, kind: str, top: int) -> np.ndarray:
    """A batch drawn with numpy from hypothesis-chosen knobs (large batches stay cheap to draw)."""
    rng = np.random.default_rng(seed)
    if kind == "uniform-range":
        return rng.integers(1, top + 1, size)
    if kind == "equal":
        return np.full(size, top)
    if kind == "one-long":
        rest = rng.integers(1, max(top // 64, 1) + 1, size - 1)
        return np.concatenate(([top], rest))
    lens = rng.lognormal(np.log(max(top / 8, 1.0)), 1.5, size)
    return np.clip(np.round(lens), 1, MAX_TOKENS).astype(np.int64)


generated_batches = st.builds(
    _generated_batch,
    size=st.one_of(st.integers(1, 64), st.integers(65, 2048)),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["uniform-range", "equal", "one-long", "lognormal"]),
    top=st.one_of(st.integers(1, 4096), st.integers(4097, MAX_TOKENS)),
)
# Mostly numpy-drawn batches (large ones are cheap that way), some small explicit lists that
# hypothesis can shrink to a minimal failing case.
batches = st.one_of(
    st.lists(st.integers(1, MAX_TOKENS), min_size=1, max_size=12).map(np.array),
    generated_batches,
    generated_batches,
)
shapes = st.builds(
    lambda kv_heads, group, head_dim, page: AttentionShape(
        num_qo_heads=kv_heads * group, num_kv_heads=kv_heads, head_dim=head_dim, page_size=page
    ),
    kv_heads=st.integers(1, 16),
    group=st.integers(1, 16),
    head_dim=st.sampled_from([64, 128, 256]),
    page=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]),
)
devices = st.one_of(
    st.sampled_from(list(DEVICE_MODELS.values())),
    st.builds(
        lambda sms, ctas: DeviceSpec(
            "random", sm_count=sms, l2_bytes=50 << 20, hbm_bytes_per_s=3e12, max_ctas_per_sm=ctas
        ),
        sms=st.integers(1, 256),
        ctas=st.integers(1, 32),
    ),
)
split_params = st.builds(
    SplitParams,
    min_tokens_per_cta=st.one_of(st.integers(1, 4096), st.integers(4096, 1 << 20)),
    max_waves=st.integers(1, 64),
    max_splits=st.integers(1, 1024),
    ctas_per_sm=st.integers(1, 32),
    schedule=st.sampled_from(SCHEDULES),
)


def check_common(plan: Plan, kv_lens: np.ndarray, shape: AttentionShape) -> None:
    assert isinstance(plan, Plan)
    assert np.array_equal(plan.kv_lens, kv_lens)
    assert plan.num_kv_heads == shape.num_kv_heads and plan.page_size == shape.page_size
    assert int(plan.item_tokens().sum()) == int(kv_lens.sum())  # every token once per head


def full_chunks(plan: Plan) -> np.ndarray:
    """Token counts of the items that are not the last of their request."""
    last = plan.work_split == plan.splits[plan.work_request] - 1
    return plan.item_tokens()[~last]


@PROPERTY_SETTINGS
@given(
    kv_lens=batches, shape=shapes, device=devices, occupancy=st.integers(0, 32), graph=st.booleans()
)
def test_flashinfer_cuda_core(kv_lens, shape, device, occupancy, graph):
    policy = policies.get(
        "flashinfer-cuda-core", occupancy_ctas_per_sm=occupancy, enable_cuda_graph=graph
    )
    if shape.group_size not in (1, 2, 3, 4, 8):  # FlashInfer's CUDA-core kernels: no others
        with pytest.raises(ValueError, match="group_size"):
            policy.plan(kv_lens, shape, device)
        return
    plan = policy.plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    max_grid = (occupancy or device.max_ctas_per_sm) * device.sm_count
    assert plan.notes["max_grid"] == max_grid
    if plan.notes["split_kv"]:
        assert plan.num_tasks <= max_grid
        min_chunk = max(128 // shape.page_size, 1) * shape.page_size
        assert (full_chunks(plan) == plan.notes["chunk_pages"] * shape.page_size).all()
        assert plan.notes["chunk_pages"] * shape.page_size >= min_chunk
    else:
        assert (plan.splits == 1).all()
    if len(kv_lens) * shape.num_kv_heads >= max_grid:
        assert (plan.splits == 1).all()


@PROPERTY_SETTINGS
@given(
    kv_lens=batches,
    shape=shapes,
    device=devices,
    mode=st.sampled_from(["search", "fixed", "disabled"]),
    fixed=st.integers(1, 4096),
)
def test_flashinfer_tensor_core(kv_lens, shape, device, mode, fixed):
    overrides = {"fixed": {"fixed_split_size": fixed}, "disabled": {"disable_split_kv": True}}
    plan = policies.get("flashinfer-tensor-core", **overrides.get(mode, {})).plan(
        kv_lens, shape, device
    )
    check_common(plan, kv_lens, shape)
    limit = 2 * device.sm_count // shape.num_kv_heads
    tiles_q = -(-shape.group_size // policies.fa2_cta_tile_q(shape.group_size, shape.head_dim))
    if mode == "disabled":
        assert (plan.splits == 1).all()
    elif mode == "fixed":
        assert (full_chunks(plan) == fixed * shape.page_size).all()
    elif plan.notes["split_kv"]:
        assert tiles_q * plan.num_items <= limit
        assert plan.notes["chunk_pages"] >= max(128 // shape.page_size, 1)
    else:
        assert (plan.splits == 1).all()
    if mode == "search" and tiles_q * len(kv_lens) >= limit:
        assert (plan.splits == 1).all()  # the threshold of the seed article


@PROPERTY_SETTINGS
@given(kv_lens=batches, shape=shapes, device=devices, num_splits=st.sampled_from([0, 0, 1, 2, 7]))
def test_fa3(kv_lens, shape, device, num_splits):
    plan = policies.get("fa3", num_splits=num_splits).plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    cap = plan.notes["num_splits_static"]
    assert (plan.splits <= cap).all()
    if num_splits == 0:
        assert cap <= min(128, device.sm_count) or cap == 1
        if len(kv_lens) > 992:
            assert (plan.splits == 1).all()
    if num_splits == 1:
        assert (plan.splits == 1).all()
    assert plan.schedule == "persistent-heavy-first"
    assert plan.grid_size == min(device.sm_count, plan.num_tasks)
    # Pieces are whole kBlockN-token n-blocks (tile_size.h: 128, or 80 for head_dim 256 on
    # Hopper), rounded up to the page.
    block_n, page = plan.notes["block_n_tokens"], shape.page_size
    for chunk in full_chunks(plan):
        k = -(-int(chunk) // block_n)
        assert any(-(-(kk * block_n) // page) * page == chunk for kk in (k - 1, k)), chunk


@PROPERTY_SETTINGS
@given(kv_lens=batches, shape=shapes, device=devices, oversub=st.booleans())
def test_trtllm(kv_lens, shape, device, oversub):
    name = "trtllm-oversub" if oversub else "trtllm"
    plan = policies.get(name).plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    splits, base = plan.notes["splits"], plan.notes["base_ctas"]
    assert (plan.splits <= splits).all()
    assert plan.splits[np.argmax(kv_lens)] == -(-int(kv_lens.max()) // plan.notes["chunk_tokens"])
    assert (full_chunks(plan) == plan.notes["chunk_tokens"]).all()
    if oversub:
        assert splits <= max(plan.notes["base_splits"], 32)
    else:
        assert splits <= max(1, device.sm_count // base)
    assert plan.notes["launched_ctas"] == base * splits >= plan.num_tasks


@PROPERTY_SETTINGS
@given(kv_lens=batches, shape=shapes, device=devices, max_kv_splits=st.integers(1, 64))
def test_sglang_triton(kv_lens, shape, device, max_kv_splits):
    plan = policies.get("sglang-triton", max_kv_splits=max_kv_splits).plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    assert (plan.splits <= max_kv_splits).all()
    align = max(32, shape.page_size)
    assert (full_chunks(plan) % align == 0).all()


@PROPERTY_SETTINGS
@given(kv_lens=batches, shape=shapes, device=devices)
def test_vllm_triton(kv_lens, shape, device):
    plan = policies.get("vllm-triton").plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    assert (plan.splits <= 16).all()
    if len(kv_lens) > 128 // shape.num_kv_heads:
        assert (plan.splits == 1).all()


@PROPERTY_SETTINGS
@given(
    kv_lens=batches,
    shape=shapes,
    device=devices,
    chunk=st.sampled_from([2048, 2048, 3000, 16384, 65536]),
    schedule=st.sampled_from(SCHEDULES),
    cut=st.integers(1, 2048),
)
def test_fixed_split_is_invariant(kv_lens, shape, device, chunk, schedule, cut):
    policy = policies.get("fixed-split", chunk_tokens=chunk, schedule=schedule)
    plan = policy.plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    aligned = -(-chunk // shape.page_size) * shape.page_size
    assert np.array_equal(plan.splits, -(-kv_lens // aligned))
    # The first `cut` requests alone get exactly the same pieces.
    head = kv_lens[:cut]
    sub = policy.plan(head, shape, device)
    keep = plan.work_request < len(head)
    assert np.array_equal(
        np.sort(plan.work_kv_end[keep] + plan.work_request[keep] * (1 << 21)),
        np.sort(sub.work_kv_end + sub.work_request * (1 << 21)),
    )


@PROPERTY_SETTINGS
@given(kv_lens=batches, shape=shapes, device=devices, schedule=st.sampled_from(SCHEDULES))
def test_no_split(kv_lens, shape, device, schedule):
    plan = policies.get("no-split", schedule=schedule).plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    assert (plan.splits == 1).all()


@PROPERTY_SETTINGS
@given(kv_lens=batches, shape=shapes, device=devices, params=split_params)
def test_parametric(kv_lens, shape, device, params):
    plan = policies.ParametricPolicy(params).plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    ctas = min(params.ctas_per_sm, device.max_ctas_per_sm)
    slots = device.sm_count * ctas
    budget = max(params.max_waves * slots, len(kv_lens) * shape.num_kv_heads)
    assert plan.ctas_per_sm == ctas and plan.schedule == params.schedule
    assert (plan.splits <= params.max_splits).all()
    assert (plan.splits[kv_lens <= params.min_tokens_per_cta] == 1).all()
    assert plan.num_tasks <= budget
    if plan.is_persistent:
        assert plan.grid_size == min(slots, plan.num_tasks)
    # The chunk is the smallest that fits: one page less would break the budget (or the minimum).
    chunk = plan.notes["chunk_tokens"]
    smaller = chunk - shape.page_size
    if smaller >= max(params.min_tokens_per_cta, shape.page_size):
        wanted = np.minimum(-(-kv_lens // smaller), params.max_splits)
        assert shape.num_kv_heads * int(wanted.sum()) > budget


@st.composite
def bucket_tables(draw):
    edges = sorted(draw(st.sets(st.integers(1, MAX_BATCH), min_size=2, max_size=8)))
    gaps = draw(st.lists(st.booleans(), min_size=len(edges) // 2, max_size=len(edges) // 2))
    table = []
    for i in range(0, len(edges) - 1, 2):
        lo, hi = edges[i], edges[i + 1]
        if gaps[i // 2] and hi - lo > 1:
            hi -= 1
        table.append((lo, hi, draw(split_params)))
    return table


@PROPERTY_SETTINGS
@given(kv_lens=batches, shape=shapes, device=devices, table=bucket_tables())
def test_tuned(kv_lens, shape, device, table):
    tuned = policies.get("tuned", buckets=table)
    plan = tuned.plan(kv_lens, shape, device)
    check_common(plan, kv_lens, shape)
    index = tuned.select(len(kv_lens))
    lo, hi, params = table[index]
    distance = max(lo - len(kv_lens), 0, len(kv_lens) - hi)
    assert all(max(b[0] - len(kv_lens), 0, len(kv_lens) - b[1]) >= distance for b in table)
    want = policies.ParametricPolicy(params).plan(kv_lens, shape, device)
    assert np.array_equal(plan.work_kv_start, want.work_kv_start)
    assert np.array_equal(plan.work_request, want.work_request)

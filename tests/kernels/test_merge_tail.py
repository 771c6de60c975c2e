"""kernels/merge_tail.py under the interpreter: the job tables (chunk results stored after stage
1's partial rows), decodes with merge="tail" against float64 across chunk boundaries and levels
for every schedule, no merge launch, a request's bits independent of the rest of the batch, the
tickets back at zero and a replay bit for bit."""

import pytest
import torch

from kvtune.kernels.decode import prepare_decode, run_decode
from kvtune.kernels.merge_chunked import CHUNK_SPLITS
from kvtune.kernels.merge_tail import tail_jobs
from kvtune.kernels.plan import SCHEDULES, AttentionShape, build_plan
from kvtune.kernels.reference import decode_reference, relative_error
from tests.kernels.kernel_cases import make_inputs

SHAPE = AttentionShape(num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=4)
CHUNK = 4  # tokens per split (one page): a request of n tokens has ceil(n / 4) splits


def test_job_tables_store_chunk_results_after_the_partial_rows():
    c = CHUNK_SPLITS
    num_rows = 3 + (c + 1)
    t = tail_jobs([4, 7], [0, 3], [3, c + 1], num_rows)
    # Request 4: one job over rows 0-2 into its output. Request 7: chunks of rows 3.. and 3 + c,
    # into rows num_rows and num_rows + 1, then one job over those two rows into its output.
    assert t["row_job"].tolist() == [0] * 3 + [1] * c + [2]
    assert t["dest"].tolist() == [4, -num_rows - 1, -(num_rows + 1) - 1, 7]
    assert t["row0"].tolist() == [0, 3, 3 + c, num_rows]
    assert t["count"].tolist() == [3, c, 1, 2]
    assert t["parent"].tolist() == [-1, 3, 3, -1]
    assert t["scratch_rows"] == 2
    empty = tail_jobs([], [], [], 0)
    assert empty["row_job"].size == 0 and empty["scratch_rows"] == 0


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_tail_merge_matches_float64_on_every_schedule(schedule):
    # 19 and 20 splits (two levels), 2 and 3 splits (one job), one unsplit request.
    kv = [19 * CHUNK, 2 * CHUNK - 1, 3 * CHUNK, 20 * CHUNK, 1]
    cache, q = make_inputs(kv, SHAPE, torch.float32, seed=3)
    plan = build_plan(kv, CHUNK, num_kv_heads=2, page_size=4, schedule=schedule,
                      **({"grid_size": 5} if schedule.startswith("persistent") else {}))
    assert plan.splits.tolist() == [19, 2, 3, 20, 1]
    launch = prepare_decode(plan, cache, merge="tail")
    assert launch.num_launches == 1 and launch.chunked_merge is None
    out = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=out)
    assert relative_error(out, decode_reference(q, cache)) <= 1e-5
    assert not launch.tail_merge.tickets.any()
    again = torch.full_like(q, float("nan"))
    run_decode(launch, q, cache, out=again)
    assert torch.equal(out, again)


def test_three_levels_and_batch_invariance():
    c = CHUNK_SPLITS
    kv = [CHUNK * (c * c + 3), 5 * CHUNK]  # 259 splits: 17 chunks, 2 chunks of those, 1 job
    cache, q = make_inputs(kv, SHAPE, torch.bfloat16, seed=5)
    plan = build_plan(kv, CHUNK, num_kv_heads=2, page_size=4)
    assert plan.splits.tolist() == [c * c + 3, 5]
    launch = prepare_decode(plan, cache, merge="tail")
    assert launch.tail_merge.scratch_rows == 17 + 2
    out = run_decode(launch, q, cache)
    assert relative_error(out, decode_reference(q, cache)) <= 2e-2
    # Request 1 alone, its pages copied: the same bits.
    cache1, _ = make_inputs(kv[1:], SHAPE, torch.bfloat16, seed=5)
    cache1.k_pages[cache1.request_pages(0)] = cache.k_pages[cache.request_pages(1)]
    cache1.v_pages[cache1.request_pages(0)] = cache.v_pages[cache.request_pages(1)]
    plan1 = build_plan(kv[1:], CHUNK, num_kv_heads=2, page_size=4)
    alone = run_decode(prepare_decode(plan1, cache1, merge="tail"), q[1:].clone(), cache1)
    assert torch.equal(alone[0], out[1])


def test_no_split_means_no_tail_merge():
    kv = [5, 3]
    cache, _ = make_inputs(kv, SHAPE, torch.float32, seed=0)
    launch = prepare_decode(build_plan(kv, 64, num_kv_heads=2, page_size=4), cache,
                            merge="tail")
    assert launch.tail_merge is None and launch.num_launches == 1

"""FP8 KV caches count one byte per K/V element everywhere bytes are counted (the batch floor,
the simulator's task and merge bytes, hence its times and every policy judged by them); the
queries and outputs stay in the query type."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kvtune.harness.device import device_model
from kvtune.harness.sim_model import merge_bytes, simulate, task_bytes
from kvtune.kernels import policies
from kvtune.kernels.plan import AttentionShape, kv_element_bytes
from kvtune.workloads.batch import DecodeBatch

BF16 = AttentionShape()  # 32 q / 8 KV heads, head_dim 128, page 16
FP8 = replace(BF16, kv_dtype="fp8_e4m3")


def test_element_bytes_and_batch_floor():
    assert (kv_element_bytes(BF16), kv_element_bytes(FP8)) == (2, 1)
    assert kv_element_bytes(AttentionShape(dtype="fp16")) == 2
    kv = [1000, 24]
    qo = 2 * 2 * 32 * 128 * 2  # q read + out written, bf16, for both caches
    assert DecodeBatch(kv, BF16).min_bytes == 1024 * 8 * 2 * 128 * 2 + qo
    assert DecodeBatch(kv, FP8).min_bytes == 1024 * 8 * 2 * 128 * 1 + qo


def test_simulator_counts_one_byte_per_fp8_element():
    h200 = device_model("h200")
    plan = policies.get("fixed-split", chunk_tokens=2048).plan(np.array([5000, 100]), BF16, h200)
    # First task: 2048 tokens of one KV head (K + V), 4 bf16 query rows, float32 partial + LSE.
    q_and_partial = 4 * 128 * 2 + 4 * (128 * 4 + 4)
    assert task_bytes(plan, BF16)[0] == 2048 * 2 * 128 * 2 + q_and_partial
    assert task_bytes(plan, FP8)[0] == 2048 * 2 * 128 * 1 + q_and_partial
    assert merge_bytes(plan, FP8) == merge_bytes(plan, BF16)  # float32 partials, bf16 output
    assert simulate(plan, FP8, h200).time_us < simulate(plan, BF16, h200).time_us

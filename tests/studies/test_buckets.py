"""Batch-size buckets: defaults, parsing, extension past 512, empty buckets dropped."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvtune.studies.buckets import BatchBucket, assign_cases, default_buckets, parse_buckets
from kvtune.workloads.suites import get_suite


def cases(*sizes):
    return [SimpleNamespace(case_id=f"c{i}", batch_size=b) for i, b in enumerate(sizes)]


def test_threshold_suite_fills_the_four_default_buckets():
    assigned = assign_cases(get_suite("threshold").cases)
    assert [b.name for b, _ in assigned] == ["1-8", "9-32", "33-128", "129-512"]
    sizes = {b.name: sorted({c.batch_size for c in held}) for b, held in assigned}
    assert sizes["1-8"] == [1, 2, 4, 8]
    assert sizes["9-32"] == [16, 32]
    assert sizes["33-128"] == [33, 34, 35, 48, 64, 128]
    assert sizes["129-512"] == [256, 512]


def test_empty_buckets_are_dropped_and_order_is_kept():
    assigned = assign_cases(cases(16, 4, 20))
    assert [(b.name, [c.case_id for c in held]) for b, held in assigned] == [
        ("1-8", ["c1"]), ("9-32", ["c0", "c2"])]


def test_defaults_extend_past_512_for_larger_batches():
    assert default_buckets(512)[-1] == BatchBucket(129, 512)
    assert [b.name for b in default_buckets(3000)][4:] == ["513-2048", "2049-8192"]
    assigned = assign_cases(cases(1000))
    assert assigned[0][0].name == "513-2048"


def test_given_buckets_are_parsed_sorted_and_must_cover_the_suite():
    assert [b.name for b in parse_buckets("9-32, 1-8")] == ["1-8", "9-32"]
    with pytest.raises(ValueError, match="no bucket"):
        assign_cases(cases(4, 64), parse_buckets("1-8"))
    assert [b.name for b, _ in assign_cases(cases(4, 64), parse_buckets("1-16,17-100"))] == ["1-16", "17-100"]


@pytest.mark.parametrize("text", ["1-8,8-32", "8-1", "a-b", "1..8", "0-4", "", "1-8,"])
def test_bad_buckets_name_the_field(text):
    with pytest.raises(ValueError, match="^buckets: "):
        parse_buckets(text)


def test_size_function_overrides_the_nominal_batch():
    assigned = assign_cases(cases(64), size=lambda c: 5)
    assert assigned[0][0].name == "1-8"

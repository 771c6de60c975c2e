"""kvtune.kernels.tuned_planner: the vendorable numpy planner reproduces ParametricPolicy (and, under the
fixed-chunk rule, FixedSplitPolicy) exactly, reads files defensively without jsonschema, and
imports with torch and triton blocked."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kvtune.kernels import tuned_planner
from kvtune.harness.device import device_model
from kvtune.kernels.baselines import FixedSplitPolicy
from kvtune.kernels.parametric import ParametricPolicy
from kvtune.kernels.plan import SCHEDULES, AttentionShape, DeviceSpec, SplitParams

PLANNER_FILE = Path(tuned_planner.__file__)


def document(buckets, shape: AttentionShape, max_ctas_per_sm=8, rule=None) -> dict:
    """The planning part of a heuristic file (what tuned_planner reads); without `rule` it is a
    schema 1.0 file, which is planned with the parametric rule."""
    doc = {
        "schema_version": "1.0" if rule is None else "1.1",
        "shape": shape.to_dict(),
        "device": {"name": "test", "sm_count": 132, "max_ctas_per_sm": max_ctas_per_sm},
        "buckets": [{"min_batch": lo, "max_batch": hi, "params": p.to_dict()} for lo, hi, p in buckets],
    }
    if rule is not None:
        doc["rule"] = rule
    return doc


def random_params(rng) -> SplitParams:
    return SplitParams(
        min_tokens_per_cta=int(rng.choice([1, 16, 100, 128, 512, 2048, 4096, 16384, 65536])),
        max_waves=int(rng.integers(1, 65)),
        max_splits=int(rng.choice([1, 2, 3, 7, 8, 32, 128, 1024])),
        ctas_per_sm=int(rng.choice([1, 2, 3, 4, 8, 16])),
        schedule=str(rng.choice(SCHEDULES)),
    )


def test_plan_splits_equals_parametric_policy_on_1000_random_cases():
    rng = np.random.default_rng(11)
    shapes = [AttentionShape(32, 8, 128, 16), AttentionShape(8, 1, 128, 1), AttentionShape(28, 4, 64, 128),
              AttentionShape(64, 8, 256, 32, "fp16")]
    devices = [device_model("h100"), device_model("a100"), device_model("b200"),
               DeviceSpec("small", sm_count=7, l2_bytes=0, hbm_bytes_per_s=1e11, max_ctas_per_sm=3)]
    for case in range(1000):
        shape, device = shapes[case % 4], devices[(case // 4) % 4]
        params = random_params(rng)
        batch = int(rng.integers(1, 300)) if case % 10 else int(rng.integers(300, 3000))
        kv_lens = rng.integers(1, int(rng.choice([300, 5000, 200_000, 1 << 20])) + 1, batch)
        doc = document([(1, 65536, params)], shape, device.max_ctas_per_sm)
        pieces = tuned_planner.plan_pieces(doc, kv_lens, device.sm_count)
        plan = ParametricPolicy(params).plan(kv_lens, shape, device)
        assert np.array_equal(pieces.splits, plan.splits), (case, params)
        first = plan.work_split == 0  # a request's first piece has the full piece length
        lengths = np.zeros(batch, dtype=np.int64)
        lengths[plan.work_request[first]] = plan.item_tokens()[first]
        multi = plan.splits > 1
        assert np.array_equal(pieces.piece_tokens[multi], lengths[multi]), case
        assert pieces.chunk_tokens == plan.notes["chunk_tokens"]


def test_fixed_chunk_plan_equals_fixed_split_policy_on_1000_random_cases():
    rng = np.random.default_rng(12)
    shapes = [AttentionShape(32, 8, 128, 16), AttentionShape(8, 1, 128, 1), AttentionShape(28, 4, 64, 128),
              AttentionShape(64, 8, 256, 32, "fp16")]
    device = device_model("h100")
    for case in range(1000):
        shape = shapes[case % 4]
        params = random_params(rng)  # only min_tokens_per_cta may matter
        batch = int(rng.integers(1, 300))
        chunk = -(-params.min_tokens_per_cta // shape.page_size) * shape.page_size
        # At most 64 pieces a request, so that the reference plans stay small.
        longest = min(int(rng.choice([300, 5000, 200_000, 1 << 20])), 64 * chunk)
        kv_lens = rng.integers(1, longest + 1, batch)
        doc = document([(1, 65536, params)], shape, rule="fixed-chunk")
        pieces = tuned_planner.plan_pieces(doc, kv_lens, int(rng.integers(1, 1025)))
        plan = FixedSplitPolicy(chunk_tokens=params.min_tokens_per_cta).plan(kv_lens, shape, device)
        assert np.array_equal(pieces.splits, plan.splits), (case, params)
        first = plan.work_split == 0
        lengths = np.zeros(batch, dtype=np.int64)
        lengths[plan.work_request[first]] = plan.item_tokens()[first]
        multi = plan.splits > 1
        assert np.array_equal(pieces.piece_tokens[multi], lengths[multi]), case
        assert pieces.chunk_tokens == plan.notes["chunk_tokens"] and pieces.rule == "fixed-chunk"
        # A whole request is one piece of its own pages (as under the parametric rule).
        pages = -(-kv_lens[~multi] // shape.page_size)
        assert np.array_equal(pieces.piece_tokens[~multi], pages * shape.page_size)


def test_a_file_without_rule_is_parametric_and_a_bad_rule_is_refused():
    shape = AttentionShape()
    params = SplitParams(256, 1, 4, 1)
    kv = [100_000] * 4 + [3000] * 12
    old = document([(1, 64, params)], shape)
    assert "rule" not in old
    expected = ParametricPolicy(params).plan(kv, shape, device_model("h100")).splits
    assert np.array_equal(tuned_planner.plan_splits(old, kv, 132), expected)
    assert tuned_planner.plan_pieces(old, kv, 132).rule == "parametric"
    fixed = tuned_planner.plan_splits(document([(1, 64, params)], shape, rule="fixed-chunk"), kv, 132)
    assert fixed.tolist() == [391] * 4 + [12] * 12 and not np.array_equal(fixed, expected)
    for bad in ("Fixed-Chunk", 1, None):
        doc = document([(1, 64, params)], shape, rule="parametric")
        doc["rule"] = bad
        with pytest.raises(ValueError, match="^rule: .* not allowed; allowed: parametric, fixed-chunk"):
            tuned_planner.plan_splits(doc, kv, 132)


def test_buckets_are_selected_by_batch_size_and_the_last_serves_larger_batches():
    shape = AttentionShape()
    doc = document([(1, 4, SplitParams(128, 8, 64)), (5, 16, SplitParams(65536, 1, 1)),
                    (17, 64, SplitParams(1024, 2, 4))], shape)
    assert [tuned_planner.select_bucket(doc, b) for b in (1, 4, 5, 16, 17, 64, 65, 65536)] == [0, 0, 1, 1, 2, 2, 2, 2]
    kv = [131072, 2048, 2048]
    assert tuned_planner.plan_splits(doc, kv, 132).tolist() == [64, 16, 16]
    assert tuned_planner.plan_splits(doc, kv * 2, 132).tolist() == [1] * 6
    assert tuned_planner.plan_pieces(doc, [50000] * 100, 132).bucket_index == 2


def test_max_ctas_per_sm_defaults_to_the_files_device_and_can_be_overridden():
    shape = AttentionShape()
    params = SplitParams(256, 1, 1024, 8)
    kv = [100_000] * 4
    doc = document([(1, 8, params)], shape, max_ctas_per_sm=2)
    expected = {occ: ParametricPolicy(params).plan(kv, shape, DeviceSpec("d", 132, 0, 1e12, max_ctas_per_sm=occ)).splits
                for occ in (2, 8)}
    # 132 SMs x 2 CTAs = 264 tasks over 4 requests x 8 heads: 8 pieces each; 8 CTAs per SM: 33.
    assert expected[2].tolist() == [8] * 4 and expected[8].tolist() == [33] * 4
    assert np.array_equal(tuned_planner.plan_splits(doc, kv, 132), expected[2])
    assert np.array_equal(tuned_planner.plan_splits(doc, kv, 132, max_ctas_per_sm=8), expected[8])


def test_a_path_is_read_and_checked(tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps(document([(1, 8, SplitParams())], AttentionShape())))
    assert tuned_planner.plan_splits(path, [131072], 132).tolist() == [32]
    assert tuned_planner.plan_splits(str(path), [131072], 132).tolist() == [32]


def test_engine_chunk_is_flashinfers_own_decode_plan_on_1000_random_cases():
    from kvtune.kernels.baselines_flashinfer import FlashInferTensorCorePolicy

    rng = np.random.default_rng(13)
    shapes = [AttentionShape(32, 8, 128, 16), AttentionShape(8, 1, 128, 1),
              AttentionShape(28, 4, 64, 128), AttentionShape(64, 8, 256, 32, "fp16")]
    devices = [device_model("h100"), device_model("a100"),
               DeviceSpec("small", sm_count=7, l2_bytes=0, hbm_bytes_per_s=1e11, max_ctas_per_sm=3)]
    for case in range(1000):
        shape, device = shapes[case % 4], devices[(case // 4) % 3]
        batch = int(rng.integers(1, 300))
        kv = rng.integers(1, int(rng.choice([300, 5000, 200_000])) + 1, batch)
        plan = FlashInferTensorCorePolicy().plan(kv, shape, device)
        pages = tuned_planner.engine_chunk_pages(kv, shape.num_kv_heads, shape.page_size,
                                                 device.sm_count)
        want = -(-(-(-kv // shape.page_size)) // pages)  # ceil(pages_b / c)
        assert np.array_equal(plan.splits, want), case
        if plan.notes["split_kv"]:
            assert pages == plan.notes["chunk_pages"], case


def _makespan_doc(shape, piece_cost=384, min_chunk=512, max_chunk=16384, max_splits=1024,
                  ctas_per_sm=2, max_ctas_per_sm=2):
    doc = document([(1, 65536, SplitParams(min_tokens_per_cta=min_chunk, max_splits=max_splits,
                                            ctas_per_sm=ctas_per_sm, schedule="static"))],
                   shape, max_ctas_per_sm=max_ctas_per_sm, rule="parametric")
    doc["schema_version"] = "1.4"
    doc["buckets"][0].update(family="makespan", max_chunk_tokens=max_chunk,
                             piece_cost_tokens=piece_cost)
    return doc


def test_makespan_picks_the_cheapest_candidate_and_keeps_the_engines_chunk_on_near_ties():
    from kvtune.kernels.parametric import MakespanChunkPolicy

    shape, sms = AttentionShape(), 132
    device = DeviceSpec("h", sm_count=sms, l2_bytes=0, hbm_bytes_per_s=1e12, max_ctas_per_sm=2)
    rng = np.random.default_rng(5)
    cost = tuned_planner.modelled_makespan_tokens
    for case in range(300):
        batch = int(rng.choice([4, 8, 16, 32, 64, 256]))
        kv = rng.integers(1, int(rng.choice([4000, 60_000, 200_000])) + 1, batch)
        piece = int(rng.choice([0, 128, 384, 1024]))
        doc = _makespan_doc(shape, piece)
        pieces = tuned_planner.plan_pieces(doc, kv, sms)
        c = pieces.chunk_tokens // 16
        engine = tuned_planner.engine_chunk_pages(kv, 8, 16, sms)
        grid = [min(max(32 << k, 1), -(-int(kv.max()) // 16) or 1) for k in range(6)]
        costs = {g: cost(kv, 8, 16, g, 2 * sms, piece) for g in grid}
        best = min(costs.values())
        if c == engine:  # the engine's chunk stays unless a grid chunk is > 6% cheaper
            assert tuned_planner.ENGINE_PREFERENCE * best >= cost(kv, 8, 16, engine, 2 * sms, piece)
        else:
            assert c in costs and costs[c] == best, case
            assert tuned_planner.ENGINE_PREFERENCE * best < cost(kv, 8, 16, engine, 2 * sms, piece)
        policy = MakespanChunkPolicy(SplitParams(min_tokens_per_cta=512, max_splits=1024,
                                                 ctas_per_sm=2, schedule="static"), 16384, piece)
        plan = policy.plan(kv, shape, device)
        assert np.array_equal(plan.splits, pieces.splits) and pieces.family == "makespan"
        assert tuned_planner.fixed_split_size(doc, kv, sms) == c


def test_makespan_counting_three_slots_plans_alike_in_the_vendored_planner_and_the_policy():
    # The studies' makespan candidates count 2 or 3 slots per SM (studies/finalists.py); a file
    # that ships 3 plans the same splits in the vendored planner as the policy measured.
    from kvtune.kernels.parametric import MakespanChunkPolicy

    shape, sms = AttentionShape(), 132
    device = DeviceSpec("h", sm_count=sms, l2_bytes=0, hbm_bytes_per_s=1e12, max_ctas_per_sm=8)
    doc = _makespan_doc(shape, 384, ctas_per_sm=3, max_ctas_per_sm=8)
    policy = MakespanChunkPolicy(SplitParams(min_tokens_per_cta=512, max_splits=1024,
                                             ctas_per_sm=3, schedule="static"), 16384, 384)
    rng = np.random.default_rng(7)
    differs = 0
    for case in range(200):
        batch = int(rng.choice([8, 32, 48, 64, 256]))
        kv = rng.integers(1, int(rng.choice([4000, 60_000, 200_000])) + 1, batch)
        pieces = tuned_planner.plan_pieces(doc, kv, sms)
        assert np.array_equal(policy.plan(kv, shape, device).splits, pieces.splits), case
        two = tuned_planner.plan_pieces(_makespan_doc(shape, 384), kv, sms)
        differs += not np.array_equal(two.splits, pieces.splits)
    assert differs > 0  # three slots per SM is another rule, not a relabelling
    # 48 requests of 3,900 tokens: whole under either count (384 tasks; a uniform batch keeps
    # the engine's cut, UNIFORM_SPREAD), where two slots per SM alone would cut them in two.
    kv = np.full(48, 3900)
    assert int(tuned_planner.plan_pieces(doc, kv, sms).splits.max()) == 1
    assert int(tuned_planner.plan_pieces(_makespan_doc(shape, 384), kv, sms).splits.max()) == 1


def test_makespan_keeps_the_engines_cut_of_a_uniform_batch():
    """Requests within UNIFORM_SPREAD of each other in length are cut as FlashInfer's planner
    cuts them (its chunk, engine_chunk_pages), whatever the model of the other candidates says;
    the same batch with one request past the spread is weighed again (here: cut otherwise).
    kvtune's MakespanChunkPolicy plans alike."""
    from kvtune.kernels.parametric import MakespanChunkPolicy

    shape, sms = AttentionShape(), 132
    device = DeviceSpec("h", sm_count=sms, l2_bytes=0, hbm_bytes_per_s=1e12, max_ctas_per_sm=8)
    doc = _makespan_doc(shape, 384)
    policy = MakespanChunkPolicy(SplitParams(min_tokens_per_cta=512, max_splits=1024,
                                             ctas_per_sm=2, schedule="static"), 16384, 384)
    spread = tuned_planner.UNIFORM_SPREAD
    for kv in (np.full(48, 4096), np.full(40, 4915), np.full(8, 32768), np.full(128, 6000),
               np.array([4000] * 30 + [int(4000 * spread)] * 10)):
        engine = tuned_planner.engine_chunk_pages(kv, 8, 16, sms)
        assert tuned_planner.plan_pieces(doc, kv, sms).chunk_tokens == engine * 16
        want = -(-(-(-kv // 16)) // engine)
        assert np.array_equal(policy.plan(kv, shape, device).splits, want)
    kv = np.array([3900] * 47 + [int(3900 * spread) + 400])
    assert tuned_planner.plan_pieces(doc, kv, sms).chunk_tokens != \
        tuned_planner.engine_chunk_pages(kv, 8, 16, sms) * 16


def test_the_modelled_makespan_simulates_few_pieces_and_bounds_many():
    rng = np.random.default_rng(9)
    slots = 264
    for _ in range(40):
        kv = rng.integers(1, 120_000, int(rng.integers(1, 200)))
        for chunk_pages, piece in ((32, 0), (64, 384), (1024, 128)):
            exact = tuned_planner.in_order_makespan_tokens(kv, 8, 16, chunk_pages, slots, piece)
            model = tuned_planner.modelled_makespan_tokens(kv, 8, 16, chunk_pages, slots, piece)
            pieces = 8 * int((-(-(-(-kv // 16)) // chunk_pages)).sum())
            if pieces <= tuned_planner.MAX_SIMULATED_WAVES * slots:
                assert model == exact
            else:  # Graham's bound of list scheduling: never below what the launch takes
                assert exact <= model <= exact + chunk_pages * 16 + piece


def test_makespan_splits_a_small_skewed_batch_the_engine_leaves_in_one_long_wave():
    # 16 requests, one of 190k tokens: FlashInfer's chunk fits 33 pieces per head into one wave
    # of 2 x 132 slots (a ~6k-token piece per slot); smaller pieces of the long request spread
    # over the other slots and end sooner.
    kv = np.array([190_000] + [2000] * 15)
    engine = tuned_planner.engine_chunk_pages(kv, 8, 16, 132) * 16
    got = tuned_planner.plan_pieces(_makespan_doc(AttentionShape()), kv, 132).chunk_tokens
    assert got < engine
    # Equal short requests: every candidate leaves them whole, as the engine does.
    even = np.full(64, 4096)
    pieces = tuned_planner.plan_pieces(_makespan_doc(AttentionShape()), even, 132)
    assert (pieces.splits == 1).all()
    # max_splits raises the chunk: never more than 4 pieces of a request.
    capped = tuned_planner.plan_pieces(_makespan_doc(AttentionShape(), max_splits=4), kv, 132)
    assert capped.splits.max() <= 4


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["buckets"][0].update(min_batch=2), "buckets[0].min_batch"),
    (lambda d: d["buckets"].append({"min_batch": 10, "max_batch": 20, "params": SplitParams().to_dict()}),
     "buckets[1].min_batch"),
    (lambda d: d["buckets"].append({"min_batch": 8, "max_batch": 20, "params": SplitParams().to_dict()}),
     "buckets[1].min_batch"),
    (lambda d: d["buckets"][0]["params"].update(max_waves=2.0), "buckets[0].params.max_waves"),
    (lambda d: d["buckets"][0]["params"].update(max_splits=True), "buckets[0].params.max_splits"),
    (lambda d: d["buckets"][0]["params"].update(ctas_per_sm=0), "buckets[0].params.ctas_per_sm"),
    (lambda d: d["buckets"][0]["params"].pop("schedule"), "buckets[0].params.schedule"),
    (lambda d: d["buckets"][0]["params"].update(extra=1), "buckets[0].params.extra"),
    (lambda d: d.update(schema_version="2.1"), "schema_version"),
    (lambda d: d.update(schema_version=1.0), "schema_version"),
    (lambda d: d["shape"].update(page_size=24), "shape.page_size"),
    (lambda d: d["shape"].pop("num_kv_heads"), "shape.num_kv_heads"),
    (lambda d: d["device"].update(max_ctas_per_sm=-1), "device.max_ctas_per_sm"),
    (lambda d: d.update(buckets=[]), "buckets"),
    (lambda d: d["buckets"][0].update(family="makespan", piece_cost_tokens=-1),
     "buckets[0].piece_cost_tokens"),
    (lambda d: d["buckets"][0].update(family="makespan", piece_cost_tokens=1.5),
     "buckets[0].piece_cost_tokens"),
])
def test_check_document_refuses_what_planning_cannot_trust(mutate, field):
    doc = document([(1, 8, SplitParams())], AttentionShape())
    mutate(doc)
    with pytest.raises(ValueError) as info:
        tuned_planner.plan_splits(doc, [1000], 132)
    assert str(info.value).startswith(field) and "\n" not in str(info.value)


@pytest.mark.parametrize("kv_lens, num_sms, field", [
    ([], 132, "kv_lens"), ([0, 5], 132, "kv_len"), ([1.5], 132, "kv_lens"), ([1 << 21], 132, "kv_len"),
    ([10], 0, "num_sms"), ([10], 132.0, "num_sms"),
])
def test_bad_batches_are_refused(kv_lens, num_sms, field):
    doc = document([(1, 8, SplitParams())], AttentionShape())
    with pytest.raises(ValueError, match=field):
        tuned_planner.plan_splits(doc, kv_lens, num_sms)


def test_reading_refuses_nan_nesting_duplicates_and_size(tmp_path):
    base = json.dumps(document([(1, 8, SplitParams())], AttentionShape()))
    cases = {
        "nan": (base.replace('"max_waves": 1', '"max_waves": NaN'), "buckets[0].params.max_waves: NaN"),
        "nested": ('{"a": ' + "[" * 40 + "]" * 40 + "}", "nested deeper than 32"),
        "strings do not count": ('{"a": "' + "[" * 40 + '"}', None),
        "duplicate": (base.replace('"shape":', '"shape": 1, "shape":'), "'shape' appears twice"),
        "big": ("[" + " " * tuned_planner.MAX_FILE_BYTES + "]", "allowed: at most"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        if message is None:
            assert tuned_planner.read_document(path) == {"a": "[" * 40}
            continue
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            tuned_planner.read_document(path)
    with pytest.raises(ValueError, match="cannot read"):
        tuned_planner.read_document(tmp_path / "missing.json")


BLOCKED_IMPORT_SCRIPT = textwrap.dedent("""
    import importlib.abc, json, sys

    BLOCKED = ("torch", "triton", "kernels", "studies", "workloads", "optuna", "pandas", "jsonschema",
               "scipy")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked import of {name}")
            return None

    sys.meta_path.insert(0, Block())
    for name in BLOCKED:
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"the blocker let {name} through")
    sys.path.insert(0, sys.argv[1])
    import {module} as planner
    doc = json.loads(sys.argv[2])
    kv = json.loads(sys.argv[3])
    print(json.dumps([planner.plan_splits(doc, k, 132).tolist() for k in kv]))
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not leaked, leaked
""")


@pytest.mark.parametrize("rule", ["parametric", "fixed-chunk"])
@pytest.mark.parametrize("how", ["package", "vendored copy"])
def test_plan_splits_runs_where_torch_and_triton_cannot_be_imported(tmp_path, how, rule):
    doc = document([(1, 8, SplitParams(2048, 4, 32)), (9, 512, SplitParams(4096, 1, 8, 1))], AttentionShape(),
                   rule=rule)
    rng = np.random.default_rng(3)
    batches = [rng.integers(1, 200_000, int(b)).tolist() for b in (1, 3, 8, 9, 64, 600)]
    if how == "package":
        root, module = str(PLANNER_FILE.parents[1]), "kvtune.kernels.tuned_planner"
    else:
        shutil.copy(PLANNER_FILE, tmp_path / "tuned_planner.py")
        root, module = str(tmp_path), "tuned_planner"
    script = BLOCKED_IMPORT_SCRIPT.replace("{module}", module)
    done = subprocess.run([sys.executable, "-I", "-c", script, root, json.dumps(doc), json.dumps(batches)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    expected = [tuned_planner.plan_splits(doc, b, 132).tolist() for b in batches]
    assert json.loads(done.stdout) == expected
    shape, device = AttentionShape(), DeviceSpec("d", 132, 0, 1e12)
    params = [SplitParams(2048, 4, 32), SplitParams(4096, 1, 8, 1)]
    for b, splits in zip(batches, expected):
        p = params[len(b) > 8]
        policy = ParametricPolicy(p) if rule == "parametric" else FixedSplitPolicy(p.min_tokens_per_cta)
        assert policy.plan(b, shape, device).splits.tolist() == splits


def test_the_planner_imports_only_the_standard_library_and_numpy():
    import ast

    tree = ast.parse(PLANNER_FILE.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"numpy"}

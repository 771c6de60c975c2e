"""kernels/fingerprint.decode_kernel_sha256: code and table values change it; comments,
docstrings and formatting do not; a missing or broken module gives None."""

import shutil

import ast

from kvtune.kernels.fingerprint import (DECODE_KERNEL_MODULES, HASH_CHARS, HASH_FORMAT,
                                        KERNELS_DIR, _canonical, decode_kernel_sha256)


def _copy(tmp_path):
    for name in DECODE_KERNEL_MODULES:
        shutil.copy(KERNELS_DIR / name, tmp_path / name)
    return tmp_path


def test_the_hash_follows_code_not_comments(tmp_path):
    here = decode_kernel_sha256()
    assert here is not None and here.startswith(HASH_FORMAT)
    assert len(here) == len(HASH_FORMAT) + HASH_CHARS
    int(here[len(HASH_FORMAT):], 16)  # hex digits
    d = _copy(tmp_path)
    assert decode_kernel_sha256(d) == here
    cfg = d / "decode_config.py"
    text = cfg.read_text()
    # A comment, a docstring and blank lines: the same kernel.
    edited = text.replace('"""', '"""Reworded. ', 1)
    edited = edited.replace("\nLARGE_GROUP", "\n# note\n\nLARGE_GROUP", 1)
    assert edited != text
    cfg.write_text(edited)
    assert decode_kernel_sha256(d) == here
    # A table value: another kernel.
    assert "CAPPED_BACKFILL_MAX_ROUNDS = 1.1" in text
    cfg.write_text(text.replace("CAPPED_BACKFILL_MAX_ROUNDS = 1.1",
                                "CAPPED_BACKFILL_MAX_ROUNDS = 1.2"))
    changed = decode_kernel_sha256(d)
    assert changed is not None and changed != here


def test_a_missing_or_broken_module_gives_none(tmp_path):
    d = _copy(tmp_path)
    (d / "merge_chunked.py").write_text("def broken(:\n")
    assert decode_kernel_sha256(d) is None
    (d / "merge_chunked.py").unlink()
    assert decode_kernel_sha256(d) is None


def test_the_tree_text_leaves_out_empty_fields_so_python_releases_agree():
    # Pinned: Python 3.11 and 3.12 parse this alike, but 3.12's ast.dump adds type_params=[]
    # to the function; a release whose tree of it differs would change every recorded hash.
    tree = ast.parse("def f(x=1):\n    return x[0]")
    assert _canonical(tree) == (
        "(Module body=[(FunctionDef name='f' args=(arguments args=[(arg arg='x')] "
        "defaults=[(Constant value=1)]) body=[(Return value=(Subscript value=(Name id='x' "
        "ctx=(Load )) slice=(Constant value=0) ctx=(Load )))])])")
    fn = tree.body[0]
    fn.type_params = []  # what 3.12 adds: an empty field is left out
    fn._fields = (*fn._fields, "type_params")
    assert "type_params" not in _canonical(tree)

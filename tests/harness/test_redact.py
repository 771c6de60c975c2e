"""Credentials never leave: URLs with awkward passwords, free text, every file and stream a run writes."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from kvtune.harness.redact import redact_text, redact_tree, redact_url, url_secrets

# Passwords holding each character that breaks a naive pattern, as typed and percent-encoded.
PASSWORDS = ["Zq9/SlashPW55", "At@Sign@PW77", "Col:on:PW88", "Pct%25Lit%PW", "Hash#Frag#PW",
             "Ques?tion?PW", "Mix/@:%#?PW99"]


def _urls(password: str) -> list[str]:
    return [f"postgresql://u:{password}@db.example:5432/kv",
            f"postgresql+psycopg://u:{quote(password, safe='')}@db.example/kv?sslmode=require",
            f"mysql+pymysql://db.example/kv?user=u&password={quote(password, safe='')}"]


def _pieces(password: str) -> list[str]:
    """What must not appear anywhere: the password, its encoded form, and its distinctive parts."""
    enc = quote(password, safe="")
    return [password, enc] + [p for p in password.replace("%", "/").split("/") if len(p) >= 5]


@pytest.mark.parametrize("password", PASSWORDS)
def test_redact_url_hides_passwords_with_any_character(password):
    for url in _urls(password):
        shown = redact_url(url)
        assert "db.example" in shown and "***" in shown
        for piece in _pieces(password):
            assert piece not in shown, (url, shown)


@pytest.mark.parametrize("password", PASSWORDS)
def test_redact_text_hides_quoted_urls_and_their_passwords_elsewhere(password):
    url = _urls(password)[0]
    text = (f"connection to '{url}' failed: FATAL password authentication failed for "
            f"user u (password {password}); hint: --storage={url}")
    shown = redact_text(text)
    assert "connection to" in shown and "FATAL" in shown
    for piece in _pieces(password):
        assert piece not in shown, shown
    assert redact_tree({"a": [text, 3], "b": (url,)})["b"][0] == redact_url(url)


def test_plain_urls_and_text_are_left_alone():
    assert redact_url("sqlite:///results/optuna.db") == "sqlite:///results/optuna.db"
    assert redact_text("no url here: a@b:c") == "no url here: a@b:c"
    assert redact_url(None) is None and redact_text(5) == 5
    assert url_secrets("sqlite:///x.db") == []


def test_driver_errors_of_an_unreachable_server_hold_no_password():
    from kvtune.studies.storage import open_storage

    password = "Mix/@:%#?PW99"
    with pytest.raises(ValueError) as err:
        open_storage(f"postgresql://u:{password}@127.0.0.1:1/kv")
    for piece in _pieces(password):
        assert piece not in str(err.value)


def _all_text_written(root: Path) -> str:
    out = []
    for path in root.rglob("*"):
        if path.is_file():
            out.append(path.read_bytes().decode("latin-1"))
    return "\n".join(out)


def test_a_tune_and_its_export_never_write_or_print_the_storage_password(tmp_path, monkeypatch, capsys):
    """The storage URL's password (with / @ : % # ?) is nowhere: stdout, stderr, manifest,
    tuning.json, summary.json, measurements, the Optuna user attributes, the export."""
    import optuna

    from kvtune.cli import main
    from kvtune.studies import export, tune

    password = "Mix/@:%#?PW99"
    url = f"postgresql://u:{password}@db.example:5432/kv?sslpassword={quote(password, safe='')}"
    db = tmp_path / "store.db"
    real = optuna.storages.RDBStorage(f"sqlite:///{db}")
    # The run talks to a local SQLite file while it believes it uses the PostgreSQL URL.
    monkeypatch.setattr(tune, "open_storage", lambda *a, **k: real)
    monkeypatch.setattr(export, "open_storage", lambda *a, **k: (real, redact_url(url)))
    out = tmp_path / "results"
    argv = ["tune", "--study", "s", "--distribution", "skew80", "--batch-sizes", "4",
            "--param", "total_tokens=32768", "--backend", "simulator", "--device-model", "h200",
            "--trials", "3", "--sampler", "random", "--finalists", "2", "--finalist-rounds", "1",
            "--storage", url, "--out", str(out)]
    assert main(argv) == 0
    assert main(["export", "--study", "s", "--storage", url, "-o", str(tmp_path / "tuned.json")]) == 0
    captured = capsys.readouterr()
    written = _all_text_written(tmp_path)  # results, the export and the study database itself
    for piece in _pieces(password):
        for where, text in (("stdout", captured.out), ("stderr", captured.err), ("files", written)):
            assert piece not in text, (where, piece)
    assert "postgresql://***@db.example:5432/kv" in written

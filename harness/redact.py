"""Credentials out of anything kvtune writes or shows: storage URLs, commands, provenance, errors.

`redact_url(url)`: one URL with its user information (user name and password) replaced by `***`
and the values of secret query keys (password, token, key, ...) by `***`. The user information
is everything between `scheme://` and the LAST `@`, so passwords holding `/ @ : % # ?` (common in
base64-style passwords, and left unescaped by many users) are hidden whole; SQLAlchemy's
`make_url` parses the URL as the driver will, and the password it finds (raw and percent-decoded)
is also removed wherever it appears. A string that is not one URL goes to `redact_text`.

`redact_text(text)`: free text (an error message, a command line, a note) with every URL in it
redacted as above, and every password such a URL names removed from the rest of the text too.
Anything that is not a string comes back unchanged from both.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# A URL in free text runs to the next whitespace (or a closing quote that opened before it).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"`<>]+")
# ?password=... &token=... -> ?password=***
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&;](?:password|passwd|pwd|secret|token|api_key|apikey|key|sslkey|sslpassword|"
    r"access_token|auth|authorization)=)[^&;\s]*",
    re.IGNORECASE,
)


def url_secrets(url: str) -> list[str]:
    """The secrets a URL holds, as written and percent-decoded: its user information (split at
    the last `@` before the host), the password SQLAlchemy's make_url reads from it, and secret
    query values. Empty for a URL without any; never raises."""
    found: set[str] = set()
    match = _SCHEME.match(url)
    if match is None:
        return []
    rest = url[match.end():]
    if "@" in rest:
        userinfo = rest.rsplit("@", 1)[0]
        found.add(userinfo)
        if ":" in userinfo:
            found.add(userinfo.split(":", 1)[1])
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        if parsed.password:
            found.add(str(parsed.password))
        for key, value in parsed.query.items():
            if _SECRET_QUERY.match(f"?{key}="):
                found.update(value if isinstance(value, tuple) else (value,))
    except Exception:  # noqa: BLE001 - not a database URL: the split above still holds
        pass
    for m in _SECRET_QUERY.finditer(rest):
        found.add(m.group(0)[len(m.group("key")):])
    found |= {unquote(s) for s in found}
    # Very short pieces (a one-letter password) would mangle unrelated text; the URL itself is
    # still redacted where it appears.
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)


def _redact_one(url: str) -> str:
    match = _SCHEME.match(url)
    scheme, rest = url[:match.end()], url[match.end():]
    if "@" in rest:
        rest = f"{MASK}@" + rest.rsplit("@", 1)[1]
    return scheme + _SECRET_QUERY.sub(lambda m: f"{m.group('key')}{MASK}", rest)


def redact_url(text):
    """`text` (a URL, or any string holding URLs) with user names, passwords and secret query
    values replaced by ***: `postgresql://u:p@h/db?password=x` -> `postgresql://***@h/db?password=***`.
    Anything that is not a string comes back unchanged."""
    if not isinstance(text, str):
        return text
    stripped = text.strip()
    if _SCHEME.match(stripped) and not any(c.isspace() for c in stripped):
        return _redact_one(stripped)
    return redact_text(text)


def redact_text(text):
    """Free text with every URL in it redacted (redact_url), and the passwords those URLs hold
    removed wherever else they appear (drivers echo them in their errors). Non-strings unchanged."""
    if not isinstance(text, str) or "://" not in text:
        return text
    secrets: list[str] = []
    for m in _URL_IN_TEXT.finditer(text):
        secrets.extend(url_secrets(m.group(0)))
    text = _URL_IN_TEXT.sub(lambda m: _redact_one(m.group(0)), text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def redact_with(text, url: str | None):
    """`text` with the URL `url` and every secret it holds removed (for a driver's error, which
    may quote the URL's parts in any form); then redact_text for any other URL."""
    if not isinstance(text, str):
        return text
    if url:
        text = text.replace(url, redact_url(url))
        for secret in url_secrets(url):
            text = text.replace(secret, MASK)
    return redact_text(text)


def redact_tree(obj):
    """A copy of a JSON-like value (dicts, lists, tuples, strings) with every string redacted
    (redact_text); what a manifest, a result or a user attribute holds before it is written."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_tree(v) for v in obj)
    return obj


__all__ = ["MASK", "redact_text", "redact_tree", "redact_url", "redact_with", "url_secrets"]

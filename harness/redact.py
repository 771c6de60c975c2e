"""Credentials out of anything kvtune writes or shows: storage URLs, commands, provenance."""

from __future__ import annotations

import re

# scheme://user[:password]@host -> scheme://***@host
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s]+@")
# ?password=... &token=... -> ?password=***
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&;](?:password|passwd|pwd|secret|token|key|sslkey|sslpassword)=)[^&;\s]*",
    re.IGNORECASE,
)


def redact_url(text):
    """`text` (a URL, or any string holding URLs) with user names, passwords and secret query
    values replaced by ***: `postgresql://u:p@h/db?password=x` -> `postgresql://***@h/db?password=***`.
    Anything that is not a string comes back unchanged."""
    if not isinstance(text, str):
        return text
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)
    return _SECRET_QUERY.sub(lambda m: f"{m.group('key')}***", text)

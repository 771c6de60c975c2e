"""Spec strings users type: `KEY=VALUE` assignments and comma-separated integer lists.

They name policies (`fixed-split:chunk_tokens=4096`), distribution parameters (`--param`), the
GPU stopping rule (`min_time_ms=10,timeout_s=1`). They live in the lowest layer because every
layer above reads them from plain settings objects; only kvtune.cli knows the flags.
"""

from __future__ import annotations

# An integer typed by a user is never longer than this (Python's int() would take 4300 digits
# and the next layer would fail with a TypeError or an overflow far from the input).
MAX_INT_DIGITS = 19


def parse_value(text: str):
    """'16' -> 16, '0.5' -> 0.5, 'true' -> True, anything else stays a string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_assignments(items, field: str) -> dict:
    """['a=1', 'b=x'] -> {'a': 1, 'b': 'x'}; ValueError names `field` for a malformed item."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{field}: {item!r} is not KEY=VALUE")
        digits = value.strip().lstrip("+-")
        if digits.isdigit() and len(digits) > MAX_INT_DIGITS:
            raise ValueError(f"{field}: {key.strip()}={value.strip()[:24]}... is an integer of "
                             f"{len(digits)} digits; allowed: at most {MAX_INT_DIGITS} digits")
        out[key.strip()] = parse_value(value)
    return out


def parse_int_list(text: str, field: str, lo: int | None = None, hi: int | None = None) -> list[int]:
    """'1,8,64' -> [1, 8, 64]; ValueError names `field` (and the range lo..hi when given)."""
    allowed = f"integers in {lo}..{hi}" if lo is not None and hi is not None else "integers"
    values = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        digits = part.lstrip("+-")
        if not digits.isdigit() or len(digits) > MAX_INT_DIGITS:
            raise ValueError(f"{field}: {part[:40]!r} is not an integer; allowed: comma-separated "
                             f"{allowed}")
        value = int(part)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ValueError(f"{field}: {value} out of range; allowed: {allowed}")
        values.append(value)
    if not values:
        raise ValueError(f"{field}: empty; give at least one integer")
    return values


__all__ = ["MAX_INT_DIGITS", "parse_assignments", "parse_int_list", "parse_value"]


TUNED_PATH_PREFIX = "tuned:path="


def split_policy_specs(text: str, is_policy_name=None) -> list[str]:
    """'fa3,tuned:path=a,b.json,no-split' -> ['fa3', 'tuned:path=a,b.json', 'no-split'].

    Specs are comma-separated, except that the path of a `tuned:path=FILE` entry may itself hold
    ',' and ':': it runs up to the next ',' that starts another spec, i.e. is followed by
    `tuned:` or by a word that `is_policy_name` accepts (alone or before ':'). Empty items are
    dropped; spaces around a spec are removed (never inside a path)."""
    is_policy_name = is_policy_name or (lambda name: False)

    def starts_spec(rest: str) -> bool:
        head = rest.strip()
        return head.startswith("tuned:") or is_policy_name(head.split(":", 1)[0].strip())

    parts = str(text).split(",")
    out: list[str] = []
    i = 0
    while i < len(parts):
        item = parts[i]
        i += 1
        if item.strip().startswith(TUNED_PATH_PREFIX):
            while i < len(parts) and not starts_spec(parts[i]):
                item += "," + parts[i]
                i += 1
            out.append(item.strip())
        elif item.strip():
            out.append(item.strip())
    return out


def tuned_path(spec: str) -> str | None:
    """The FILE of a `tuned:path=FILE` spec, or None for any other spec."""
    spec = spec.strip()
    if not spec.startswith(TUNED_PATH_PREFIX):
        if spec.split(":", 1)[0].strip() == "tuned" and spec != "tuned":
            raise ValueError(f"policies: {spec!r} not allowed; allowed: tuned:path=FILE")
        return None
    path = spec[len(TUNED_PATH_PREFIX):]
    if not path:
        raise ValueError("policies: tuned:path= needs a file, e.g. tuned:path=tuned.json")
    return path

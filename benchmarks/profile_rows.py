"""One line per JSON row of `profile_decode.py --configs` (stdin), for a GPU call's log: case,
configuration (or FlashInfer before/after), tasks, matrix-timer and loop medians (us), fraction
of copy, same bits as the first configuration, status. Lines that are not JSON (errors) are
echoed cut to 200 characters.

    python3 benchmarks/profile_decode.py ... --configs A,B | grep '^{\\|rror' | \\
        tee -a $OUT/rows.jsonl | python3 benchmarks/profile_rows.py
"""

from __future__ import annotations

import json
import sys

FIELDS = ("num_tasks", "matrix_us", "loop_us", "fraction_of_copy", "same_bits", "status")


def row_line(line: str) -> str:
    """The printed form of one input line (no trailing newline)."""
    try:
        r = json.loads(line)
    except ValueError:
        return line.strip()[:200]
    label = r.get("config") or "FI-" + str(r.get("when", ""))
    head = [r.get("shape", ""), r.get("kv_dtype") or "", r.get("dist", ""), r.get("batch", ""),
            r.get("chunk", ""), label]
    return " ".join(str(v) for v in head + [r.get(k) for k in FIELDS] if v != "")


def main() -> int:
    for line in sys.stdin:
        if line.strip():
            print(row_line(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Tables of the Export page, from a TuningResult and the export document (studies.export):
the plan preview of a batch and the engine targets' expressibility. Pure functions, no Streamlit.
"""

from __future__ import annotations

import json

import pandas as pd

from kvtune.dashboard.text import EMPTY

DEFAULT_PREVIEW_KV_LENS = "131072,2048,2048"
MAX_PREVIEW_REQUESTS = 4096
# Columns of an engine target's bucket entry that say where and whether, not what to set.
_TARGET_META = ("min_batch", "max_batch", "expressible", "reason")


def plan_preview(result, kv_text: str) -> dict:
    """The tuned heuristic's plan of one batch on the result's device and shape, as
    `kvtune plan --heuristic` gives it: bucket ("lo-hi"), num_tasks, grid_size, waves,
    max_splits, split_requests, schedule, ctas_per_sm, cta_slots, device, and `requests`: a
    table of kv_len, splits and tokens per piece per request.

    kv_text: comma-separated tokens per request, each 1..MAX_KV_LEN_TOKENS, at most
    MAX_PREVIEW_REQUESTS requests. ValueError naming the field otherwise."""
    from kvtune.kernels.plan import MAX_KV_LEN_TOKENS, AttentionShape, DeviceSpec
    from kvtune.kernels.policies import describe_plan
    from kvtune.kernels.specs import parse_int_list

    kv_lens = parse_int_list(kv_text or "", "kv_lens", 1, MAX_KV_LEN_TOKENS)
    if not kv_lens:
        raise ValueError("kv_lens: give at least one request length (tokens)")
    if len(kv_lens) > MAX_PREVIEW_REQUESTS:
        raise ValueError(f"kv_lens: {len(kv_lens)} requests; allowed: 1..{MAX_PREVIEW_REQUESTS}")
    device = DeviceSpec(**result.device)
    shape = AttentionShape(**result.shape)
    plan = result.tuned_policy().plan(kv_lens, shape, device)
    info = describe_plan(plan, device)
    notes = plan.notes
    bucket = (
        f"{notes['bucket_min_batch']}-{notes['bucket_max_batch']}"
        if "bucket_min_batch" in notes
        else EMPTY
    )
    splits = info["splits_per_request"]
    requests = pd.DataFrame(
        {
            "request": range(len(kv_lens)),
            "kv_len": kv_lens,
            "splits": splits,
            "tokens_per_piece": [-(-kv // s) for kv, s in zip(kv_lens, splits)],
        }
    )
    return {
        "bucket": bucket,
        "requests": requests,
        **{
            k: info[k]
            for k in (
                "num_tasks",
                "grid_size",
                "waves",
                "max_splits",
                "split_requests",
                "schedule",
                "ctas_per_sm",
                "cta_slots",
                "device",
            )
        },
    }


def _setting_text(entry: dict) -> str:
    """What to set, from a target entry's other keys: `key=value` pairs (dicts flattened),
    an em dash when there is nothing to set."""
    parts = []
    for key, value in entry.items():
        if key in _TARGET_META or value is None:
            continue
        if isinstance(value, dict):
            inner = ", ".join(f"{k}={v}" for k, v in value.items() if v is not None)
            if inner:
                parts.append(f"{key}: {inner}")
        elif isinstance(value, list):
            parts.append(f"{key}={json.dumps(value)}")
        else:
            parts.append(f"{key}={value}")
    return "; ".join(parts) or EMPTY


def targets_table(targets: dict) -> pd.DataFrame:
    """One row per engine target and scope (a bucket's batch range, or `process-wide`):
    engine, kernel, batches, expressible (yes / no), setting (what to set where it can, the
    knob-for-knob values otherwise) and reason. targets: the export document's `targets`."""
    rows = []
    for engine, target in targets.items():
        if not isinstance(target, dict):
            continue  # max_kv_len_tokens, domain: shown beside the table
        kernel = target.get("kernel", EMPTY)
        scoped = []
        if isinstance(target.get("process_wide"), dict):
            scoped.append(("process-wide", target["process_wide"]))
        for entry in target.get("buckets") or ():
            if isinstance(entry, dict):
                scoped.append((f"{entry.get('min_batch', '?')}-{entry.get('max_batch', '?')}", entry))
        for batches, entry in scoped:
            expressible = entry.get("expressible")
            rows.append(
                {
                    "engine": engine,
                    "kernel": kernel,
                    "batches": batches,
                    "expressible": EMPTY if expressible is None else ("yes" if expressible else "no"),
                    "setting": _setting_text(entry),
                    "reason": entry.get("reason") or EMPTY,
                }
            )
    return pd.DataFrame(
        rows, columns=["engine", "kernel", "batches", "expressible", "setting", "reason"]
    )


__all__ = ["DEFAULT_PREVIEW_KV_LENS", "plan_preview", "targets_table"]

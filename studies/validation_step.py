"""The validation step of a bucket at the end of `kvtune tune` (studies/validation.py has the
rules): measure the winner, the engine default and the baselines on the bucket's held-out cases,
then keep the tuned rule or defer to the engine's own planner."""

from __future__ import annotations

from kvtune.studies.study import stderr_line
from kvtune.studies.validation import (
    DEFAULT_LABEL,
    assign_to_buckets,
    defer_decision,
    measure_validation,
    validation_summary,
)


def validate_bucket(ctx, bucket, train_cases, tuned_policy, recorder, study_name: str):
    """(family, validation dict or None) of one bucket. family is "defer" when the engine
    default wins, else "" (the table's rule). With --validate none the decision is made on the
    training cases and the dict says so (source "training")."""
    config = ctx.config
    buckets = [b for b, _ in ctx.buckets]
    held = assign_to_buckets(ctx.validation or [], buckets).get(bucket.name, [])
    source = "validation"
    if not ctx.validation:
        held, source = list(train_cases), "training"
    if not held:
        stderr_line(f"bucket {bucket.name}: no validation case falls in it; the tuned rule is kept "
                    "unchecked")
        return "", None
    case_us, noise = measure_validation(ctx.runner, held, tuned_policy, ctx.baselines, recorder,
                                        study_name=study_name, bucket=bucket.name,
                                        rounds=config.finalist_rounds)
    deferred, reason = defer_decision(held, case_us, noise)
    if deferred:
        stderr_line(f"bucket {bucket.name}: defers to the engine's own planner ({reason})")
    labels = [label for label, _ in ctx.baselines]
    summary = validation_summary(held, case_us, labels, DEFAULT_LABEL if deferred else "tuned",
                                 noise, deferred, reason, source)
    summary["how"] = ctx.validation_how
    return ("defer" if deferred else ""), summary


__all__ = ["validate_bucket"]

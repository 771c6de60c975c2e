"""The validation step of a bucket at the end of `kvtune tune` (studies/validation.py has the
rules): measure the winner, the engine default and the baselines on the bucket's held-out cases,
then keep the tuned rule or defer to the engine's own planner. When the winner defers, up to
MAX_RUNNERS_UP other finalists that were safe on the training cases are tried on the same held-out
cases in order (validate_with_runners_up); the first that passes ships, and its validation says
that it was chosen there."""

from __future__ import annotations

from kvtune.studies.study import stderr_line
from kvtune.studies.validation import (
    DEFAULT_LABEL,
    assign_to_buckets,
    defer_decision,
    measure_validation,
    validation_summary,
)


# Finalists tried on the held-out cases after the winner defers there. Why: a bucket's finalists
# count different CTA slots per SM (studies/finalists.py MAKESPAN_CTAS_PER_SM) and the one that
# wins on the training mix can lose on one held-out batch that another plans right (H200, fp8,
# twenty-sixth session: the 2-slot makespan rule cut arxiv B=48 and the whole 33-128 bucket
# deferred, 1.37x slower than the rule in geomean on its other held-out traces). Each try costs one
# more validation measurement; two keep a bucket's validation within about three times its cost.
MAX_RUNNERS_UP = 2


def validate_with_runners_up(ctx, bucket, train_cases, policies, recorder, study_name: str):
    """(position, family, validation) for `policies`, [(label, policy)] with the winner first and
    its runners-up after (studies.finalists.runners_up): validate_bucket on the winner and, while
    it defers on held-out cases, on the next one, at most MAX_RUNNERS_UP more. position: the
    index in `policies` of the one that ships, or 0 when all defer (then family is "defer" and
    the validation is the winner's). A runner-up that ships has `runner_up` in its validation:
    the winner it replaces and why that one deferred; its held-out numbers are then those it
    was chosen on, no longer an independent check (the dict says so)."""
    first_family, first = validate_bucket(ctx, bucket, train_cases, policies[0][1], recorder,
                                          study_name, attempt=0)
    if first_family != "defer" or first is None or first.get("source") != "validation":
        return 0, first_family, first
    for position, (label, policy) in enumerate(policies[1:MAX_RUNNERS_UP + 1], start=1):
        stderr_line(f"bucket {bucket.name}: trying runner-up {position} on the held-out cases: "
                    f"{label}")
        family, validation = validate_bucket(ctx, bucket, train_cases, policy, recorder,
                                             study_name, attempt=position)
        if family != "defer":
            validation["runner_up"] = {
                "position": position, "label": label, "replaces": policies[0][0],
                "winner_reason": first["reason"],
                "note": "chosen among the finalists on these held-out cases after the winner "
                        "deferred on them: they are not an independent check of this rule"}
            stderr_line(f"bucket {bucket.name}: runner-up {position} ships ({label})")
            return position, family, validation
    return 0, first_family, first


def validate_bucket(ctx, bucket, train_cases, tuned_policy, recorder, study_name: str,
                    attempt: int = 0):
    """(family, validation dict or None) of one bucket. family is "defer" when the engine
    default wins, else "" (the table's rule). With --validate none the decision is made on the
    training cases and the dict says so (source "training"). attempt: 0 for the winner, k for
    its k-th runner-up (the rows' validation_attempt)."""
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
                                        rounds=config.finalist_rounds, attempt=attempt)
    deferred, reason = defer_decision(held, case_us, noise)
    if deferred:
        stderr_line(f"bucket {bucket.name}: defers to the engine's own planner ({reason})")
    labels = [label for label, _ in ctx.baselines]
    summary = validation_summary(held, case_us, labels, DEFAULT_LABEL if deferred else "tuned",
                                 noise, deferred, reason, source)
    summary["how"] = ctx.validation_how
    return ("defer" if deferred else ""), summary


__all__ = ["MAX_RUNNERS_UP", "validate_bucket", "validate_with_runners_up"]

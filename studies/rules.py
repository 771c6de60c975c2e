"""Which split rule a study plans its configurations with, on a given backend.

A study samples SplitParams (studies/space.py); what a configuration means as a plan depends on
what the backend can run. A backend may declare, besides the space hooks of studies/space.py:
  split_rule: one of kernels.parametric.RULES (default "parametric"): the rule of the tuned
      table (BucketedPolicy) that the run's result and its export carry;
  split_policy(params) -> Policy: the plan rule of one configuration on this backend (default:
      kernels.parametric.rule_policy(split_rule, params)).
The flashinfer backend, for instance, runs one chunk per batch: split_rule "fixed-chunk", and
split_policy gives FixedSplitPolicy(min_tokens_per_cta). Every trial, finalist and oracle seed is
planned with `trial_policy`, so what was measured is what the tuned table plans.
"""

from __future__ import annotations

import numpy as np

from kvtune.kernels.parametric import PARAMETRIC_RULE, RULES, rule_policy
from kvtune.kernels.plan import SplitParams


def split_rule(backend) -> str:
    """The backend's declared split rule (default "parametric"); ValueError for an unknown one."""
    rule = getattr(backend, "split_rule", None) or PARAMETRIC_RULE
    if rule not in RULES:
        raise ValueError(f"backend.split_rule: {rule!r} unknown; allowed: {', '.join(RULES)}")
    return rule


def trial_policy(backend, params: SplitParams):
    """The Policy a study measures configuration `params` with on `backend`."""
    hook = getattr(backend, "split_policy", None)
    if callable(hook):
        return hook(params)
    return rule_policy(split_rule(backend), params)


def rule_mismatch(backend, params: SplitParams, cases, device) -> str | None:
    """Why the tuned table's rule would plan a case otherwise than the trials measured it, or
    None. cases: harness.runner.CaseRun. Guards a backend whose split_policy and split_rule
    disagree, which would make the exported heuristic plan something never measured."""
    measured = trial_policy(backend, params)
    tuned = rule_policy(split_rule(backend), params)
    for case in cases:
        kv, shape = case.batch.kv_lens, case.batch.shape
        a, b = measured.plan(kv, shape, device), tuned.plan(kv, shape, device)
        same = (a.schedule == b.schedule and a.ctas_per_sm == b.ctas_per_sm
                and a.grid_size == b.grid_size
                and all(np.array_equal(getattr(a, f), getattr(b, f))
                        for f in ("splits", "work_request", "work_kv_start", "work_kv_end")))
        if not same:
            return (f"backend {backend.name}: split_policy({params}) plans {case.case_id} "
                    f"otherwise than rule {split_rule(backend)!r}; the tuned table would not plan "
                    "what was measured")
    return None


__all__ = ["rule_mismatch", "split_rule", "trial_policy"]

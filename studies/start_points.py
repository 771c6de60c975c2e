"""Start points: the parametric configurations closest to the field's heuristics.

They are enqueued before the sampler draws anything, so a study begins where the baselines are
and, because a start point is never pruned, ends no worse than the best of them.

What each approximates (kernels/baselines*.py hold the real rules):
  flashinfer-tensor-core  chunks of >= 128 tokens, one wave of 2 CTAs per SM, static order; its
                          own split cap is the chunk size, so max_splits is left large (128).
  fa3                     128-token n-blocks, one wave of 1 CTA per SM, persistent grid taking the
                          heaviest work first, up to 128 splits.
  trtllm-oversub          chunks of >= 2048 tokens, up to 16 waves, at most 32 splits, 1 CTA per SM.
  fixed-split (2048)      chunks of 2048 tokens whatever the batch: caps as large as the space
                          allows, so only the 2048-token floor binds; every resident CTA (8 per SM).
Each is projected onto the study's space (space.project), and duplicates are dropped.
"""

from __future__ import annotations

from kvtune.kernels.plan import SplitParams
from kvtune.studies.space import SearchSpace, project

# In the order they are enqueued: the one measured closest to the per-case best first, so a
# search cut short (--timeout-s, a few trials) still starts where the GPU says the good region is.
# docs/PERFORMANCE.md (H200 and H100, 2026-11-26, Triton kernel): fixed 2048-token chunks were
# within 0.2-1.7% of the per-case best in geomean on the threshold and prod-mix suites, trtllm-oversub
# 1.19-2.30x off, the flashinfer-tensor-core plan 1.42-3.59x, fa3 1.30-1.83x. An H200 tuning run cut
# to 2-4 trials per bucket (07:37 UTC) with the old order (flashinfer, fa3, trtllm-oversub,
# fixed-split) ran only the flashinfer and fa3 approximations in its two largest buckets.
BASELINE_APPROXIMATIONS: dict[str, SplitParams] = {
    "fixed-split": SplitParams(min_tokens_per_cta=2048, max_waves=16, max_splits=128,
                               ctas_per_sm=8, schedule="static"),
    "trtllm-oversub": SplitParams(min_tokens_per_cta=2048, max_waves=16, max_splits=32,
                                  ctas_per_sm=1, schedule="static"),
    "flashinfer-tensor-core": SplitParams(min_tokens_per_cta=128, max_waves=1, max_splits=128,
                                          ctas_per_sm=2, schedule="static"),
    "fa3": SplitParams(min_tokens_per_cta=128, max_waves=1, max_splits=128, ctas_per_sm=1,
                       schedule="persistent-heavy-first"),
}


def start_points(space: SearchSpace) -> list[tuple[str, SplitParams]]:
    """(baseline name, configuration in `space`) for every approximated baseline, without
    duplicates (a configuration that two baselines share keeps the first name)."""
    out: list[tuple[str, SplitParams]] = []
    seen = set()
    for name, params in BASELINE_APPROXIMATIONS.items():
        projected = project(params, space)
        if projected in seen:
            continue
        seen.add(projected)
        out.append((name, projected))
    return out


__all__ = ["BASELINE_APPROXIMATIONS", "start_points"]

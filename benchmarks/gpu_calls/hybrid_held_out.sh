#!/usr/bin/env bash
# The 15 hybrid batches that no suite holds (eleventh session's list: other decode counts, chunk
# and context sizes, continuous-batching seeds 300-301, speculative decodes), each through
# `kvtune bench` with a hybrid file beside kvtune's serial step in the same process. Timer: CUDA
# events, cold L2, one guard retry. ROUNDS: alternated rounds per case (kvtune bench --rounds;
# default 1, as the calls before the twenty-third session ran it; give ROUNDS=2 for a "never > 2%
# slower" verdict, which one round cannot resolve: docs/PERFORMANCE.md). Rows go to
# OUT_DIR/bench. MORE_POLICIES (comma-separated) are measured beside them in the same processes.
# LAUNCH_ORDER (plan or longest-first): kvtune bench --launch-order, the order of the decodes'
# own launch (default: the product's, the plan's for hybrid batches; twenty-ninth session).
#   bash benchmarks/gpu_calls/hybrid_held_out.sh FILE OUT_DIR [TIMEOUT_S per command] [MORE_POLICIES]
file=${1:?FILE} out=${2:?OUT_DIR} limit=${3:-120} more=${4:+,$4}
P="--policies hybrid-serial,hybrid-tuned:path=$file$more --backend triton --timer events"
P="$P --stopping quiet_retries=1 --rounds ${ROUNDS:-1} --no-progress --out $out/bench"
[ -n "${LAUNCH_ORDER:-}" ] && P="$P --launch-order $LAUNCH_ORDER"
run() { timeout $limit python3 -m kvtune bench --distribution hybrid "$@" $P 2>&1 \
          | grep -v Warning | tail -16 | cut -c1-260; }
run --batch-sizes 24,40,96,192 --param chunk_tokens=1280 --param context_tokens=10240
run --batch-sizes 20,56,112 --param chunk_tokens=3072 --param context_tokens=5120
run --batch-sizes 48,80 --param chunk_tokens=2048 --param context_tokens=8192 --param decode_q_len=4
run --batch-sizes 64,128 --seeds 300,301 --param source=continuous --param step_token_budget=2560
run --batch-sizes 96 --seeds 300,301 --param source=continuous --param step_token_budget=3584 \
  --param draft_tokens=3 --param accept_rate=0.75

#!/usr/bin/env bash
# Session 19, call 7 (H100, right after call 6 on the same machine): FlashInfer's POD beside the
# hybrid file with the Gluon prefill tile back as it was in call 4 (commit b2459a5's kernel), on
# the 4K-context sweep cases, with s18_call6.sh's budget (call 4's 280 s left POD's warm-up too
# little time): serial, the H100 tuned file, FlashInfer serial and POD on B16 and B64.
#   bash benchmarks/gpu_calls/s19_call7.sh
exec bash benchmarks/gpu_calls/s18_call6.sh  # the same commands

#!/usr/bin/env bash
# Session 26, call 1 (H200): the fp8 re-tune from scratch (session 25's study was not kept),
# 420 s of tuning; the script resumes in the next call if the four buckets are not done.
bash benchmarks/gpu_calls/fp8_retune.sh 420
